//! State dicts inside general checkpoint values: a state dict is a dict of name -> tensor
//! (its `_metadata` versions do not travel inside a [`Value`]).

use indexmap::IndexMap;

use crate::{Key, NnError, StateDict, Value};

impl From<&StateDict> for Value {
    fn from(state: &StateDict) -> Value {
        Value::Dict(
            state
                .iter()
                .map(|(k, t)| (Key::from(k), Value::Tensor(t.clone())))
                .collect::<IndexMap<_, _>>(),
        )
    }
}

impl TryFrom<&Value> for StateDict {
    type Error = NnError;

    /// A dict whose keys are strings and whose values are all tensors.
    fn try_from(value: &Value) -> Result<StateDict, NnError> {
        let dict = value
            .as_dict()
            .ok_or_else(|| NnError::Invalid("a state dict must be a dict".into()))?;
        let mut state = StateDict::new();
        for (key, v) in dict {
            let Key::Str(name) = key else {
                return Err(NnError::Invalid(format!(
                    "state dict key {key} is not a string"
                )));
            };
            let tensor = v.as_tensor().ok_or_else(|| {
                NnError::Invalid(format!("state dict entry {name} is not a tensor"))
            })?;
            state.insert(name.clone(), tensor.clone());
        }
        Ok(state)
    }
}
