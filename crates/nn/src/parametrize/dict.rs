//! `Parametrizations`: what a module's `ModuleCore` holds once one of its tensors is
//! parametrized — the `parametrizations` child (a `ModuleDict` of `ParametrizationList`s)
//! and the hooks that recompute the parametrized tensors before each forward and after
//! `load_state_dict`.

use super::ParametrizationList;
use crate::{HookHandle, Module, ModuleDict, ModuleExt, Result};

/// The parametrized tensors of one module, by name, and the hooks keeping them current.
pub(crate) struct Parametrizations {
    pub(crate) dict: ModuleDict<ParametrizationList>,
    hooks: Vec<HookHandle>,
}

impl Parametrizations {
    /// Installs the hooks on `module`; the dict starts empty.
    pub(crate) fn install<M: Module + ?Sized>(module: &M) -> Parametrizations {
        let forward = module.register_forward_pre_hook(|m, _inputs| {
            refresh_all(m)?;
            Ok(None)
        });
        let load = module.register_load_state_dict_post_hook(|m, _keys| refresh_all(m));
        Parametrizations {
            dict: ModuleDict::new(),
            hooks: vec![forward, load],
        }
    }

    /// Whether the module's tensor `name` is parametrized.
    pub(crate) fn contains(&self, name: &str) -> bool {
        self.dict.contains_key(name)
    }

    /// The `parametrizations` child.
    pub(crate) fn dict(&self) -> &dyn Module {
        &self.dict
    }
}

impl Drop for Parametrizations {
    /// Removing the last parametrization removes the hooks with it.
    fn drop(&mut self) {
        for hook in &self.hooks {
            hook.remove();
        }
    }
}

/// Rebinds every parametrized tensor of `module` to its current value.
pub(crate) fn refresh_all(module: &dyn Module) -> Result<()> {
    if let Some(p) = &module.core().parametrizations {
        for (_, list) in p.dict.iter() {
            list.refresh()?;
        }
    }
    Ok(())
}

/// The class name PyTorch prints: a parametrized `Linear` becomes `ParametrizedLinear`,
/// because `register_parametrization` swaps the module's class for a subclass.
pub(crate) fn class_name(module: &dyn Module) -> String {
    if module.core().parametrizations.is_some() {
        format!("Parametrized{}", module.type_name())
    } else {
        module.type_name()
    }
}
