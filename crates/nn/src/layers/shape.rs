//! `Flatten`: merges a range of dimensions into one (by default all but the batch dim).

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
