//! PyTorch's `torch.nn.utils.parametrizations`: ready-made parametrizations registered
//! through [`crate::parametrize`].

mod linalg;
mod orthogonal;
mod weight_norm;

pub use orthogonal::{Orthogonal, orthogonal};
pub use weight_norm::{WeightNorm, weight_norm};

use crate::{Module, ModuleExt, NnError, Result, parametrize};
use tessera_tensor::Tensor;

/// The current value of the module's tensor `name`: parametrized, parameter or buffer.
fn current_value<M: Module + ?Sized>(module: &M, name: &str) -> Result<Tensor> {
    if parametrize::is_parametrized(module, Some(name)) {
        return parametrize::recompute(module, name);
    }
    module
        .get_parameter(name)
        .map(|p| p.tensor().clone())
        .or_else(|_| module.get_buffer(name))
        .map_err(|_| {
            NnError::NotFound(format!(
                "{} has no parameter or buffer named `{name}`",
                module.type_name()
            ))
        })
}
