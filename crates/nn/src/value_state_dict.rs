//! [`ValueStateDict`]: a state dict whose entries are any checkpoint values, for modules
//! whose PyTorch state holds more than plain tensors (quantized weights, packed parameters).

use indexmap::IndexMap;

use crate::{StateDict, Value};

/// Qualified name -> value, in PyTorch's order, with `_metadata` versions as [`StateDict`].
/// PyTorch's quantized modules read their versions: a quantized linear's `_packed_params`
/// loads only with version 3.
#[derive(Debug, Clone, Default)]
pub struct ValueStateDict {
    pub entries: IndexMap<String, Value>,
    pub metadata: IndexMap<String, i64>,
}

impl From<&StateDict> for ValueStateDict {
    fn from(state: &StateDict) -> Self {
        ValueStateDict {
            entries: state
                .iter()
                .map(|(k, t)| (k.to_string(), Value::Tensor(t.clone())))
                .collect(),
            metadata: state.metadata.clone(),
        }
    }
}
