//! `Dropout`: zeroes elements with probability `p` in training (scaling the rest by
//! `1 / (1 - p)`) and is the identity in eval mode.

use super::python::{py_bool, py_float};
use crate::{Forward, ModuleCore, ModuleExt, NnError, Result};
use tessera_tensor::{Tensor, functional};

/// Dropout with the global generator (see `tessera_tensor::manual_seed`).
#[derive(crate::Module)]
#[module(extra_repr = "repr_args")]
pub struct Dropout {
    core: ModuleCore,
    pub p: f64,
    /// Kept for the repr; the result is always a new tensor.
    pub inplace: bool,
}

impl Dropout {
    /// `p` must lie in `[0, 1]` (PyTorch's default is 0.5).
    pub fn new(p: f64) -> Result<Self> {
        Self::with_inplace(p, false)
    }

    pub fn with_inplace(p: f64, inplace: bool) -> Result<Self> {
        if !(0.0..=1.0).contains(&p) {
            return Err(NnError::Invalid(format!(
                "Dropout: dropout probability has to be between 0 and 1, but got {}",
                py_float(p)
            )));
        }
        Ok(Dropout {
            core: ModuleCore::default(),
            p,
            inplace,
        })
    }

    fn repr_args(&self) -> String {
        format!("p={}, inplace={}", py_float(self.p), py_bool(self.inplace))
    }
}

impl Forward for Dropout {
    type Output = Tensor;
    fn forward(&self, input: Tensor) -> Result<Tensor> {
        Ok(functional::dropout(&input, self.p, self.is_training())?)
    }
}
