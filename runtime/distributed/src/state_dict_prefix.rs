//! Moving state dicts between a `DistributedDataParallel` and its bare module: the wrapper's
//! keys carry `module.`, PyTorch's `consume_prefix_in_state_dict_if_present` strips it.

use tessera_nn::StateDict;

/// The state dict with `prefix` removed from every key that starts with it (keys without it
/// are kept as they are), so a checkpoint of a wrapped module loads into the bare one.
pub fn consume_prefix_in_state_dict_if_present(state_dict: &StateDict, prefix: &str) -> StateDict {
    state_dict
        .iter()
        .map(|(key, tensor)| {
            let key = key.strip_prefix(prefix).unwrap_or(key);
            (key.to_string(), tensor.clone())
        })
        .collect()
}
