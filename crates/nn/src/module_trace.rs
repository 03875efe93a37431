//! The hook through which tracing sees module calls: while a recorder is installed on a
//! thread, a call of a module it deems a leaf, made on meta tensors, is reported as one
//! call (its inner ops run for their shapes only and are not recorded).

pub use crate::call_stack::as_caller;
use crate::{Module, Result};
use std::cell::RefCell;
use std::sync::Arc;
use tessera_tensor::{Restore, Tensor};

/// Decides which modules are leaves and receives their calls.
pub trait ModuleCallRecorder {
    /// Whether `module`, called at `path` (`conv1`, `net.l0`), is recorded as one call
    /// instead of being traced through.
    fn is_leaf(&self, module: &dyn Module, path: &str) -> bool;
    /// Records a leaf call with its (meta or real) inputs and its meta outputs.
    fn record_call(
        &self,
        module: &dyn Module,
        path: &str,
        inputs: &[Tensor],
        outputs: &[Tensor],
    ) -> Result<()>;
}

thread_local! {
    static RECORDER: RefCell<Option<Arc<dyn ModuleCallRecorder>>> = const { RefCell::new(None) };
}

/// Runs `f` with `recorder` receiving leaf module calls, then restores the previous one.
pub fn with_module_recorder<R>(recorder: Arc<dyn ModuleCallRecorder>, f: impl FnOnce() -> R) -> R {
    let _restore = Restore::set(&RECORDER, Some(recorder));
    f()
}

/// Runs `f` with no module recorder (inside a leaf, nothing more is recorded).
pub(crate) fn without_module_recorder<R>(f: impl FnOnce() -> R) -> R {
    let _restore = Restore::set(&RECORDER, None);
    f()
}

/// The installed recorder when `inputs` hold a meta tensor and it calls `module` a leaf.
pub(crate) fn leaf_recorder(
    module: &dyn Module,
    path: &str,
    inputs: &[Tensor],
) -> Option<Arc<dyn ModuleCallRecorder>> {
    if !inputs.iter().any(Tensor::is_meta) {
        return None;
    }
    let recorder = RECORDER.with(|r| r.borrow().clone())?;
    recorder.is_leaf(module, path).then_some(recorder)
}
