//! The hook through which tracing sees module calls: while a recorder is installed on a
//! thread, a call of a module it deems a leaf, made on meta tensors, is reported as one
//! call (its inner ops run for their shapes only and are not recorded).

use crate::{Module, Result};
use std::cell::RefCell;
use std::sync::Arc;
use tessera_tensor::Tensor;

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
    struct Restore(Option<Arc<dyn ModuleCallRecorder>>);
    impl Drop for Restore {
        fn drop(&mut self) {
            RECORDER.with(|r| *r.borrow_mut() = self.0.take());
        }
    }
    let _restore = Restore(RECORDER.with(|r| r.borrow_mut().replace(recorder)));
    f()
}

/// Runs `f` as the body of a call of `module`: submodules it calls are named by their paths
/// under `module` (tracing a closure over a module uses this).
pub fn as_caller<R>(module: &dyn Module, f: impl FnOnce() -> R) -> R {
    crate::call::as_caller(module, f)
}

/// Runs `f` with no module recorder (inside a leaf, nothing more is recorded).
pub(crate) fn without_module_recorder<R>(f: impl FnOnce() -> R) -> R {
    struct Restore(Option<Arc<dyn ModuleCallRecorder>>);
    impl Drop for Restore {
        fn drop(&mut self) {
            RECORDER.with(|r| *r.borrow_mut() = self.0.take());
        }
    }
    let _restore = Restore(RECORDER.with(|r| r.borrow_mut().take()));
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
