//! Tensors to and from raw little-endian bytes, the one encoding both checkpoint formats
//! store; decoding goes through `from_le_bytes`, never through unaligned casts.

use half::{bf16, f16};
use tessera_tensor::storage::StorageElement;
use tessera_tensor::{DType, Device, Tensor, TensorError};

/// An element type with a fixed little-endian byte encoding.
trait LeBytes: StorageElement {
    fn put(self, out: &mut Vec<u8>);
    /// Decodes one element from exactly `size_in_bytes` bytes.
    fn get(bytes: &[u8]) -> Self;
}

macro_rules! le_bytes {
    ($($t:ty),*) => {$(
        impl LeBytes for $t {
            fn put(self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_le_bytes());
            }
            fn get(bytes: &[u8]) -> Self {
                let mut raw = [0u8; size_of::<$t>()];
                raw.copy_from_slice(bytes);
                <$t>::from_le_bytes(raw)
            }
        }
    )*};
}

le_bytes!(u8, i8, i32, i64, f16, bf16, f32, f64);

impl LeBytes for bool {
    fn put(self, out: &mut Vec<u8>) {
        out.push(self as u8);
    }
    fn get(bytes: &[u8]) -> Self {
        bytes[0] != 0
    }
}

/// Calls `$f::<T>($args)` with `T` the Rust type of `$dtype`.
macro_rules! dispatch {
    ($dtype:expr, $f:ident($($args:expr),*)) => {
        match $dtype {
            DType::Bool => $f::<bool>($($args),*),
            DType::U8 => $f::<u8>($($args),*),
            DType::I8 => $f::<i8>($($args),*),
            DType::I32 => $f::<i32>($($args),*),
            DType::I64 => $f::<i64>($($args),*),
            DType::F16 => $f::<f16>($($args),*),
            DType::BF16 => $f::<bf16>($($args),*),
            DType::F32 => $f::<f32>($($args),*),
            DType::F64 => $f::<f64>($($args),*),
        }
    };
}

/// The elements of `tensor` in row-major order as little-endian bytes (gathered when the
/// tensor is a strided view, copied to the host when it lives on a device).
pub(crate) fn tensor_to_le_bytes(tensor: &Tensor) -> Result<Vec<u8>, TensorError> {
    fn go<T: LeBytes>(t: &Tensor) -> Result<Vec<u8>, TensorError> {
        t.with_slice(|s: &[T]| {
            let mut out = Vec::with_capacity(std::mem::size_of_val(s));
            for &v in s {
                v.put(&mut out);
            }
            out
        })
    }
    let host;
    let tensor = if tensor.device() == Device::Cpu {
        tensor
    } else {
        host = tensor.to_device(Device::Cpu)?;
        &host
    };
    dispatch!(tensor.dtype(), go(tensor))
}

/// A contiguous tensor of `shape` whose element `i` is decoded from the bytes of element
/// `offsets[i]` of `bytes`. The caller guarantees every offset lies inside `bytes`.
pub(crate) fn tensor_from_le_bytes(
    dtype: DType,
    bytes: &[u8],
    offsets: impl Iterator<Item = usize>,
    shape: &[usize],
) -> Result<Tensor, TensorError> {
    fn go<T: LeBytes>(
        bytes: &[u8],
        offsets: impl Iterator<Item = usize>,
        shape: &[usize],
    ) -> Result<Tensor, TensorError> {
        let size = size_of::<T>();
        let data: Vec<T> = offsets
            .map(|o| T::get(&bytes[o * size..(o + 1) * size]))
            .collect();
        Tensor::from_vec(data, shape)
    }
    dispatch!(dtype, go(bytes, offsets, shape))
}
