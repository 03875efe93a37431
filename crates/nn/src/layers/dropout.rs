//! `Dropout` and `Dropout2d`: zero elements (or whole channels) with probability `p` in
//! training, scaling the rest by `1 / (1 - p)`, and are the identity in eval mode.

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
        check_probability("Dropout", p)?;
        Ok(Dropout {
            core: ModuleCore::default(),
            p,
            inplace,
        })
    }

    fn repr_args(&self) -> String {
        repr(self.p, self.inplace)
    }
}

/// PyTorch's error for a probability outside `[0, 1]`.
fn check_probability(layer: &str, p: f64) -> Result<()> {
    if (0.0..=1.0).contains(&p) {
        return Ok(());
    }
    Err(NnError::Invalid(format!(
        "{layer}: dropout probability has to be between 0 and 1, but got {}",
        py_float(p)
    )))
}

fn repr(p: f64, inplace: bool) -> String {
    format!("p={}, inplace={}", py_float(p), py_bool(inplace))
}

/// Zeroes whole channels of `[N, C, H, W]` (or unbatched `[C, H, W]`) input with probability
/// `p` in training, scaling the kept ones by `1 / (1 - p)`: the dropout op draws a mask of
/// shape `[N, C, 1, 1]` from the global generator.
#[derive(crate::Module)]
#[module(extra_repr = "repr_args")]
pub struct Dropout2d {
    core: ModuleCore,
    pub p: f64,
    /// Kept for the repr; the result is always a new tensor.
    pub inplace: bool,
}

impl Dropout2d {
    /// `p` must lie in `[0, 1]` (PyTorch's default is 0.5).
    pub fn new(p: f64) -> Result<Self> {
        check_probability("Dropout2d", p)?;
        Ok(Dropout2d {
            core: ModuleCore::default(),
            p,
            inplace: false,
        })
    }

    fn repr_args(&self) -> String {
        repr(self.p, self.inplace)
    }
}

impl Forward for Dropout2d {
    type Output = Tensor;
    fn forward(&self, input: Tensor) -> Result<Tensor> {
        let shape = input.shape();
        if !matches!(shape.len(), 3 | 4) {
            return Err(NnError::Invalid(format!(
                "Dropout2d: expected 3D (unbatched) or 4D (batched) input, but got input of size {shape:?}"
            )));
        }
        if !self.is_training() {
            return Ok(input);
        }
        let mut mask_shape = shape[..shape.len() - 2].to_vec();
        mask_shape.extend([1, 1]);
        let spatial = shape[shape.len() - 2] * shape[shape.len() - 1];
        let ones = if input.is_meta() && spatial > 0 {
            // Tracing: ones made from the traced input, so that the graph's dropout node draws
            // the mask each time it runs rather than once now, into a constant.
            let corner = input.narrow(-1, 0, 1)?.narrow(-2, 0, 1)?;
            let one = Tensor::ones(&[], input.dtype())?;
            Tensor::where_(&corner.gt_scalar(0.0)?, &one, &one)?
        } else {
            Tensor::ones(&mask_shape, input.dtype())?
        };
        let mask = functional::dropout(&ones, self.p, true)?;
        Ok(input.mul(&mask)?)
    }
}

impl Forward for Dropout {
    type Output = Tensor;
    fn forward(&self, input: Tensor) -> Result<Tensor> {
        Ok(functional::dropout(&input, self.p, self.is_training())?)
    }
}
