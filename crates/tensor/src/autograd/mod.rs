//! Reverse-mode automatic differentiation: grad mode, the recorded graph, the engine that
//! walks it backwards, and a finite-difference `gradcheck`.

mod engine;
mod grad_hooks;
mod grad_mode;
mod gradcheck;
mod node;

pub use engine::backward;
pub(crate) use grad_hooks::HookList;
pub use grad_hooks::{GradHookHandle, HookError, HookResult, PostAccumulateGradHook};
pub use grad_mode::{NoGradGuard, is_grad_enabled, no_grad, set_grad_enabled};
pub use gradcheck::{GradcheckOptions, gradcheck, gradcheck_vjp};
pub(crate) use node::{GradEdge, record};
