//! Whether ops record the autograd graph on this thread (PyTorch's `torch.no_grad`).

use crate::Restore;
use std::cell::Cell;

thread_local! {
    static GRAD_ENABLED: Cell<bool> = const { Cell::new(true) };
}

/// True unless a [`NoGradGuard`] is alive on this thread.
pub fn is_grad_enabled() -> bool {
    GRAD_ENABLED.with(|g| g.get())
}

/// Turns recording on or off for this thread; prefer [`no_grad`], which restores the old mode.
pub fn set_grad_enabled(enabled: bool) {
    GRAD_ENABLED.with(|g| g.set(enabled));
}

/// Restores the previous grad mode when dropped.
#[must_use = "grad mode is restored as soon as the guard is dropped"]
pub struct NoGradGuard {
    _restore: Restore<bool>,
}

/// Disables gradient recording until the returned guard is dropped.
pub fn no_grad() -> NoGradGuard {
    NoGradGuard {
        _restore: Restore::set(&GRAD_ENABLED, false),
    }
}
