//! What a compiled module's program was made from: each parameter and buffer of the source
//! module as it was (a detached view of its storage at the time) with its storage's version,
//! so that a changed weight (written in place, or given new storage by `set_data` or an
//! assigning `load_state_dict`) is noticed before the next call runs stale constants.

use crate::fx::GraphModule;
use crate::nn::ModuleExt;
use tessera_tensor::Tensor;

/// The source's parameters and buffers, in visiting order: detached views of the storage each
/// held (a handle's clone would follow `set_data` to new storage) and that storage's version.
pub(super) struct StateStamp(Vec<(Tensor, u64)>);

impl StateStamp {
    /// The state of `source` now.
    pub(super) fn of(source: &GraphModule) -> Self {
        StateStamp(
            state_tensors(source)
                .map(|t| {
                    let version = t.version();
                    (t.detach(), version)
                })
                .collect(),
        )
    }

    /// True when `source` holds the same storage in the same layout, unwritten since the stamp
    /// was taken.
    pub(super) fn is_current(&self, source: &GraphModule) -> bool {
        let mut stamped = self.0.iter();
        state_tensors(source).all(|t| {
            stamped.next().is_some_and(|(s, version)| {
                t.shares_storage(s) && t.layout() == s.layout() && t.version() == *version
            })
        }) && stamped.next().is_none()
    }
}

fn state_tensors(source: &GraphModule) -> impl Iterator<Item = Tensor> {
    let parameters = source.parameter_tensors();
    let buffers = source.buffers();
    parameters.into_iter().chain(buffers)
}
