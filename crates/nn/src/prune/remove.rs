//! Making pruning permanent (`prune.remove`) and asking whether a module tree is pruned
//! (`prune.is_pruned`).

use super::state::{Pruned, orig_and_mask, pruned_target};
use crate::{Module, ModuleExt, NnError, Result};
use tessera_tensor::no_grad;

/// Makes the pruning of `module.<name>` permanent: `<name>` becomes a plain parameter again
/// holding `orig * mask` (sharing storage with the old `<name>_orig`), registered after the
/// others as PyTorch re-registers it, and `<name>_orig`, `<name>_mask` and the hook go.
pub fn remove<M: Module + ?Sized>(module: &mut M, name: &str) -> Result<()> {
    let type_name = module.type_name();
    let target = pruned_target(module.as_module(), name).ok_or_else(|| {
        NnError::Invalid(format!(
            "Parameter '{name}' of module {type_name} has to be pruned before pruning can be removed"
        ))
    })?;
    let (orig, mask) = orig_and_mask(module.as_module(), name)?;
    {
        let _guard = no_grad();
        orig.set_data(&orig.mul(&mask)?.deep_clone()?);
    }
    target.set_data(&orig);
    target.detach_();
    target.requires_grad_(orig.requires_grad())?;
    let core = module.core_mut().ok_or_else(|| {
        NnError::Invalid(format!(
            "cannot remove pruning of `{name}` of {type_name}: it is shared through an Arc"
        ))
    })?;
    core.unregister(&format!("{name}_orig"));
    core.unregister(&format!("{name}_mask"));
    if let Some(Pruned::Active(active)) = core.pruned.shift_remove(name) {
        active.hook.remove();
    }
    core.pruned.insert(name.to_string(), Pruned::Restored);
    Ok(())
}

/// Whether `module` or any descendant has a pruned parameter (PyTorch's `prune.is_pruned`).
pub fn is_pruned<M: Module + ?Sized>(module: &M) -> bool {
    module.modules().into_iter().any(|m| {
        m.core()
            .pruned
            .values()
            .any(|p| matches!(p, Pruned::Active(_)))
    })
}
