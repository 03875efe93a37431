//! The per-tensor pruning functions of `torch.nn.utils.prune`: random and L1 unstructured,
//! Ln and random structured.

use super::state::prune;
use super::{Amount, Method};
use crate::{Module, Result};

/// Prunes `amount` of the still-unpruned entries of `module.<name>`, chosen at random from
/// the global seeded generator (PyTorch's `prune.random_unstructured`).
pub fn random_unstructured<M: Module + ?Sized>(
    module: &mut M,
    name: &str,
    amount: impl Into<Amount>,
) -> Result<()> {
    prune(module, name, Method::RandomUnstructured, amount.into())
}

/// Prunes `amount` of the still-unpruned entries of `module.<name>` with the smallest
/// absolute values, ties pruning the lower row-major index first (PyTorch's
/// `prune.l1_unstructured`, whose `topk` leaves ties unspecified).
pub fn l1_unstructured<M: Module + ?Sized>(
    module: &mut M,
    name: &str,
    amount: impl Into<Amount>,
) -> Result<()> {
    prune(module, name, Method::L1Unstructured, amount.into())
}

/// Prunes `amount` of the still-unpruned channels along `dim` of `module.<name>`: those
/// with the smallest L_`n` norm over all other dims (`n` may be `f64::INFINITY`), ties
/// pruning the higher index (PyTorch's `prune.ln_structured`).
pub fn ln_structured<M: Module + ?Sized>(
    module: &mut M,
    name: &str,
    amount: impl Into<Amount>,
    n: f64,
    dim: isize,
) -> Result<()> {
    prune(module, name, Method::LnStructured { n, dim }, amount.into())
}

/// Prunes `amount` of the still-unpruned channels along `dim` of `module.<name>`, chosen at
/// random from the global seeded generator (PyTorch's `prune.random_structured`).
pub fn random_structured<M: Module + ?Sized>(
    module: &mut M,
    name: &str,
    amount: impl Into<Amount>,
    dim: isize,
) -> Result<()> {
    prune(
        module,
        name,
        Method::RandomStructured { dim },
        amount.into(),
    )
}
