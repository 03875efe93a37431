//! `cached`: PyTorch's `parametrize.cached()` scope, in which each parametrized tensor is
//! computed once and reused by every forward until the outermost scope ends.

use std::cell::RefCell;
use std::collections::HashMap;
use tessera_tensor::{Tensor, TensorId};

#[derive(Default)]
struct Cache {
    depth: usize,
    values: HashMap<TensorId, Tensor>,
}

thread_local! {
    /// Per thread, as forwards run on the thread that opened the scope.
    static CACHE: RefCell<Cache> = RefCell::default();
}

/// Leaves a scope, also on panic; the outermost one drops the cached values.
struct Scope;

impl Drop for Scope {
    fn drop(&mut self) {
        CACHE.with(|c| {
            let mut c = c.borrow_mut();
            c.depth -= 1;
            if c.depth == 0 {
                c.values.clear();
            }
        });
    }
}

/// Runs `f` with parametrized tensors cached: the first forward of a module computes each
/// of its parametrized tensors, later ones (and nested scopes) reuse them. Useful when a
/// module runs several times per step (recurrent nets) and the parametrization is costly.
/// The cache belongs to the calling thread.
pub fn cached<R>(f: impl FnOnce() -> R) -> R {
    CACHE.with(|c| c.borrow_mut().depth += 1);
    let _scope = Scope;
    f()
}

/// The value cached for the handle `id`, inside a scope.
pub(crate) fn get(id: TensorId) -> Option<Tensor> {
    CACHE.with(|c| c.borrow().values.get(&id).cloned())
}

/// Remembers `value` for the handle `id` when a scope is open.
pub(crate) fn put(id: TensorId, value: &Tensor) {
    CACHE.with(|c| {
        let mut c = c.borrow_mut();
        if c.depth > 0 {
            c.values.insert(id, value.clone());
        }
    });
}

/// Drops the value cached for `id` (after an assignment or a new parametrization).
pub(crate) fn forget(id: TensorId) {
    CACHE.with(|c| c.borrow_mut().values.remove(&id));
}
