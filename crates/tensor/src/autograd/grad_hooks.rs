//! Post-accumulate-grad hooks: functions a leaf runs once per backward, after every gradient
//! that backward sends to it has been added to its `.grad` (PyTorch's
//! `register_post_accumulate_grad_hook`, what distributed data parallelism launches its
//! gradient all-reduces from).

use crate::tensor::TensorImpl;
use crate::{Result, Tensor, TensorError};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

static NEXT_HOOK_ID: AtomicU64 = AtomicU64::new(1);

/// What a hook may fail with: any error, kept as the cause of the backward's error.
pub type HookResult = std::result::Result<(), Box<dyn std::error::Error + Send + Sync>>;

/// A hook called with the leaf whose `.grad` is now complete for this backward.
pub type PostAccumulateGradHook = dyn Fn(&Tensor) -> HookResult + Send + Sync;

/// The hooks registered on one tensor, in registration order.
pub(crate) type HookList = Vec<(u64, Arc<PostAccumulateGradHook>)>;

/// The error a hook returned, shared so that [`TensorError`] stays `Clone`; two are equal when
/// they are the same failure.
#[derive(Debug, Clone)]
pub struct HookError(pub Arc<dyn std::error::Error + Send + Sync>);

impl std::fmt::Display for HookError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for HookError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}

impl PartialEq for HookError {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

/// Removes its hook when [`GradHookHandle::remove`] is called (dropping it keeps the hook).
pub struct GradHookHandle {
    tensor: Weak<TensorImpl>,
    id: u64,
}

impl GradHookHandle {
    /// Unregisters the hook; later backwards no longer call it.
    pub fn remove(self) {
        if let Some(tensor) = self.tensor.upgrade() {
            tensor
                .post_accumulate_grad_hooks
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .retain(|(id, _)| *id != self.id);
        }
    }
}

impl Tensor {
    /// Registers `hook` to run after each backward has accumulated this leaf's gradient into
    /// `.grad` (once per backward, however many uses of the leaf the graph has). Only leaves
    /// that require grad take one, as in PyTorch. An error from the hook ends the backward
    /// with [`TensorError::GradHook`].
    pub fn register_post_accumulate_grad_hook(
        &self,
        hook: impl Fn(&Tensor) -> HookResult + Send + Sync + 'static,
    ) -> Result<GradHookHandle> {
        if !self.is_leaf() || !self.requires_grad() {
            return Err(TensorError::Autograd(
                "post accumulate grad hooks can only be registered on leaf tensors that require grad"
                    .into(),
            ));
        }
        let id = NEXT_HOOK_ID.fetch_add(1, Ordering::Relaxed);
        self.0
            .post_accumulate_grad_hooks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((id, Arc::new(hook)));
        Ok(GradHookHandle {
            tensor: Arc::downgrade(&self.0),
            id,
        })
    }

    /// Runs the post-accumulate-grad hooks in registration order, stopping at the first error.
    pub(crate) fn run_post_accumulate_grad_hooks(&self) -> Result<()> {
        // A snapshot, so that a hook may register or remove hooks without deadlocking.
        let hooks: Vec<Arc<PostAccumulateGradHook>> = self
            .0
            .post_accumulate_grad_hooks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|(_, hook)| Arc::clone(hook))
            .collect();
        for hook in hooks {
            hook(self).map_err(|e| TensorError::GradHook(HookError(Arc::from(e))))?;
        }
        Ok(())
    }
}
