//! Host memory: the typed buffers that CPU tensors (and every view of them) share, and the
//! element types that know their buffer variant.

use crate::{DType, Element};
use half::{bf16, f16};

/// A typed buffer in host memory.
#[derive(Debug, Clone, PartialEq)]
pub enum CpuStorage {
    Bool(Vec<bool>),
    U8(Vec<u8>),
    I8(Vec<i8>),
    I32(Vec<i32>),
    I64(Vec<i64>),
    F16(Vec<f16>),
    BF16(Vec<bf16>),
    F32(Vec<f32>),
    F64(Vec<f64>),
}

/// Calls `$body` with `$v` bound to the typed vector inside a [`CpuStorage`].
macro_rules! with_cpu_vec {
    ($storage:expr, $v:ident => $body:expr) => {
        match $storage {
            $crate::storage::CpuStorage::Bool($v) => $body,
            $crate::storage::CpuStorage::U8($v) => $body,
            $crate::storage::CpuStorage::I8($v) => $body,
            $crate::storage::CpuStorage::I32($v) => $body,
            $crate::storage::CpuStorage::I64($v) => $body,
            $crate::storage::CpuStorage::F16($v) => $body,
            $crate::storage::CpuStorage::BF16($v) => $body,
            $crate::storage::CpuStorage::F32($v) => $body,
            $crate::storage::CpuStorage::F64($v) => $body,
        }
    };
}

/// Element types that know their [`CpuStorage`] variant.
pub trait StorageElement: Element {
    fn wrap(v: Vec<Self>) -> CpuStorage;
    fn slice(s: &CpuStorage) -> Option<&[Self]>;
    fn slice_mut(s: &mut CpuStorage) -> Option<&mut [Self]>;
    fn unwrap(s: CpuStorage) -> Option<Vec<Self>>;
}

macro_rules! storage_element {
    ($t:ty, $variant:ident) => {
        impl StorageElement for $t {
            fn wrap(v: Vec<Self>) -> CpuStorage {
                CpuStorage::$variant(v)
            }
            fn slice(s: &CpuStorage) -> Option<&[Self]> {
                match s {
                    CpuStorage::$variant(v) => Some(v),
                    _ => None,
                }
            }
            fn slice_mut(s: &mut CpuStorage) -> Option<&mut [Self]> {
                match s {
                    CpuStorage::$variant(v) => Some(v),
                    _ => None,
                }
            }
            fn unwrap(s: CpuStorage) -> Option<Vec<Self>> {
                match s {
                    CpuStorage::$variant(v) => Some(v),
                    _ => None,
                }
            }
        }
    };
}
storage_element!(bool, Bool);
storage_element!(u8, U8);
storage_element!(i8, I8);
storage_element!(i32, I32);
storage_element!(i64, I64);
storage_element!(f16, F16);
storage_element!(bf16, BF16);
storage_element!(f32, F32);
storage_element!(f64, F64);

impl CpuStorage {
    pub fn dtype(&self) -> DType {
        match self {
            CpuStorage::Bool(_) => DType::Bool,
            CpuStorage::U8(_) => DType::U8,
            CpuStorage::I8(_) => DType::I8,
            CpuStorage::I32(_) => DType::I32,
            CpuStorage::I64(_) => DType::I64,
            CpuStorage::F16(_) => DType::F16,
            CpuStorage::BF16(_) => DType::BF16,
            CpuStorage::F32(_) => DType::F32,
            CpuStorage::F64(_) => DType::F64,
        }
    }

    pub fn len(&self) -> usize {
        with_cpu_vec!(self, v => v.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A zero-filled buffer of `len` elements.
    pub fn zeros(dtype: DType, len: usize) -> CpuStorage {
        match dtype {
            DType::Bool => CpuStorage::Bool(vec![false; len]),
            DType::U8 => CpuStorage::U8(vec![0; len]),
            DType::I8 => CpuStorage::I8(vec![0; len]),
            DType::I32 => CpuStorage::I32(vec![0; len]),
            DType::I64 => CpuStorage::I64(vec![0; len]),
            DType::F16 => CpuStorage::F16(vec![f16::ZERO; len]),
            DType::BF16 => CpuStorage::BF16(vec![bf16::ZERO; len]),
            DType::F32 => CpuStorage::F32(vec![0.0; len]),
            DType::F64 => CpuStorage::F64(vec![0.0; len]),
        }
    }

    /// Like [`CpuStorage::zeros`], but `None` instead of aborting when the allocator cannot
    /// provide `len` elements.
    pub fn try_zeros(dtype: DType, len: usize) -> Option<CpuStorage> {
        fn zeroed<T: Clone + Default>(len: usize) -> Option<Vec<T>> {
            let mut v = Vec::new();
            v.try_reserve_exact(len).ok()?;
            v.resize(len, T::default());
            Some(v)
        }
        Some(match dtype {
            DType::Bool => CpuStorage::Bool(zeroed(len)?),
            DType::U8 => CpuStorage::U8(zeroed(len)?),
            DType::I8 => CpuStorage::I8(zeroed(len)?),
            DType::I32 => CpuStorage::I32(zeroed(len)?),
            DType::I64 => CpuStorage::I64(zeroed(len)?),
            DType::F16 => CpuStorage::F16(zeroed(len)?),
            DType::BF16 => CpuStorage::BF16(zeroed(len)?),
            DType::F32 => CpuStorage::F32(zeroed(len)?),
            DType::F64 => CpuStorage::F64(zeroed(len)?),
        })
    }

    /// Copies the elements in `range` into a new buffer of the same dtype.
    pub fn copy_range(&self, range: std::ops::Range<usize>) -> CpuStorage {
        fn go<T: StorageElement>(src: &[T], range: std::ops::Range<usize>) -> CpuStorage {
            let mut out = crate::buffer_cache::uninit_buffer::<T>(range.len());
            out.copy_from_slice(&src[range]);
            T::wrap(out)
        }
        with_cpu_vec!(self, src => go(src, range))
    }

    /// Hands a freed buffer to the buffer cache for reuse.
    pub(crate) fn recycle(self) {
        with_cpu_vec!(self, v => crate::buffer_cache::recycle(v))
    }

    /// Gathers the elements at `offsets` into a new buffer of the same dtype.
    pub fn gather(&self, offsets: impl Iterator<Item = usize>) -> CpuStorage {
        fn go<T: StorageElement>(src: &[T], offsets: impl Iterator<Item = usize>) -> CpuStorage {
            T::wrap(offsets.map(|o| src[o]).collect())
        }
        with_cpu_vec!(self, src => go(src, offsets))
    }

    /// Gathers the elements at `offsets` into a new buffer of another dtype.
    pub fn gather_cast(&self, offsets: impl Iterator<Item = usize>, dtype: DType) -> CpuStorage {
        if dtype == self.dtype() {
            return self.gather(offsets);
        }
        fn go<S: Element, D: StorageElement>(
            src: &[S],
            offsets: impl Iterator<Item = usize>,
        ) -> CpuStorage {
            D::wrap(offsets.map(|o| cast::<S, D>(src[o])).collect())
        }
        with_cpu_vec!(self, src => match dtype {
            DType::Bool => go::<_, bool>(src, offsets),
            DType::U8 => go::<_, u8>(src, offsets),
            DType::I8 => go::<_, i8>(src, offsets),
            DType::I32 => go::<_, i32>(src, offsets),
            DType::I64 => go::<_, i64>(src, offsets),
            DType::F16 => go::<_, f16>(src, offsets),
            DType::BF16 => go::<_, bf16>(src, offsets),
            DType::F32 => go::<_, f32>(src, offsets),
            DType::F64 => go::<_, f64>(src, offsets),
        })
    }
}

/// Converts one element as PyTorch's `.to(dtype)` does (floats truncate towards zero into ints,
/// anything non-zero is `true`).
#[inline]
pub fn cast<S: Element, D: Element>(v: S) -> D {
    D::from_f64(v.as_f64())
}
