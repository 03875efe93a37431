//! `weight_norm`: PyTorch's `parametrizations.weight_norm` — the weight is stored as a
//! magnitude `g` (`original0`) and a direction `v` (`original1`), `w = g * v / ‖v‖`.

use super::current_value;
use crate::parametrize::{Parametrization, register_parametrization};
use crate::{Module, NnError, Result};
use tessera_tensor::Tensor;

/// PyTorch's `_WeightNorm`: the norm is taken over every dimension except `dim` (over the
/// whole tensor for `None`), so `g` has size 1 in those dimensions.
pub struct WeightNorm {
    dim: Option<usize>,
}

impl WeightNorm {
    pub fn new(dim: Option<usize>) -> WeightNorm {
        WeightNorm { dim }
    }

    /// `torch.norm_except_dim(v, 2, dim)`: the 2-norm over all other dimensions, kept.
    fn norm_except_dim(&self, v: &Tensor) -> Result<Tensor> {
        let squares = v.mul(v)?;
        let summed = match self.dim {
            None => squares.sum_all()?,
            Some(dim) => {
                let others: Vec<usize> = (0..v.ndim()).filter(|&d| d != dim).collect();
                squares.sum_dims(&others, true)?
            }
        };
        Ok(summed.sqrt()?)
    }
}

impl Parametrization for WeightNorm {
    fn name(&self) -> String {
        "_WeightNorm".into()
    }

    fn forward(&self, _x: &Tensor) -> Result<Tensor> {
        Err(NnError::Invalid(
            "_WeightNorm computes the weight from two stored tensors (g, v)".into(),
        ))
    }

    /// `torch._weight_norm(v, g, dim) = v * (g / norm_except_dim(v, 2, dim))`.
    fn forward_originals(&self, originals: &[Tensor]) -> Result<Tensor> {
        let [g, v] = originals else {
            return Err(NnError::Invalid(format!(
                "_WeightNorm takes two stored tensors (g, v), got {}",
                originals.len()
            )));
        };
        Ok(v.mul(&g.div(&self.norm_except_dim(v)?)?)?)
    }

    fn right_inverse_originals(&self, weight: &Tensor) -> Result<Vec<Tensor>> {
        Ok(vec![self.norm_except_dim(weight)?, weight.clone()])
    }
}

/// Reparametrizes `tensor_name` of `module` by magnitude and direction (PyTorch's
/// `parametrizations.weight_norm(module, name, dim)`): the state dict holds
/// `parametrizations.<name>.original0` (`g`, the norm over every dimension but `dim`) and
/// `original1` (`v`, the initial weight), and the weight's value is unchanged.
pub fn weight_norm<M: Module + ?Sized>(
    module: &mut M,
    tensor_name: &str,
    dim: Option<usize>,
) -> Result<()> {
    let weight = current_value(module, tensor_name)?;
    if let Some(d) = dim
        && d >= weight.ndim()
    {
        return Err(NnError::Invalid(format!(
            "weight_norm: dim {d} is out of range for `{tensor_name}` of {} with shape {:?}",
            module.type_name(),
            weight.shape()
        )));
    }
    register_parametrization(module, tensor_name, WeightNorm::new(dim), true)
}
