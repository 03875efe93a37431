//! `EmbeddingBag`: the sum or mean of bags of rows of an embedding table, called with
//! `(input, offsets)` (1-D indices cut at bag starts) or with a 2-D `[B, L]` input.

use super::options::{initialized, options, parameter};
use crate::init;
use crate::{Forward, ModuleCore, Parameter, Result};
use tessera_tensor::functional::{self, EmbeddingBagMode};
use tessera_tensor::{DType, Device, Tensor};

options! {
    /// Options of [`EmbeddingBag`] (PyTorch's default mode is the mean).
    EmbeddingBagOptions {
        mode: EmbeddingBagMode = EmbeddingBagMode::Mean,
        dtype: DType = DType::F32,
        device: Device = Device::Cpu,
    }
}

/// Bags of rows of `weight` (`[num_embeddings, embedding_dim]`, N(0, 1) initially), each
/// reduced to one row; an empty bag gives zeros.
#[derive(crate::Module)]
#[module(extra_repr = "repr_args")]
pub struct EmbeddingBag {
    core: ModuleCore,
    pub num_embeddings: usize,
    pub embedding_dim: usize,
    #[module(skip)]
    pub mode: EmbeddingBagMode,
    pub weight: Parameter,
}

impl EmbeddingBag {
    pub fn new(num_embeddings: usize, embedding_dim: usize) -> Result<Self> {
        Self::with_options(
            num_embeddings,
            embedding_dim,
            EmbeddingBagOptions::default(),
        )
    }

    pub fn with_options(
        num_embeddings: usize,
        embedding_dim: usize,
        options: EmbeddingBagOptions,
    ) -> Result<Self> {
        let shape = [num_embeddings, embedding_dim];
        let layer = EmbeddingBag {
            core: ModuleCore::default(),
            num_embeddings,
            embedding_dim,
            mode: options.mode,
            weight: parameter(&shape, options.dtype, options.device)?,
        };
        initialized(layer, EmbeddingBag::reset_parameters)
    }

    /// Draws the table from N(0, 1).
    pub fn reset_parameters(&self) -> Result<()> {
        init::normal_(&self.weight, 0.0, 1.0, None)
    }

    fn repr_args(&self) -> String {
        let mode = match self.mode {
            EmbeddingBagMode::Sum => "sum",
            EmbeddingBagMode::Mean => "mean",
        };
        format!(
            "{}, {}, mode='{mode}'",
            self.num_embeddings, self.embedding_dim
        )
    }
}

impl Forward<(Tensor, Tensor)> for EmbeddingBag {
    type Output = Tensor;
    /// 1-D i64 `input` and bag starts `offsets` (the last bag runs to the end).
    fn forward(&self, (input, offsets): (Tensor, Tensor)) -> Result<Tensor> {
        Ok(functional::embedding_bag(
            &input,
            &self.weight,
            Some(&offsets),
            self.mode,
        )?)
    }
}

impl Forward for EmbeddingBag {
    type Output = Tensor;
    /// A 2-D i64 `input` `[B, L]`: `B` bags of `L` indices.
    fn forward(&self, input: Tensor) -> Result<Tensor> {
        Ok(functional::embedding_bag(
            &input,
            &self.weight,
            None,
            self.mode,
        )?)
    }
}
