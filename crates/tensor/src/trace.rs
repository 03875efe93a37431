//! The hook through which tracing sees ops: while a recorder is installed on a thread,
//! every op applied to a meta tensor is reported to it with its inputs and outputs
//! (DESIGN.md decision 2: dispatch decides between computing and recording).

use crate::{Op, Restore, Result, Tensor};
use std::cell::RefCell;
use std::sync::Arc;

/// Receives the ops applied to meta tensors while installed with [`with_recorder`].
pub trait TraceRecorder {
    /// Called after `op` produced `outputs` (meta tensors) from `inputs` (meta tensors, or
    /// real ones such as parameters). An error aborts the op with it.
    fn record(&self, op: &Op, inputs: &[&Tensor], outputs: &[Tensor]) -> Result<()>;
}

thread_local! {
    static RECORDER: RefCell<Option<Arc<dyn TraceRecorder>>> = const { RefCell::new(None) };
}

/// Runs `f` with `recorder` receiving the ops on meta tensors, then restores the previous one.
pub fn with_recorder<R>(recorder: Arc<dyn TraceRecorder>, f: impl FnOnce() -> R) -> R {
    let _restore = Restore::set(&RECORDER, Some(recorder));
    f()
}

/// Runs `f` with no recorder (so that what it does is not recorded), then restores it.
pub fn without_recorder<R>(f: impl FnOnce() -> R) -> R {
    let _restore = Restore::set(&RECORDER, None);
    f()
}

/// Reports an op to the installed recorder, if any.
pub(crate) fn record(op: &Op, inputs: &[&Tensor], outputs: &[Tensor]) -> Result<()> {
    let recorder = RECORDER.with(|r| r.borrow().clone());
    match recorder {
        Some(r) => r.record(op, inputs, outputs),
        None => Ok(()),
    }
}
