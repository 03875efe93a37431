//! Registering, querying, assigning and removing parametrizations on a module's tensors
//! (PyTorch's `register_parametrization`, `is_parametrized`, attribute assignment and
//! `remove_parametrizations`).

use super::dict::Parametrizations;
use super::list::{Original, Step};
use super::{Parametrization, ParametrizationList, cache};
use crate::walk::own;
use crate::{Module, ModuleCore, NnError, Parameter, Result};
use tessera_tensor::{Tensor, TensorMeta, no_grad};

/// Parametrizes the parameter or buffer `tensor_name` of `module` with `parametrization`.
///
/// The first registration moves the tensor to `parametrizations.<tensor_name>.original`
/// (`right_inverse` of its current value; a parameter when the tensor was one, else a
/// buffer), so `named_parameters` and `state_dict` list that instead of `tensor_name`, and
/// rebinds the module's handle (`self.weight`) to the parametrized value. The value is
/// recomputed before every `call` (and after `load_state_dict`), so `forward` reads it
/// unchanged and gradients flow to `original`. Registering again on the same tensor chains
/// the new parametrization after the others; `original` is kept.
///
/// Unless `unsafe_`, the parametrized value must keep the tensor's dtype and shape, and a
/// single `right_inverse` output its dtype. Optimizers must be built after registering:
/// the module's old handle is no longer a leaf and gets no gradient.
pub fn register_parametrization<M: Module + ?Sized>(
    module: &mut M,
    tensor_name: &str,
    parametrization: impl Parametrization + 'static,
    unsafe_: bool,
) -> Result<()> {
    let type_name = module.type_name();
    if module.core_mut().is_none() {
        return Err(NnError::Invalid(format!(
            "cannot parametrize `{tensor_name}` of {type_name}: it is shared through an Arc"
        )));
    }
    if is_parametrized(module, Some(tensor_name)) {
        let list = list_mut(module, tensor_name)?;
        if !unsafe_ {
            check_chained(list, &parametrization)?;
        }
        list.steps.append(Step::new(Box::new(parametrization)));
        cache::forget(list.target.id());
        list.refresh()?;
        return Ok(());
    }

    let (target, is_parameter) = find_tensor(module.as_module(), tensor_name)?;
    let before = target.meta();
    let stored = {
        let _guard = no_grad();
        parametrization.right_inverse_originals(&target.detach())?
    };
    if stored.is_empty() {
        return Err(NnError::Invalid(format!(
            "{}.right_inverse returned no tensors",
            parametrization.name()
        )));
    }
    if !unsafe_ && stored.len() == 1 && stored[0].dtype() != before.dtype {
        return Err(NnError::Invalid(format!(
            "when `right_inverse` outputs one tensor, it may not change the dtype: \
             original.dtype: {}, right_inverse(original).dtype: {}",
            before.dtype,
            stored[0].dtype()
        )));
    }
    let originals = stored
        .into_iter()
        .map(|t| {
            if is_parameter {
                Original::Parameter(Parameter::with_requires_grad(t, target.requires_grad()))
            } else {
                Original::Buffer(t.detach())
            }
        })
        .collect();
    let list = ParametrizationList::new(
        originals,
        Step::new(Box::new(parametrization)),
        target.clone(),
    );
    let value = list.compute()?;
    if !unsafe_ {
        check_same("unparametrized", &before, "parametrized", &value.meta())?;
    }
    let fresh = match module.core().parametrizations {
        Some(_) => None,
        None => {
            if own(module.as_module())
                .children
                .iter()
                .any(|(n, _)| n == "parametrizations")
            {
                return Err(NnError::Invalid(format!(
                    "cannot parametrize {type_name}: it already has a child named `parametrizations`"
                )));
            }
            Some(Box::new(Parametrizations::install(module)))
        }
    };
    let core = core_mut(module, tensor_name)?;
    if fresh.is_some() {
        core.parametrizations = fresh;
    }
    let parametrizations = core
        .parametrizations
        .as_mut()
        .ok_or_else(|| not_parametrized(&type_name, tensor_name))?;
    parametrizations.dict.insert(tensor_name, list)?;
    cache::forget(target.id());
    target.rebind(&value);
    Ok(())
}

/// Whether `module` has a parametrized tensor named `tensor_name` (any tensor with `None`).
pub fn is_parametrized<M: Module + ?Sized>(module: &M, tensor_name: Option<&str>) -> bool {
    match (&module.core().parametrizations, tensor_name) {
        (None, _) => false,
        (Some(_), None) => true,
        (Some(p), Some(name)) => p.contains(name),
    }
}

/// The `ParametrizationList` of `module`'s parametrized tensor `tensor_name`.
pub fn parametrization_list<'a, M: Module + ?Sized>(
    module: &'a M,
    tensor_name: &str,
) -> Result<&'a ParametrizationList> {
    module
        .core()
        .parametrizations
        .as_ref()
        .and_then(|p| p.dict.get(tensor_name))
        .ok_or_else(|| not_parametrized(&module.type_name(), tensor_name))
}

/// Recomputes `tensor_name` now, rebinds the module's handle to it and returns it: what
/// reading the attribute does in PyTorch. `call` does this before each forward; use it to
/// read the value after an optimizer step or a dtype move without running the module.
pub fn recompute<M: Module + ?Sized>(module: &M, tensor_name: &str) -> Result<Tensor> {
    parametrization_list(module, tensor_name)?.refresh()
}

/// Assigns `value` to the parametrized tensor: the stored tensors become its right inverse
/// through the chain, last parametrization first (PyTorch's `module.weight = value`).
pub fn set_parametrized<M: Module + ?Sized>(
    module: &M,
    tensor_name: &str,
    value: &Tensor,
) -> Result<()> {
    let list = parametrization_list(module, tensor_name)?;
    list.assign(value)?;
    list.refresh()?;
    Ok(())
}

/// Removes the parametrizations on `tensor_name`, making it a plain parameter (or buffer)
/// again that holds the current parametrized value (`leave_parametrized`) or `original`.
/// The restored tensor shares storage with `original`, as in PyTorch. A tensor stored in
/// several tensors (weight norm) can only be left parametrized.
pub fn remove_parametrizations<M: Module + ?Sized>(
    module: &mut M,
    tensor_name: &str,
    leave_parametrized: bool,
) -> Result<()> {
    let list = parametrization_list(module, tensor_name)?;
    let target = list.target.clone();
    let is_parameter = matches!(list.originals[0], Original::Parameter(_));
    {
        let _guard = no_grad();
        match (leave_parametrized, list.originals.as_slice()) {
            (true, [single]) => {
                single.tensor().set_data(&list.compute()?.deep_clone()?);
                target.set_data(single.tensor());
            }
            (true, _) => target.set_data(&list.compute()?.deep_clone()?),
            (false, [single]) => target.set_data(single.tensor()),
            (false, _) => {
                return Err(NnError::Invalid(format!(
                    "cannot leave `{tensor_name}` of {} unparametrized (leave_parametrized=false): \
                     it is parametrized in terms of a sequence of tensors",
                    module.type_name()
                )));
            }
        }
    }
    let requires_grad = is_parameter && list.originals().iter().any(Tensor::requires_grad);
    target.detach_();
    target.requires_grad_(requires_grad)?;
    cache::forget(target.id());
    let core = core_mut(module, tensor_name)?;
    if let Some(p) = core.parametrizations.as_mut() {
        p.dict.remove(tensor_name);
        if p.dict.is_empty() {
            core.parametrizations = None;
        }
    }
    Ok(())
}

fn not_parametrized(type_name: &str, tensor_name: &str) -> NnError {
    NnError::NotFound(format!(
        "{type_name} has no parametrization on `{tensor_name}`"
    ))
}

fn core_mut<'a, M: Module + ?Sized>(
    module: &'a mut M,
    tensor_name: &str,
) -> Result<&'a mut ModuleCore> {
    let type_name = module.type_name();
    module.core_mut().ok_or_else(|| {
        NnError::Invalid(format!(
            "cannot parametrize `{tensor_name}` of {type_name}: it is shared through an Arc"
        ))
    })
}

fn list_mut<'a, M: Module + ?Sized>(
    module: &'a mut M,
    tensor_name: &str,
) -> Result<&'a mut ParametrizationList> {
    let type_name = module.type_name();
    core_mut(module, tensor_name)?
        .parametrizations
        .as_mut()
        .and_then(|p| p.dict.get_mut(tensor_name))
        .ok_or_else(|| not_parametrized(&type_name, tensor_name))
}

/// The module's handle for the parameter or buffer `name`, and whether it is a parameter.
fn find_tensor(module: &dyn Module, name: &str) -> Result<(Tensor, bool)> {
    let own = own(module);
    let slot = match own.parameters.iter().find(|(n, _)| n == name) {
        Some((_, p)) => Some((p.map(|p| p.tensor().clone()), true)),
        None => own
            .buffers
            .iter()
            .find(|(n, _, _)| n == name)
            .map(|(_, b, _)| (b.cloned(), false)),
    };
    match slot {
        Some((Some(t), is_parameter)) => Ok((t, is_parameter)),
        Some((None, _)) => Err(NnError::Invalid(format!(
            "cannot parametrize `{name}` of {}: it is registered as None",
            module.type_name()
        ))),
        None => Err(NnError::NotFound(format!(
            "{} has no parameter, buffer or parametrized tensor named `{name}`",
            module.type_name()
        ))),
    }
}

/// A parametrization appended to a chain must map the current value to a value of the
/// same dtype and shape, and so must its right inverse.
fn check_chained(list: &ParametrizationList, p: &dyn Parametrization) -> Result<()> {
    let _guard = no_grad();
    let y = list.compute()?;
    let x = p.forward(&y)?;
    check_same("unparametrized", &y.meta(), "parametrized", &x.meta())?;
    let z = p.right_inverse(&x)?;
    check_same("parametrized", &x.meta(), "right_inverse", &z.meta())
}

fn check_same(a_name: &str, a: &TensorMeta, b_name: &str, b: &TensorMeta) -> Result<()> {
    if a.dtype != b.dtype {
        return Err(NnError::Invalid(format!(
            "registering a parametrization may not change the dtype of the tensor, unless \
             `unsafe_` is set: {a_name} dtype: {}, {b_name} dtype: {}",
            a.dtype, b.dtype
        )));
    }
    if a.shape != b.shape {
        return Err(NnError::Invalid(format!(
            "registering a parametrization may not change the shape of the tensor, unless \
             `unsafe_` is set: {a_name} shape: {:?}, {b_name} shape: {:?}",
            a.shape, b.shape
        )));
    }
    Ok(())
}
