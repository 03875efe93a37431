//! What pruning leaves on a module: `<name>_orig` (a parameter), `<name>_mask` (a buffer)
//! and the forward pre-hook that rebinds the module's `<name>` handle to their product.

use super::{Amount, Method};
use crate::{HookHandle, Module, ModuleExt, NnError, Parameter, Result, walk};
use tessera_tensor::{Tensor, no_grad};

/// A parameter's pruning state, kept in its module's core (see `walk::own`).
pub(crate) enum Pruned {
    /// Pruned: the parameter is hidden and stands for `<name>_orig * <name>_mask`.
    Active(Active),
    /// Pruning removed: the parameter is listed after the run-time registrations.
    Restored,
}

/// A pruned parameter: the module's handle (its field) and the hook recomputing it.
pub(crate) struct Active {
    pub(crate) target: Tensor,
    pub(crate) hook: HookHandle,
}

/// `module.<name>_orig` and `module.<name>_mask`.
pub(crate) fn orig_and_mask(module: &dyn Module, name: &str) -> Result<(Parameter, Tensor)> {
    Ok((
        module.get_parameter(&format!("{name}_orig"))?,
        module.get_buffer(&format!("{name}_mask"))?,
    ))
}

/// The handle of `module`'s pruned parameter `name`, if it is pruned.
pub(crate) fn pruned_target(module: &dyn Module, name: &str) -> Option<Tensor> {
    match module.core().pruned.get(name) {
        Some(Pruned::Active(a)) => Some(a.target.clone()),
        _ => None,
    }
}

/// The parameter's current value: `orig * mask` when pruned (PyTorch's `getattr(module, name)`).
pub(crate) fn current_value(module: &dyn Module, name: &str) -> Result<Tensor> {
    if pruned_target(module, name).is_some() {
        let (orig, mask) = orig_and_mask(module, name)?;
        return Ok(orig.mul(&mask)?);
    }
    Ok(unpruned_parameter(module, name)?.tensor().clone())
}

/// The module's own parameter `name`, which pruning can replace.
fn unpruned_parameter(module: &dyn Module, name: &str) -> Result<Parameter> {
    let own = walk::own(module);
    match own.parameters.into_iter().find(|(n, _)| n == name) {
        Some((_, Some(p))) => Ok(p.clone()),
        Some((_, None)) => Err(NnError::Invalid(format!(
            "cannot prune `{name}` of {}: it is registered as None",
            module.type_name()
        ))),
        None => Err(NnError::NotFound(format!(
            "{} has no parameter named `{name}`",
            module.type_name()
        ))),
    }
}

/// Row-major values of a tensor as `f64`s.
pub(crate) fn values(t: &Tensor) -> Result<Vec<f64>> {
    let _guard = no_grad();
    Ok(t.detach().to_vec_f64()?)
}

/// Prunes `module.<name>` by `method` (PyTorch's `BasePruningMethod.apply` with a
/// `PruningContainer` when already pruned): a fresh parameter becomes `<name>_orig` and
/// gets a `<name>_mask` of ones first; the new mask prunes `amount` more of what is left.
pub(crate) fn prune<M: Module + ?Sized>(
    module: &mut M,
    name: &str,
    method: Method,
    amount: Amount,
) -> Result<()> {
    let amount = amount.validate()?;
    let m = module.as_module();
    // PyTorch's default importance is `<name>_orig`, the unmasked values.
    let (importance, old) = match pruned_target(m, name) {
        Some(_) => {
            let (orig, mask) = orig_and_mask(m, name)?;
            (orig.tensor().clone(), values(&mask)?)
        }
        None => {
            let param = unpruned_parameter(m, name)?.tensor().clone();
            let ones = vec![1.0; param.numel()];
            (param, ones)
        }
    };
    let shape = importance.shape();
    let mask = method.combine(&values(&importance)?, &old, &shape, amount)?;
    set_mask(module, name, &mask_tensor(mask, &importance)?)
}

/// A mask from row-major values, with the dtype, shape and device of `like`.
pub(crate) fn mask_tensor(mask: Vec<f64>, like: &Tensor) -> Result<Tensor> {
    Ok(Tensor::from_vec(mask, &like.shape())?
        .to_dtype(like.dtype())?
        .to_device(like.device())?)
}

/// Makes `mask` the mask of `module.<name>` (PyTorch's `custom_from_mask` once the mask
/// is combined): on a fresh parameter, registers `<name>_orig`, `<name>_mask` and the hook.
pub(crate) fn set_mask<M: Module + ?Sized>(
    module: &mut M,
    name: &str,
    mask: &Tensor,
) -> Result<()> {
    if let Some(target) = pruned_target(module.as_module(), name) {
        let (orig, old) = orig_and_mask(module.as_module(), name)?;
        old.set_data(mask);
        target.rebind(&orig.mul(&old)?);
        return Ok(());
    }
    let target = unpruned_parameter(module.as_module(), name)?
        .tensor()
        .clone();
    let orig = Parameter::with_requires_grad(target.clone(), target.requires_grad());
    let taken = walk::field_names(module.as_module());
    let type_name = module.type_name();
    let core = module.core_mut().ok_or_else(|| {
        NnError::Invalid(format!(
            "cannot prune `{name}` of {type_name}: it is shared through an Arc"
        ))
    })?;
    let taken = |n: &str| taken.iter().any(|t| t == n);
    core.register_parameter(&format!("{name}_orig"), Some(orig.clone()), taken)?;
    if let Err(e) = core.register_buffer(&format!("{name}_mask"), Some(mask.clone()), true, taken) {
        core.unregister(&format!("{name}_orig"));
        return Err(e);
    }
    let (hook_name, hook_target) = (name.to_string(), target.clone());
    let hook = module.register_forward_pre_hook(move |m, _| {
        let (orig, mask) = orig_and_mask(m, &hook_name)?;
        hook_target.rebind(&orig.mul(&mask)?);
        Ok(None)
    });
    target.rebind(&orig.mul(mask)?);
    let core = module
        .core_mut()
        .ok_or_else(|| NnError::Invalid("shared module".into()))?;
    core.pruned.shift_remove(name);
    core.pruned
        .insert(name.to_string(), Pruned::Active(Active { target, hook }));
    Ok(())
}
