//! Element types of tensors and the Rust types that hold them.

use half::{bf16, f16};
use std::fmt;

/// The element type of a tensor, as PyTorch names them.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub enum DType {
    Bool,
    U8,
    I8,
    I32,
    I64,
    F16,
    BF16,
    F32,
    F64,
}

impl DType {
    /// Every dtype, in promotion order.
    pub const ALL: [DType; 9] = [
        DType::Bool,
        DType::U8,
        DType::I8,
        DType::I32,
        DType::I64,
        DType::F16,
        DType::BF16,
        DType::F32,
        DType::F64,
    ];

    /// Bytes per element.
    pub fn size_in_bytes(self) -> usize {
        match self {
            DType::Bool | DType::U8 | DType::I8 => 1,
            DType::F16 | DType::BF16 => 2,
            DType::I32 | DType::F32 => 4,
            DType::I64 | DType::F64 => 8,
        }
    }

    /// True for f16, bf16, f32 and f64.
    pub fn is_float(self) -> bool {
        matches!(self, DType::F16 | DType::BF16 | DType::F32 | DType::F64)
    }

    /// The machine epsilon of a float dtype (`torch.finfo(dtype).eps`: the gap between 1 and
    /// the next representable value); `None` for the others.
    pub fn epsilon(self) -> Option<f64> {
        match self {
            DType::F16 => Some(9.765625e-4),
            DType::BF16 => Some(7.8125e-3),
            DType::F32 => Some(f32::EPSILON as f64),
            DType::F64 => Some(f64::EPSILON),
            _ => None,
        }
    }

    /// True for the integer types (not bool).
    pub fn is_int(self) -> bool {
        matches!(self, DType::U8 | DType::I8 | DType::I32 | DType::I64)
    }

    /// PyTorch's name, e.g. `torch.float32`.
    pub fn torch_name(self) -> &'static str {
        match self {
            DType::Bool => "torch.bool",
            DType::U8 => "torch.uint8",
            DType::I8 => "torch.int8",
            DType::I32 => "torch.int32",
            DType::I64 => "torch.int64",
            DType::F16 => "torch.float16",
            DType::BF16 => "torch.bfloat16",
            DType::F32 => "torch.float32",
            DType::F64 => "torch.float64",
        }
    }

    /// The dtype two operands are computed in (PyTorch's promotion for same-kind tensors:
    /// floats win over ints, wider wins; f16 with bf16 gives f32).
    pub fn promote(self, other: DType) -> DType {
        use DType::*;
        match (self, other) {
            (a, b) if a == b => a,
            (F16, BF16) | (BF16, F16) => F32,
            (U8, I8) | (I8, U8) => I32,
            (a, b) => a.max(b),
        }
    }
}

impl fmt::Display for DType {
    /// The short spelling used in printed graphs: `f32`, `i64`, `bool`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DType::Bool => "bool",
            DType::U8 => "u8",
            DType::I8 => "i8",
            DType::I32 => "i32",
            DType::I64 => "i64",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::F32 => "f32",
            DType::F64 => "f64",
        })
    }
}

/// A Rust type that can be the element of a tensor.
/// All-zero bytes are a valid value of every element type (`Zeroable`), which is zero (or
/// `false`): fresh buffers are zeroed by the allocator.
pub trait Element:
    Copy + Send + Sync + PartialOrd + fmt::Debug + Default + bytemuck::Zeroable + 'static
{
    const DTYPE: DType;
    fn as_f64(self) -> f64;
    fn from_f64(v: f64) -> Self;
}

macro_rules! element {
    ($t:ty, $dtype:ident, |$v:ident| $to:expr, |$w:ident| $from:expr) => {
        impl Element for $t {
            const DTYPE: DType = DType::$dtype;
            #[inline]
            fn as_f64(self) -> f64 {
                let $v = self;
                $to
            }
            #[inline]
            fn from_f64($w: f64) -> Self {
                $from
            }
        }
    };
}

element!(f32, F32, |v| v as f64, |w| w as f32);
element!(f64, F64, |v| v, |w| w);
// A half type is made from an f64 through f32 (rounding to nearest even twice), as PyTorch's
// CPU cast does, on every machine: `half`'s own `from_f64` takes that path only where the CPU
// has F16C, and elsewhere (and always for bf16) drops the low 32 mantissa bits before rounding.
element!(f16, F16, |v| v.to_f64(), |w| f16::from_f32(w as f32));
element!(bf16, BF16, |v| v.to_f64(), |w| bf16::from_f32(w as f32));
element!(i64, I64, |v| v as f64, |w| w as i64);
element!(i32, I32, |v| v as f64, |w| w as i32);
element!(i8, I8, |v| v as f64, |w| w as i8);
element!(u8, U8, |v| v as f64, |w| w as u8);
element!(bool, Bool, |v| if v { 1.0 } else { 0.0 }, |w| w != 0.0);

/// A float type with native kernels (f32 and f64; f16/bf16 compute in f32).
pub trait Float:
    crate::storage::StorageElement + num_traits::Float + num_traits::FloatConst + std::iter::Sum
{
}
impl Float for f32 {}
impl Float for f64 {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn promote_follows_pytorch() {
        assert_eq!(DType::F32.promote(DType::I64), DType::F32);
        assert_eq!(DType::F16.promote(DType::BF16), DType::F32);
        assert_eq!(DType::I32.promote(DType::I64), DType::I64);
        assert_eq!(DType::Bool.promote(DType::U8), DType::U8);
    }
}
