//! `cached`: PyTorch's `parametrize.cached()` scope, in which each parametrized tensor is
//! computed once and reused by every forward until the outermost scope ends.

use std::cell::RefCell;
use std::collections::HashMap;
use tessera_tensor::{Restore, Tensor, TensorId};

/// The values computed in the open scope, by handle.
type Cache = HashMap<TensorId, Tensor>;

thread_local! {
    /// Per thread, as forwards run on the thread that opened the scope; `None` outside any.
    static CACHE: RefCell<Option<Cache>> = const { RefCell::new(None) };
}

/// Runs `f` with parametrized tensors cached: the first forward of a module computes each
/// of its parametrized tensors, later ones (and nested scopes) reuse them. Useful when a
/// module runs several times per step (recurrent nets) and the parametrization is costly.
/// The cache belongs to the calling thread.
pub fn cached<R>(f: impl FnOnce() -> R) -> R {
    if CACHE.with_borrow(Option::is_some) {
        // A nested scope shares the outer one's values.
        return f();
    }
    // The outermost scope drops the cached values when it ends, also on panic.
    let _scope = Restore::set(&CACHE, Some(Cache::new()));
    f()
}

/// The value cached for the handle `id`, inside a scope.
pub(crate) fn get(id: TensorId) -> Option<Tensor> {
    CACHE.with_borrow(|c| c.as_ref()?.get(&id).cloned())
}

/// Remembers `value` for the handle `id` when a scope is open.
pub(crate) fn put(id: TensorId, value: &Tensor) {
    CACHE.with_borrow_mut(|c| {
        if let Some(values) = c {
            values.insert(id, value.clone());
        }
    });
}

/// Drops the value cached for `id` (after an assignment or a new parametrization).
pub(crate) fn forget(id: TensorId) {
    CACHE.with_borrow_mut(|c| {
        if let Some(values) = c {
            values.remove(&id);
        }
    });
}
