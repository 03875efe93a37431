//! Helpers for finite-difference gradchecks of layers: nn results as `gradcheck` takes them,
//! several outputs joined into one, and a call's leaves followed by the module's parameters.

#![allow(dead_code)]

use tessera_nn::{Module, ModuleExt};
use tessera_tensor::{Tensor, TensorError};

/// `result` with the nn error turned into the tensor crate's, as `gradcheck` takes.
pub fn tensor_result(result: tessera_nn::Result<Tensor>) -> tessera_tensor::Result<Tensor> {
    result.map_err(|e| TensorError::Autograd(e.to_string()))
}

/// The tensors flattened and joined, so one gradcheck covers several outputs.
pub fn joined(parts: &[&Tensor]) -> tessera_nn::Result<Tensor> {
    let flat: Vec<Tensor> = parts
        .iter()
        .map(|t| t.reshape(&[t.numel()]))
        .collect::<Result<_, _>>()?;
    Ok(Tensor::cat(&flat.iter().collect::<Vec<_>>(), 0)?)
}

/// Every gradient leaf of a gradcheck: the call's tensors, then the module's parameters.
pub fn leaves(tensors: &[Tensor], module: &dyn Module) -> Vec<Tensor> {
    tensors
        .iter()
        .cloned()
        .chain(module.parameter_tensors())
        .collect()
}
