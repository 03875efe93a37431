//! The hook through which tracing sees ops: while a recorder is installed on a thread,
//! every op applied to a meta tensor is reported to it with its inputs and outputs
//! (DESIGN.md decision 2: dispatch decides between computing and recording). State written
//! during a forward (batch norm's running statistics) goes through [`write_state`], which
//! copies eagerly and, while tracing, reports the write so the graph returns it as a buffer
//! mutation.

use crate::{Op, Restore, Result, Tensor, TensorError};
use std::cell::RefCell;
use std::sync::Arc;

/// Receives the ops applied to meta tensors while installed with [`with_recorder`].
pub trait TraceRecorder {
    /// Called after `op` produced `outputs` (meta tensors) from `inputs` (meta tensors, or
    /// real ones such as parameters). An error aborts the op with it.
    fn record(&self, op: &Op, inputs: &[&Tensor], outputs: &[Tensor]) -> Result<()>;

    /// Called when the forward gives the state tensor `target` (a buffer of the traced module)
    /// the new value `value` (a traced tensor); a recorder that cannot express it refuses.
    fn record_state_write(&self, target: &Tensor, value: &Tensor) -> Result<()> {
        let _ = value;
        Err(TensorError::invalid(
            "write_state",
            format!(
                "this recorder cannot record a write into state of shape {:?}",
                target.shape()
            ),
        ))
    }
}

/// Gives the state tensor `target` (a running statistic, a counter) the value `value`: a copy
/// in place (without autograd) when both are real; while tracing (either is a meta tensor)
/// the installed recorder records the write, which the traced graph returns as a buffer
/// mutation for its runner to write back after each call. A meta run with no recorder (a
/// shape-only call, such as a leaf module's while tracing) has nothing to write.
pub fn write_state(target: &Tensor, value: &Tensor) -> Result<()> {
    if !target.is_meta() && !value.is_meta() {
        let _guard = crate::no_grad();
        target.copy_(value)?;
        return Ok(());
    }
    let recorder = RECORDER.with(|r| r.borrow().clone());
    match recorder {
        Some(r) => r.record_state_write(target, value),
        None => Ok(()),
    }
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
