//! Host tensor storage as the little-endian bytes device memory holds, and back, for every
//! dtype (bool as one byte, 0 or 1), plus the byte-level gather and scatter of a strided
//! layout that copies of non-contiguous views use.

use half::{bf16, f16};
use tessera_tensor::DType;
use tessera_tensor::layout::Layout;
use tessera_tensor::storage::CpuStorage;

/// The elements of `host` as little-endian bytes.
pub(crate) fn to_bytes(host: &CpuStorage) -> Vec<u8> {
    fn le<T: Copy, const N: usize>(v: &[T], f: impl Fn(T) -> [u8; N]) -> Vec<u8> {
        v.iter().flat_map(|&x| f(x)).collect()
    }
    match host {
        CpuStorage::Bool(v) => v.iter().map(|&b| u8::from(b)).collect(),
        CpuStorage::U8(v) => v.clone(),
        CpuStorage::I8(v) => le(v, i8::to_le_bytes),
        CpuStorage::I32(v) => le(v, i32::to_le_bytes),
        CpuStorage::I64(v) => le(v, i64::to_le_bytes),
        CpuStorage::F16(v) => le(v, |x: f16| x.to_bits().to_le_bytes()),
        CpuStorage::BF16(v) => le(v, |x: bf16| x.to_bits().to_le_bytes()),
        CpuStorage::F32(v) => le(v, f32::to_le_bytes),
        CpuStorage::F64(v) => le(v, f64::to_le_bytes),
    }
}

/// Elements of `dtype` from little-endian `bytes` (a whole number of elements).
pub(crate) fn from_bytes(dtype: DType, bytes: &[u8]) -> CpuStorage {
    fn parse<T, const N: usize>(bytes: &[u8], f: impl Fn([u8; N]) -> T) -> Vec<T> {
        bytes
            .chunks_exact(N)
            .map(|c| {
                let mut a = [0u8; N];
                a.copy_from_slice(c);
                f(a)
            })
            .collect()
    }
    match dtype {
        DType::Bool => CpuStorage::Bool(bytes.iter().map(|&b| b != 0).collect()),
        DType::U8 => CpuStorage::U8(bytes.to_vec()),
        DType::I8 => CpuStorage::I8(parse(bytes, i8::from_le_bytes)),
        DType::I32 => CpuStorage::I32(parse(bytes, i32::from_le_bytes)),
        DType::I64 => CpuStorage::I64(parse(bytes, i64::from_le_bytes)),
        DType::F16 => CpuStorage::F16(parse(bytes, |b| f16::from_bits(u16::from_le_bytes(b)))),
        DType::BF16 => CpuStorage::BF16(parse(bytes, |b| bf16::from_bits(u16::from_le_bytes(b)))),
        DType::F32 => CpuStorage::F32(parse(bytes, f32::from_le_bytes)),
        DType::F64 => CpuStorage::F64(parse(bytes, f64::from_le_bytes)),
    }
}

/// The storage elements `layout` reaches, `offset..storage_extent`: the span a strided copy
/// moves (0..0 when the view is empty).
pub(crate) fn span(layout: &Layout) -> std::ops::Range<usize> {
    let end = layout.storage_extent();
    if end == 0 { 0..0 } else { layout.offset..end }
}

/// The elements of `layout`, packed row-major, from `span_bytes` (the bytes of its span).
pub(crate) fn gather(span_bytes: &[u8], layout: &Layout, element: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(layout.numel() * element);
    for o in layout.offsets() {
        let at = (o - layout.offset) * element;
        out.extend_from_slice(&span_bytes[at..at + element]);
    }
    out
}

/// Writes `packed` (row-major elements of `layout`) into `span_bytes` (its span).
pub(crate) fn scatter(span_bytes: &mut [u8], layout: &Layout, element: usize, packed: &[u8]) {
    for (i, o) in layout.offsets().enumerate() {
        let at = (o - layout.offset) * element;
        span_bytes[at..at + element].copy_from_slice(&packed[i * element..(i + 1) * element]);
    }
}
