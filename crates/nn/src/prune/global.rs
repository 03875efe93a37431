//! Pruning several parameters at once by one global L1 threshold
//! (`prune.global_unstructured` with `L1Unstructured`).

use super::state::{current_value, mask_tensor, orig_and_mask, pruned_target, set_mask, values};
use super::{Amount, Method};
use crate::{Module, Result};

/// Prunes `amount` of the still-unpruned entries of all `parameters` together: those with
/// the smallest absolute current values (`orig * mask` for a pruned one) across every
/// tensor, ties pruning the earlier tensor's entry first (PyTorch's
/// `prune.global_unstructured(parameters, L1Unstructured, amount)`). Each tensor is then
/// pruned with its slice of the global mask.
pub fn global_unstructured<M: Module + ?Sized>(
    parameters: &mut [(&mut M, &str)],
    amount: impl Into<Amount>,
) -> Result<()> {
    let amount = amount.into().validate()?;
    let mut importance = Vec::new();
    let mut old = Vec::new();
    let mut likes = Vec::new();
    for (module, name) in parameters.iter() {
        let m = module.as_module();
        let value = current_value(m, name)?;
        importance.extend(values(&value)?);
        match pruned_target(m, name) {
            Some(_) => old.extend(values(&orig_and_mask(m, name)?.1)?),
            None => old.extend(vec![1.0; value.numel()]),
        }
        likes.push(value);
    }
    let n = importance.len();
    let mask = Method::L1Unstructured.combine(&importance, &old, &[n], amount)?;
    let mut start = 0;
    for ((module, name), like) in parameters.iter_mut().zip(&likes) {
        let end = start + like.numel();
        set_mask(
            *module,
            name,
            &mask_tensor(mask[start..end].to_vec(), like)?,
        )?;
        start = end;
    }
    Ok(())
}
