//! Exact equality of loaded data: tensors bit for bit (so NaNs compare equal to themselves),
//! state dicts key by key in order, checkpoint values structurally.

use tessera_nn::{StateDict, Value};
use tessera_tensor::{DType, Tensor};

/// Every element of `t` as its bit pattern, widened to `u64`.
fn bits(t: &Tensor) -> Option<Vec<u64>> {
    Some(match t.dtype() {
        DType::Bool => t
            .to_vec::<bool>()
            .ok()?
            .into_iter()
            .map(u64::from)
            .collect(),
        DType::U8 => t.to_vec::<u8>().ok()?.into_iter().map(u64::from).collect(),
        DType::I8 => t
            .to_vec::<i8>()
            .ok()?
            .into_iter()
            .map(|v| v as u64)
            .collect(),
        DType::I32 => t
            .to_vec::<i32>()
            .ok()?
            .into_iter()
            .map(|v| v as u64)
            .collect(),
        DType::I64 => t
            .to_vec::<i64>()
            .ok()?
            .into_iter()
            .map(|v| v as u64)
            .collect(),
        DType::F16 => t
            .to_vec::<half::f16>()
            .ok()?
            .into_iter()
            .map(|v| u64::from(v.to_bits()))
            .collect(),
        DType::BF16 => t
            .to_vec::<half::bf16>()
            .ok()?
            .into_iter()
            .map(|v| u64::from(v.to_bits()))
            .collect(),
        DType::F32 => t
            .to_vec::<f32>()
            .ok()?
            .into_iter()
            .map(|v| u64::from(v.to_bits()))
            .collect(),
        DType::F64 => t
            .to_vec::<f64>()
            .ok()?
            .into_iter()
            .map(f64::to_bits)
            .collect(),
    })
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
