//! The module being called on this thread and its qualified path, which is how a call finds
//! its own path (`net.l0`) for errors and tracing: each call sets itself as the current one
//! and puts its caller back when it returns.

use crate::Module;
use crate::walk::{module_id, own};
use std::cell::RefCell;
use tessera_tensor::Restore;

/// A module being called and its qualified path.
type Frame = Option<(*const dyn Module, String)>;

thread_local! {
    /// The innermost module call on this thread. The pointer is only read while the `call`
    /// that set it is still running (its guard puts the caller back before it returns).
    static CURRENT: RefCell<Frame> = const { RefCell::new(None) };
}

/// Makes `module` the current call, with its path: its field name under the module calling
/// it (`""` at the top level; the caller's own path when it is the caller itself, reached
/// through a `Box` or `Arc`; its type name when called from a module it is not registered
/// in). The caller becomes current again when the guard drops.
pub(crate) fn enter(module: &dyn Module) -> (Restore<Frame>, String) {
    let id = module_id(module);
    let path = CURRENT.with_borrow(|current| {
        let Some((parent, parent_path)) = current else {
            return String::new();
        };
        // SAFETY: the parent's `call` is below this one on the same thread, so the module
        // it points to is still borrowed.
        let parent = unsafe { &**parent };
        // The module the current call delegates to (a `Box` or `Arc` calling the module it
        // holds): the same module, at the same path.
        if module_id(parent) == id {
            return parent_path.clone();
        }
        // A direct child first (cheap); else any descendant (a module reached through a
        // container, `self.activations["relu"]`).
        let name = own(parent)
            .children
            .into_iter()
            .find(|(_, m)| module_id(*m) == id)
            .map(|(n, _)| n)
            .or_else(|| {
                crate::walk::named_modules(parent, "", true)
                    .into_iter()
                    .find(|(_, m)| module_id(*m) == id)
                    .map(|(n, _)| n)
            });
        match name {
            None => module.type_name(),
            Some(n) if parent_path.is_empty() => n,
            Some(n) => format!("{parent_path}.{n}"),
        }
    });
    let frame = Restore::set(&CURRENT, Some((module as *const dyn Module, path.clone())));
    (frame, path)
}

/// The qualified path of the module being called on this thread (`""` for the outermost
/// call), or `None` outside any module call. Forward hooks read it to know which call they see.
pub fn current_module_path() -> Option<String> {
    CURRENT.with_borrow(|current| current.as_ref().map(|(_, path)| path.clone()))
}

/// Runs `f` as the body of a call of `module` at the top level: submodules it calls are named
/// by their paths under `module` (tracing a closure over a module uses this).
pub fn as_caller<R>(module: &dyn Module, f: impl FnOnce() -> R) -> R {
    // The module itself, not a `Box` or `Arc` around it: its calls enter the module they hold
    // (`as_module`), which must find itself here to be the top level.
    let module = module.as_module();
    let _frame = Restore::set(&CURRENT, Some((module as *const dyn Module, String::new())));
    f()
}
