//! Exact equality of loaded data: tensors bit for bit (so NaNs compare equal to themselves),
//! state dicts key by key in order, checkpoint values structurally.

use tessera_nn::{StateDict, Value};
use tessera_tensor::storage::StorageElement;
use tessera_tensor::{DType, Tensor};

/// Every element of `t` as its bit pattern, widened to `u64`.
fn bits(t: &Tensor) -> Option<Vec<u64>> {
    match t.dtype() {
        DType::Bool => widened(t, |v: bool| u64::from(v)),
        DType::U8 => widened(t, |v: u8| u64::from(v)),
        DType::I8 => widened(t, |v: i8| v as u64),
        DType::I32 => widened(t, |v: i32| v as u64),
        DType::I64 => widened(t, |v: i64| v as u64),
        DType::F16 => widened(t, |v: half::f16| u64::from(v.to_bits())),
        DType::BF16 => widened(t, |v: half::bf16| u64::from(v.to_bits())),
        DType::F32 => widened(t, |v: f32| u64::from(v.to_bits())),
        DType::F64 => widened(t, f64::to_bits),
    }
}

/// The elements of `t`, read as `T`, each mapped to a `u64` by `widen`.
fn widened<T: StorageElement>(t: &Tensor, widen: impl Fn(T) -> u64) -> Option<Vec<u64>> {
    Some(t.to_vec::<T>().ok()?.into_iter().map(widen).collect())
}

/// Same shape, dtype and bits.
pub fn same_tensor(a: &Tensor, b: &Tensor) -> bool {
    a.shape() == b.shape() && a.dtype() == b.dtype() && bits(a).is_some() && bits(a) == bits(b)
}

/// Same keys in the same order, same tensors and same module versions.
pub fn same_state_dict(a: &StateDict, b: &StateDict) -> bool {
    a.metadata == b.metadata
        && a.len() == b.len()
        && a.iter()
            .zip(b.iter())
            .all(|((ka, ta), (kb, tb))| ka == kb && same_tensor(ta, tb))
}

/// Structurally equal values; floats compare by bits.
pub fn same_value(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::None, Value::None) => true,
        (Value::Bool(x), Value::Bool(y)) => x == y,
        (Value::Int(x), Value::Int(y)) => x == y,
        (Value::Float(x), Value::Float(y)) => x.to_bits() == y.to_bits(),
        (Value::Str(x), Value::Str(y)) => x == y,
        (Value::Tensor(x), Value::Tensor(y)) => same_tensor(x, y),
        (Value::List(x), Value::List(y)) | (Value::Tuple(x), Value::Tuple(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| same_value(p, q))
        }
        (Value::Dict(x), Value::Dict(y)) => {
            x.len() == y.len()
                && x.iter()
                    .zip(y)
                    .all(|((kx, vx), (ky, vy))| kx == ky && same_value(vx, vy))
        }
        _ => false,
    }
}
