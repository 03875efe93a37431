//! Module hooks (forward pre-hooks, forward hooks, full backward hooks, backward pre-hooks,
//! state-dict hooks), the per-module and global tables holding them, and the handles whose
//! `remove()` unregisters one.

use crate::{IncompatibleKeys, Module, Result, StateDict};
use std::sync::{Arc, Mutex, Weak};
use tessera_tensor::Tensor;

/// Sees the inputs before `forward`; returning `Some` replaces them.
pub type ForwardPreHook =
    Arc<dyn Fn(&dyn Module, &[Tensor]) -> Result<Option<Vec<Tensor>>> + Send + Sync>;
/// Sees the (possibly replaced) inputs and the outputs; returning `Some` replaces the outputs.
pub type ForwardHook =
    Arc<dyn Fn(&dyn Module, &[Tensor], &[Tensor]) -> Result<Option<Vec<Tensor>>> + Send + Sync>;
/// Sees the gradients of the module's inputs and outputs (`None` where nothing flowed);
/// returning `Some` replaces the input gradients.
pub type FullBackwardHook = Arc<
    dyn Fn(&[Option<Tensor>], &[Option<Tensor>]) -> Result<Option<Vec<Option<Tensor>>>>
        + Send
        + Sync,
>;
/// Sees the gradients of the module's outputs before the module's backward; returning
/// `Some` replaces them.
pub type BackwardPreHook =
    Arc<dyn Fn(&[Option<Tensor>]) -> Result<Option<Vec<Option<Tensor>>>> + Send + Sync>;
/// Runs after a module wrote its entries into a state dict (with the module's key prefix).
pub type StateDictHook = Arc<dyn Fn(&dyn Module, &mut StateDict, &str) -> Result<()> + Send + Sync>;
/// Runs before a module loads its entries from a state dict (with its key prefix) and may
/// rewrite them.
pub type LoadStateDictPreHook = Arc<dyn Fn(&mut StateDict, &str) -> Result<()> + Send + Sync>;
/// Runs after `load_state_dict` with the keys that did not match.
pub type LoadStateDictPostHook =
    Arc<dyn Fn(&dyn Module, &IncompatibleKeys) -> Result<()> + Send + Sync>;

/// The hooks of one module (or the global ones), each with the id its handle removes.
#[derive(Default)]
pub(crate) struct HookTable {
    next_id: u64,
    pub(crate) forward_pre: Vec<(u64, ForwardPreHook)>,
    pub(crate) forward: Vec<(u64, ForwardHook)>,
    pub(crate) full_backward: Vec<(u64, FullBackwardHook)>,
    pub(crate) backward_pre: Vec<(u64, BackwardPreHook)>,
    pub(crate) state_dict: Vec<(u64, StateDictHook)>,
    pub(crate) load_pre: Vec<(u64, LoadStateDictPreHook)>,
    pub(crate) load_post: Vec<(u64, LoadStateDictPostHook)>,
}

/// How many hooks of each kind a module has registered (what PyTorch users read from
/// `module._forward_pre_hooks` and its siblings); see
/// [`ModuleExt::hook_counts`](crate::ModuleExt::hook_counts). Global hooks are counted by
/// [`global_hook_counts`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HookCounts {
    pub forward_pre: usize,
    pub forward: usize,
    pub full_backward: usize,
    pub backward_pre: usize,
    pub state_dict: usize,
    pub load_state_dict_pre: usize,
    pub load_state_dict_post: usize,
}

impl HookCounts {
    /// The number of hooks of every kind together.
    pub fn total(&self) -> usize {
        self.forward_pre
            + self.forward
            + self.full_backward
            + self.backward_pre
            + self.state_dict
            + self.load_state_dict_pre
            + self.load_state_dict_post
    }
}

/// The id of a registered hook, unique within its module's table (or the global one): what
/// [`HookHandle::id`] returns and [`HookIds`] lists, as PyTorch's hook dicts are keyed by
/// their handles' ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HookId(pub u64);

impl std::fmt::Display for HookId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// The ids of a module's hooks of each kind, in the order they run (the keys of PyTorch's
/// `module._forward_pre_hooks` and its siblings); see
/// [`ModuleExt::hook_ids`](crate::ModuleExt::hook_ids). Global hooks are not included.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HookIds {
    pub forward_pre: Vec<HookId>,
    pub forward: Vec<HookId>,
    pub full_backward: Vec<HookId>,
    pub backward_pre: Vec<HookId>,
    pub state_dict: Vec<HookId>,
    pub load_state_dict_pre: Vec<HookId>,
    pub load_state_dict_post: Vec<HookId>,
}

/// The ids of one kind of hooks, in order.
fn ids_of<H>(hooks: &[(u64, H)]) -> Vec<HookId> {
    hooks.iter().map(|(id, _)| HookId(*id)).collect()
}

impl HookTable {
    pub(crate) fn ids(&self) -> HookIds {
        HookIds {
            forward_pre: ids_of(&self.forward_pre),
            forward: ids_of(&self.forward),
            full_backward: ids_of(&self.full_backward),
            backward_pre: ids_of(&self.backward_pre),
            state_dict: ids_of(&self.state_dict),
            load_state_dict_pre: ids_of(&self.load_pre),
            load_state_dict_post: ids_of(&self.load_post),
        }
    }

    pub(crate) fn counts(&self) -> HookCounts {
        HookCounts {
            forward_pre: self.forward_pre.len(),
            forward: self.forward.len(),
            full_backward: self.full_backward.len(),
            backward_pre: self.backward_pre.len(),
            state_dict: self.state_dict.len(),
            load_state_dict_pre: self.load_pre.len(),
            load_state_dict_post: self.load_post.len(),
        }
    }

    fn remove(&mut self, id: u64) {
        self.forward_pre.retain(|(i, _)| *i != id);
        self.forward.retain(|(i, _)| *i != id);
        self.full_backward.retain(|(i, _)| *i != id);
        self.backward_pre.retain(|(i, _)| *i != id);
        self.state_dict.retain(|(i, _)| *i != id);
        self.load_pre.retain(|(i, _)| *i != id);
        self.load_post.retain(|(i, _)| *i != id);
    }

    pub(crate) fn has_backward_hooks(&self) -> bool {
        !self.full_backward.is_empty() || !self.backward_pre.is_empty()
    }
}

/// A shared hook table; handles keep a weak reference so that removing after the module is
/// gone is harmless.
#[derive(Default, Clone)]
pub(crate) struct Hooks(pub(crate) Arc<Mutex<HookTable>>);

impl Hooks {
    pub(crate) fn lock(&self) -> std::sync::MutexGuard<'_, HookTable> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds a hook with `insert` and returns its handle.
    pub(crate) fn add(&self, insert: impl FnOnce(&mut HookTable, u64)) -> HookHandle {
        let mut table = self.lock();
        let id = table.next_id;
        table.next_id += 1;
        insert(&mut table, id);
        HookHandle {
            table: Arc::downgrade(&self.0),
            id,
        }
    }
}

/// Returned by every hook registration; `remove()` unregisters the hook.
#[derive(Clone)]
pub struct HookHandle {
    table: Weak<Mutex<HookTable>>,
    id: u64,
}

impl HookHandle {
    /// The hook's id, as [`HookIds`] lists it.
    pub fn id(&self) -> HookId {
        HookId(self.id)
    }

    pub fn remove(&self) {
        if let Some(table) = self.table.upgrade() {
            table
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(self.id);
        }
    }
}

static GLOBAL: std::sync::OnceLock<Hooks> = std::sync::OnceLock::new();

/// The hooks that run for every module (PyTorch's `register_module_forward_hook` family).
pub(crate) fn global() -> &'static Hooks {
    GLOBAL.get_or_init(Hooks::default)
}

/// How many hooks of each kind are registered for every module (the global hooks, which
/// [`HookCounts`] of a module leaves out).
pub fn global_hook_counts() -> HookCounts {
    global().lock().counts()
}

/// Registers a forward pre-hook for every module.
pub fn register_module_forward_pre_hook(
    hook: impl Fn(&dyn Module, &[Tensor]) -> Result<Option<Vec<Tensor>>> + Send + Sync + 'static,
) -> HookHandle {
    global().add(|t, id| t.forward_pre.push((id, Arc::new(hook))))
}

/// Registers a forward hook for every module.
pub fn register_module_forward_hook(
    hook: impl Fn(&dyn Module, &[Tensor], &[Tensor]) -> Result<Option<Vec<Tensor>>>
    + Send
    + Sync
    + 'static,
) -> HookHandle {
    global().add(|t, id| t.forward.push((id, Arc::new(hook))))
}

/// Registers a full backward hook for every module.
pub fn register_module_full_backward_hook(
    hook: impl Fn(&[Option<Tensor>], &[Option<Tensor>]) -> Result<Option<Vec<Option<Tensor>>>>
    + Send
    + Sync
    + 'static,
) -> HookHandle {
    global().add(|t, id| t.full_backward.push((id, Arc::new(hook))))
}

/// Registers a backward pre-hook for every module.
pub fn register_module_full_backward_pre_hook(
    hook: impl Fn(&[Option<Tensor>]) -> Result<Option<Vec<Option<Tensor>>>> + Send + Sync + 'static,
) -> HookHandle {
    global().add(|t, id| t.backward_pre.push((id, Arc::new(hook))))
}
