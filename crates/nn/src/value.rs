//! Plain values that checkpoints and optimizer state hold besides tensors: the Rust side of
//! the Python objects `torch.save` writes (None, bool, int, float, str, list, tuple, dict).

use indexmap::IndexMap;
use tessera_tensor::Tensor;

/// A value in a checkpoint: a tensor or a plain container of values.
#[derive(Debug, Clone)]
pub enum Value {
    None,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    Tensor(Tensor),
    /// A quantized tensor (`torch.qint8`); `.pt` files write it, the reader refuses it.
    Quantized(crate::QuantizedTensor),
    /// A `torch.dtype` object such as `torch.qint8`.
    Dtype(crate::TorchDtype),
    List(Vec<Value>),
    Tuple(Vec<Value>),
    /// An insertion-ordered dict; keys are strings or ints (as in optimizer state).
    Dict(IndexMap<Key, Value>),
}

/// A dict key.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Key {
    Str(String),
    Int(i64),
}

impl From<&str> for Key {
    fn from(s: &str) -> Self {
        Key::Str(s.to_string())
    }
}

impl From<String> for Key {
    fn from(s: String) -> Self {
        Key::Str(s)
    }
}

impl From<i64> for Key {
    fn from(i: i64) -> Self {
        Key::Int(i)
    }
}

impl std::fmt::Display for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Key::Str(s) => f.write_str(s),
            Key::Int(i) => write!(f, "{i}"),
        }
    }
}

impl Value {
    /// An empty dict.
    pub fn dict() -> Value {
        Value::Dict(IndexMap::new())
    }

    pub fn as_dict(&self) -> Option<&IndexMap<Key, Value>> {
        match self {
            Value::Dict(d) => Some(d),
            _ => None,
        }
    }

    pub fn as_tensor(&self) -> Option<&Tensor> {
        match self {
            Value::Tensor(t) => Some(t),
            _ => None,
        }
    }

    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Value::Float(v) => Some(*v),
            Value::Int(v) => Some(*v as f64),
            _ => None,
        }
    }

    pub fn as_i64(&self) -> Option<i64> {
        match self {
            Value::Int(v) => Some(*v),
            _ => None,
        }
    }

    pub fn as_list(&self) -> Option<&[Value]> {
        match self {
            Value::List(v) | Value::Tuple(v) => Some(v),
            _ => None,
        }
    }

    /// The entry `key` of a dict.
    pub fn get(&self, key: impl Into<Key>) -> Option<&Value> {
        self.as_dict()?.get(&key.into())
    }
}
