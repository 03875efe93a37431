//! `Flatten` and `Unflatten`: merge a range of dimensions into one (by default all but the batch
//! dim), and split one dimension into several.

use crate::{Forward, ModuleCore, Result};
use tessera_tensor::Tensor;

/// Merges dimensions `start_dim..=end_dim` (negative counts from the end).
#[derive(crate::Module)]
#[module(extra_repr = "repr_args")]
pub struct Flatten {
    core: ModuleCore,
    pub start_dim: isize,
    pub end_dim: isize,
}

impl Default for Flatten {
    /// PyTorch's `Flatten()`: `start_dim=1, end_dim=-1`.
    fn default() -> Self {
        Flatten::with_dims(1, -1)
    }
}

impl Flatten {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn with_dims(start_dim: isize, end_dim: isize) -> Self {
        Flatten {
            core: ModuleCore::default(),
            start_dim,
            end_dim,
        }
    }

    fn repr_args(&self) -> String {
        format!("start_dim={}, end_dim={}", self.start_dim, self.end_dim)
    }
}

impl Forward for Flatten {
    type Output = Tensor;
    fn forward(&self, input: Tensor) -> Result<Tensor> {
        Ok(input.flatten(self.start_dim, self.end_dim)?)
    }
}

/// Splits dimension `dim` (negative counts from the end) into `unflattened_size`, whose
/// product must be that dimension's size (a reshape).
#[derive(crate::Module)]
#[module(extra_repr = "repr_args")]
pub struct Unflatten {
    core: ModuleCore,
    pub dim: isize,
    pub unflattened_size: Vec<usize>,
}

impl Unflatten {
    pub fn new(dim: isize, unflattened_size: &[usize]) -> Self {
        Unflatten {
            core: ModuleCore::default(),
            dim,
            unflattened_size: unflattened_size.to_vec(),
        }
    }

    fn repr_args(&self) -> String {
        format!(
            "dim={}, unflattened_size={}",
            self.dim,
            super::python::py_tuple(&self.unflattened_size)
        )
    }
}

impl Forward for Unflatten {
    type Output = Tensor;
    fn forward(&self, input: Tensor) -> Result<Tensor> {
        let shape = input.shape();
        let rank = shape.len() as isize;
        let dim = if self.dim < 0 {
            self.dim + rank
        } else {
            self.dim
        };
        let fits = (0..rank).contains(&dim)
            && self
                .unflattened_size
                .iter()
                .try_fold(1usize, |a, &b| a.checked_mul(b))
                == Some(shape[dim as usize]);
        if !fits {
            return Err(crate::NnError::Invalid(format!(
                "Unflatten: unflattened_size {:?} must multiply to the size of dim {} of input {shape:?}",
                self.unflattened_size, self.dim
            )));
        }
        let dim = dim as usize;
        let mut new_shape = shape[..dim].to_vec();
        new_shape.extend(&self.unflattened_size);
        new_shape.extend(&shape[dim + 1..]);
        Ok(input.reshape(&new_shape)?)
    }
}
