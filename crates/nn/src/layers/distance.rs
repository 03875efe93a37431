//! `CosineSimilarity`: the cosine of the angle between two inputs along a dimension, called
//! with `(x1, x2)`.

use crate::{Forward, ModuleCore, Result};
use tessera_tensor::{Tensor, functional};

/// `sum(x1 * x2) / (max(|x1|, eps) * max(|x2|, eps))` along `dim` (PyTorch's defaults are
/// `dim = 1`, `eps = 1e-8`).
#[derive(crate::Module)]
pub struct CosineSimilarity {
    core: ModuleCore,
    pub dim: isize,
    pub eps: f64,
}

impl Default for CosineSimilarity {
    fn default() -> Self {
        CosineSimilarity::new(1, 1e-8)
    }
}

impl CosineSimilarity {
    pub fn new(dim: isize, eps: f64) -> Self {
        CosineSimilarity {
            core: ModuleCore::default(),
            dim,
            eps,
        }
    }
}

impl Forward<(Tensor, Tensor)> for CosineSimilarity {
    type Output = Tensor;
    fn forward(&self, (x1, x2): (Tensor, Tensor)) -> Result<Tensor> {
        Ok(functional::cosine_similarity(&x1, &x2, self.dim, self.eps)?)
    }
}
