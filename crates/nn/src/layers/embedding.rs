//! `Embedding`: a lookup table of `num_embeddings` vectors of size `embedding_dim`, indexed
//! by i64 (or i32) tensors.

use super::options::{initialized, options, parameter};
use crate::init;
use crate::{Forward, ModuleCore, NnError, Parameter, Result};
use tessera_tensor::{DType, Device, Tensor, functional, no_grad};

options! {
    /// Options of [`Embedding`]. `padding_idx` (negative counts from the end) names a row
    /// that starts at zero and receives no gradient.
    EmbeddingOptions {
        padding_idx: Option<i64> = None,
        dtype: DType = DType::F32,
        device: Device = Device::Cpu,
    }
}

/// Rows of `weight` (`[num_embeddings, embedding_dim]`, N(0, 1) initially) selected by index.
#[derive(crate::Module)]
#[module(extra_repr = "repr_args")]
pub struct Embedding {
    core: ModuleCore,
    pub num_embeddings: usize,
    pub embedding_dim: usize,
    /// The padding row, made non-negative as PyTorch stores it.
    pub padding_idx: Option<usize>,
    pub weight: Parameter,
}

impl Embedding {
    pub fn new(num_embeddings: usize, embedding_dim: usize) -> Result<Self> {
        Self::with_options(num_embeddings, embedding_dim, EmbeddingOptions::default())
    }

    pub fn with_options(
        num_embeddings: usize,
        embedding_dim: usize,
        options: EmbeddingOptions,
    ) -> Result<Self> {
        let padding_idx = padding_row(options.padding_idx, num_embeddings)?;
        let weight = parameter(
            &[num_embeddings, embedding_dim],
            options.dtype,
            options.device,
        )?;
        let layer = Embedding {
            core: ModuleCore::default(),
            num_embeddings,
            embedding_dim,
            padding_idx,
            weight,
        };
        initialized(layer, Embedding::reset_parameters)
    }

    /// A table holding `embeddings` (`[num, dim]`, shared, not copied); `freeze` turns off
    /// its gradient.
    pub fn from_pretrained(
        embeddings: &Tensor,
        freeze: bool,
        padding_idx: Option<i64>,
    ) -> Result<Self> {
        let shape = embeddings.shape();
        let [num_embeddings, embedding_dim] = shape[..] else {
            return Err(NnError::Invalid(format!(
                "Embedding: embeddings parameter is expected to be 2-dimensional, got shape {shape:?}"
            )));
        };
        Ok(Embedding {
            core: ModuleCore::default(),
            num_embeddings,
            embedding_dim,
            padding_idx: padding_row(padding_idx, num_embeddings)?,
            weight: Parameter::with_requires_grad(embeddings.clone(), !freeze),
        })
    }

    /// N(0, 1) for every row, then zeros for the padding row.
    pub fn reset_parameters(&self) -> Result<()> {
        init::normal_(&self.weight, 0.0, 1.0, None)?;
        if let Some(row) = self.padding_idx {
            let _guard = no_grad();
            self.weight.select(0, row)?.fill_(0.0)?;
        }
        Ok(())
    }

    fn repr_args(&self) -> String {
        let mut s = format!("{}, {}", self.num_embeddings, self.embedding_dim);
        if let Some(p) = self.padding_idx {
            s += &format!(", padding_idx={p}");
        }
        s
    }
}

fn padding_row(padding_idx: Option<i64>, num_embeddings: usize) -> Result<Option<usize>> {
    let num = num_embeddings as i64;
    match padding_idx {
        None => Ok(None),
        Some(p) if (-num..num).contains(&p) => Ok(Some(p.rem_euclid(num) as usize)),
        Some(p) => Err(NnError::Invalid(format!(
            "Embedding: padding_idx ({p}) must be within num_embeddings ({num_embeddings})"
        ))),
    }
}

impl Forward for Embedding {
    type Output = Tensor;
    fn forward(&self, input: Tensor) -> Result<Tensor> {
        let padding = self.padding_idx.map(|p| p as i64);
        Ok(functional::embedding(&input, &self.weight, padding)?)
    }
}
