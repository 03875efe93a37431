//! `StateDict`: the ordered name -> tensor map that `Module::state_dict` returns and
//! checkpoints store, with PyTorch's `_metadata` (per-module versions).

use indexmap::IndexMap;
use tessera_tensor::Tensor;

/// Parameters and persistent buffers by qualified name (`linear.weight`,
/// `bn.num_batches_tracked`), in PyTorch's order.
#[derive(Debug, Clone, Default)]
pub struct StateDict {
    pub entries: IndexMap<String, Tensor>,
    /// Module prefix (`""`, `"bn1"`) -> version, as PyTorch's `state_dict._metadata`.
    pub metadata: IndexMap<String, i64>,
    /// Non-tensor extra state by key (`<prefix>_extra_state`), from `get_extra_state`.
    pub extra: IndexMap<String, crate::Value>,
}

impl StateDict {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn insert(&mut self, key: impl Into<String>, tensor: Tensor) {
        self.entries.insert(key.into(), tensor);
    }

    crate::containers::ordered_map_reads!(entries: Tensor);
}

impl FromIterator<(String, Tensor)> for StateDict {
    fn from_iter<I: IntoIterator<Item = (String, Tensor)>>(iter: I) -> Self {
        StateDict {
            entries: iter.into_iter().collect(),
            metadata: IndexMap::new(),
            extra: IndexMap::new(),
        }
    }
}
