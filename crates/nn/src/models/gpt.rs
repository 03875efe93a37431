//! A GPT-style decoder-only language model (the conformance case's `TinyGPT`): token and
//! position embeddings, pre-norm `TransformerEncoderLayer` blocks under a causal mask, a final
//! LayerNorm and an output projection TIED to the token embedding (one parameter, listed
//! under both `tok_emb.weight` and `head.weight` in the state dict).

use crate::init;
use crate::layers::{
    Activation, Embedding, EncoderInput, LayerNorm, Linear, LinearOptions, TransformerEncoderLayer,
    TransformerOptions,
};
use crate::{Call, Forward, Module, ModuleCore, ModuleList, NnError, Result};
use tessera_tensor::{DType, Tensor};

/// The sizes of a [`Gpt`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GptConfig {
    pub vocab_size: usize,
    /// The longest sequence (rows of the position embedding).
    pub block_size: usize,
    pub d_model: usize,
    pub nhead: usize,
    pub num_layers: usize,
    pub dim_feedforward: usize,
}

impl GptConfig {
    /// The conformance case's `TinyGPT`: vocabulary 50, context 12, width 32, 4 heads, 2
    /// blocks, feed-forward 128.
    pub fn tiny() -> Self {
        GptConfig {
            vocab_size: 50,
            block_size: 12,
            d_model: 32,
            nhead: 4,
            num_layers: 2,
            dim_feedforward: 128,
        }
    }
}

/// `head(ln_f(blocks(tok_emb(ids) + pos_emb(0..T))))` with causal self-attention; printed as
/// PyTorch's `TinyGPT`.
#[derive(Module)]
#[module(name = "TinyGPT")]
pub struct Gpt {
    core: ModuleCore,
    pub tok_emb: Embedding,
    pub pos_emb: Embedding,
    pub blocks: ModuleList<TransformerEncoderLayer>,
    pub ln_f: LayerNorm,
    /// No bias; its weight is `tok_emb.weight` itself.
    pub head: Linear,
    #[module(skip)]
    pub config: GptConfig,
}

impl Gpt {
    /// Embeddings drawn from N(0, 0.02^2) as GPT-2; the blocks use no dropout and the exact
    /// GELU.
    pub fn new(config: GptConfig) -> Result<Self> {
        let GptConfig {
            vocab_size,
            block_size,
            d_model,
            nhead,
            ..
        } = config;
        let tok_emb = Embedding::new(vocab_size, d_model)?;
        let pos_emb = Embedding::new(block_size, d_model)?;
        for e in [&tok_emb, &pos_emb]
            .into_iter()
            .filter(|_| !init::is_init_skipped())
        {
            init::normal_(&e.weight, 0.0, 0.02, None)?;
        }
        let options = TransformerOptions::default()
            .dim_feedforward(config.dim_feedforward)
            .dropout(0.0)
            .activation(Activation::Gelu)
            .batch_first(true)
            .norm_first(true);
        let mut blocks = ModuleList::new();
        for _ in 0..config.num_layers {
            blocks.append(TransformerEncoderLayer::with_options(
                d_model,
                nhead,
                options.clone(),
            )?);
        }
        let mut head =
            Linear::with_options(d_model, vocab_size, LinearOptions::default().bias(false))?;
        head.weight = tok_emb.weight.clone();
        Ok(Gpt {
            core: ModuleCore::default(),
            tok_emb,
            pos_emb,
            blocks,
            ln_f: LayerNorm::new(&[d_model])?,
            head,
            config,
        })
    }
}

/// `[len, len]`, true above the diagonal: position i may not attend to j > i.
fn causal_mask(len: usize) -> Result<Tensor> {
    let masked = (0..len * len).map(|k| k % len > k / len).collect();
    Ok(Tensor::from_vec::<bool>(masked, &[len, len])?)
}

impl Forward for Gpt {
    type Output = Tensor;

    /// Token ids `[N, T]` (int64, `T <= block_size`) to logits `[N, T, vocab_size]`.
    fn forward(&self, ids: Tensor) -> Result<Tensor> {
        let shape = ids.shape();
        if shape.len() != 2 || shape[1] > self.config.block_size || ids.dtype() != DType::I64 {
            return Err(NnError::Invalid(format!(
                "TinyGPT: expected int64 token ids [N, T <= {}], got {:?} {shape:?}",
                self.config.block_size,
                ids.dtype()
            )));
        }
        let len = shape[1];
        let positions = Tensor::arange(0.0, len as f64, 1.0, DType::I64)?;
        let mut x = self
            .tok_emb
            .call(ids)?
            .add(&self.pos_emb.call(positions)?)?;
        let mask = causal_mask(len)?;
        for block in self.blocks.iter() {
            x = block.call(EncoderInput::new(x).src_mask(mask.clone()))?;
        }
        self.head.call(self.ln_f.call(x)?)
    }
}
