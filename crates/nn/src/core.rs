//! `ModuleCore`: the state every module carries besides its fields — the training flag,
//! its hooks, and parameters, buffers and children registered at run time.

use crate::hooks::Hooks;
use crate::parametrize::Parametrizations;
use crate::{Module, NnError, Parameter, Result, Visitor};
use indexmap::IndexMap;
use std::sync::atomic::{AtomicBool, Ordering};
use tessera_tensor::Tensor;

/// Registrations made at run time (`register_parameter`, `register_buffer`, `add_module`);
/// they follow the fields in iteration order.
#[derive(Default)]
struct Dynamic {
    parameters: IndexMap<String, Option<Parameter>>,
    buffers: IndexMap<String, (Option<Tensor>, bool)>,
    children: IndexMap<String, Box<dyn Module>>,
}

/// The part of a module that is not its own fields. Every `#[derive(Module)]` struct has one
/// field of this type (`ModuleCore::default()` when constructing).
pub struct ModuleCore {
    training: AtomicBool,
    pub(crate) hooks: Hooks,
    dynamic: Dynamic,
    /// The `parametrizations` child once a tensor is parametrized (`parametrize`); the
    /// tensors it names are hidden from the module's own registrations by `walk::own`.
    pub(crate) parametrizations: Option<Box<Parametrizations>>,
    /// Parameters `prune` has replaced by `<name>_orig` and `<name>_mask` (hidden by
    /// `walk::own`), or restored by `prune::remove` (listed after the run-time registrations,
    /// where PyTorch re-registers them), in the order that happened.
    pub(crate) pruned: IndexMap<String, crate::prune::Pruned>,
}

impl Default for ModuleCore {
    fn default() -> Self {
        ModuleCore {
            training: AtomicBool::new(true),
            hooks: Hooks::default(),
            dynamic: Dynamic::default(),
            parametrizations: None,
            pruned: IndexMap::new(),
        }
    }
}

impl ModuleCore {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn is_training(&self) -> bool {
        self.training.load(Ordering::Relaxed)
    }

    pub(crate) fn set_training(&self, mode: bool) {
        self.training.store(mode, Ordering::Relaxed);
    }

    fn check_free(&self, name: &str, taken: impl Fn(&str) -> bool) -> Result<()> {
        if name.is_empty() || name.contains('.') {
            return Err(NnError::Invalid(format!(
                "attribute name \"{name}\" can't be empty or contain \".\""
            )));
        }
        let d = &self.dynamic;
        let parametrized = self
            .parametrizations
            .as_ref()
            .is_some_and(|p| name == "parametrizations" || p.contains(name));
        let pruned = matches!(self.pruned.get(name), Some(crate::prune::Pruned::Active(_)));
        if taken(name)
            || parametrized
            || pruned
            || d.parameters.contains_key(name)
            || d.buffers.contains_key(name)
            || d.children.contains_key(name)
        {
            return Err(NnError::Invalid(format!(
                "attribute '{name}' already exists"
            )));
        }
        Ok(())
    }

    pub(crate) fn register_parameter(
        &mut self,
        name: &str,
        param: Option<Parameter>,
        taken: impl Fn(&str) -> bool,
    ) -> Result<()> {
        self.check_free(name, taken)?;
        self.dynamic.parameters.insert(name.to_string(), param);
        Ok(())
    }

    pub(crate) fn register_buffer(
        &mut self,
        name: &str,
        buffer: Option<Tensor>,
        persistent: bool,
        taken: impl Fn(&str) -> bool,
    ) -> Result<()> {
        self.check_free(name, taken)?;
        self.dynamic
            .buffers
            .insert(name.to_string(), (buffer, persistent));
        Ok(())
    }

    pub(crate) fn add_module(
        &mut self,
        name: &str,
        module: Box<dyn Module>,
        taken: impl Fn(&str) -> bool,
    ) -> Result<()> {
        self.check_free(name, taken)?;
        self.dynamic.children.insert(name.to_string(), module);
        Ok(())
    }

    /// Removes the run-time parameter or buffer `name` (PyTorch's `del module._parameters[name]`
    /// and `del module._buffers[name]`), keeping the order of the others.
    pub(crate) fn unregister(&mut self, name: &str) {
        self.dynamic.parameters.shift_remove(name);
        self.dynamic.buffers.shift_remove(name);
    }

    /// Visits the run-time registrations (after the fields; wrappers that present another
    /// module's state, such as a graph module, forward to it). then the `parametrizations` child (registered
    /// last, as PyTorch adds it to `_modules` when the first tensor is parametrized).
    pub fn visit_dynamic<'a>(&'a self, visitor: &mut dyn Visitor<'a>) {
        for (name, p) in &self.dynamic.parameters {
            visitor.parameter(name, p.as_ref());
        }
        for (name, (b, persistent)) in &self.dynamic.buffers {
            visitor.buffer(name, b.as_ref(), *persistent);
        }
        for (name, m) in &self.dynamic.children {
            visitor.child(name, m.as_ref());
        }
        if let Some(p) = &self.parametrizations {
            visitor.child("parametrizations", p.dict());
        }
    }
}
