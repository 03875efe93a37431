//! [`StateSnapshot`]: an optimizer's per-parameter state as it was at one point, put back when
//! a step that changed it is abandoned.

use std::any::Any;

/// What an optimizer's per-parameter state held when [`crate::optim::Optimizer::save_state`]
/// took it: the state's entries and their tensor handles (not copies of the values, so taking
/// one is cheap). [`crate::optim::Optimizer::restore_state`] puts that structure back: entries a
/// step added since are dropped, and so are buffers it added to older entries (AMSGrad's
/// maximum, created by the first step after `amsgrad` was switched on). The values in the kept
/// tensors are whatever was written into them since: a snapshot undoes a step that recorded
/// its state but never ran, not one that ran.
pub struct StateSnapshot(Option<Box<dyn Any>>);

impl StateSnapshot {
    /// A snapshot of `state`, restored only into an optimizer whose state has the same type.
    pub fn new<S: Any>(state: S) -> Self {
        StateSnapshot(Some(Box::new(state)))
    }

    /// The snapshot of an optimizer that keeps no state: restoring it does nothing.
    pub fn empty() -> Self {
        StateSnapshot(None)
    }

    /// The state taken, when it is an `S`.
    pub fn into_state<S: Any>(self) -> Option<S> {
        self.0?.downcast::<S>().ok().map(|s| *s)
    }
}

impl std::fmt::Debug for StateSnapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self.0 {
            Some(_) => "StateSnapshot(..)",
            None => "StateSnapshot(empty)",
        })
    }
}
