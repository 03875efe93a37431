//! PyTorch's transformer blocks: `TransformerEncoderLayer`, `TransformerDecoderLayer` (post-
//! or pre-norm, relu or exact-erf gelu), the `TransformerEncoder`/`TransformerDecoder` stacks
//! of cloned layers with an optional final norm, and `Transformer`, with PyTorch's parameter
//! names and reprs.

use super::attention::{
    AttentionInput, MultiheadAttention, MultiheadAttentionOptions, tensor_args,
};
use super::dropout::Dropout;
use super::linear::{Linear, LinearOptions};
use super::norm::{LayerNorm, LayerNormOptions};
use super::options::options;
use crate::containers::ModuleList;
use crate::{Args, Call, Forward, Module, ModuleCore, ModuleExt, NnError, Result};
use tessera_tensor::{DType, Device, Tensor};

/// The feed-forward activation of the transformer layers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activation {
    Relu,
    /// The exact (erf) GELU, as PyTorch's `"gelu"`.
    Gelu,
}

impl Activation {
    fn apply(self, x: &Tensor) -> Result<Tensor> {
        Ok(match self {
            Activation::Relu => x.relu()?,
            Activation::Gelu => x.gelu()?,
        })
    }
}

options! {
    /// Options of the transformer layers and [`Transformer`] (PyTorch's defaults).
    TransformerOptions {
        dim_feedforward: usize = 2048,
        dropout: f64 = 0.1,
        activation: Activation = Activation::Relu,
        layer_norm_eps: f64 = 1e-5,
        /// Inputs and outputs are `[N, S, E]` rather than `[S, N, E]`.
        batch_first: bool = false,
        /// Pre-norm (`x + f(norm(x))`) rather than post-norm (`norm(x + f(x))`).
        norm_first: bool = false,
        /// Whether the linear layers and layer norms learn biases.
        bias: bool = true,
        dtype: DType = DType::F32,
        device: Device = Device::Cpu,
    }
}

/// The sub-layers every transformer layer builds the same way.
struct Parts<'a> {
    d_model: usize,
    nhead: usize,
    o: &'a TransformerOptions,
}

impl Parts<'_> {
    fn attention(&self) -> Result<MultiheadAttention> {
        MultiheadAttention::with_options(
            self.d_model,
            self.nhead,
            MultiheadAttentionOptions::default()
                .dropout(self.o.dropout)
                .bias(self.o.bias)
                .batch_first(self.o.batch_first)
                .dtype(self.o.dtype)
                .device(self.o.device),
        )
    }

    fn linear(&self, i: usize, o: usize) -> Result<Linear> {
        let options = LinearOptions::default()
            .bias(self.o.bias)
            .dtype(self.o.dtype)
            .device(self.o.device);
        Linear::with_options(i, o, options)
    }

    fn norm(&self) -> Result<LayerNorm> {
        let options = LayerNormOptions::default()
            .eps(self.o.layer_norm_eps)
            .bias(self.o.bias)
            .dtype(self.o.dtype)
            .device(self.o.device);
        LayerNorm::with_options(&[self.d_model], options)
    }

    fn dropout(&self) -> Result<Dropout> {
        Dropout::new(self.o.dropout)
    }
}

/// `dropout(self_attn(x, x, x))` without weights: the self-attention block of both layers.
fn self_attention(
    attn: &MultiheadAttention,
    dropout: &Dropout,
    x: &Tensor,
    mask: &Option<Tensor>,
    padding: &Option<Tensor>,
) -> Result<Tensor> {
    attend(attn, dropout, x, x, mask, padding)
}

/// `dropout(attn(x, memory, memory))` without weights.
fn attend(
    attn: &MultiheadAttention,
    dropout: &Dropout,
    x: &Tensor,
    memory: &Tensor,
    mask: &Option<Tensor>,
    padding: &Option<Tensor>,
) -> Result<Tensor> {
    let mut input =
        AttentionInput::new(x.clone(), memory.clone(), memory.clone()).need_weights(false);
    input.attn_mask = mask.clone();
    input.key_padding_mask = padding.clone();
    dropout.call(attn.call(input)?.0)
}

/// `dropout_out(linear2(dropout(act(linear1(x)))))`.
fn feed_forward(
    linear1: &Linear,
    dropout: &Dropout,
    linear2: &Linear,
    dropout_out: &Dropout,
    activation: Activation,
    x: &Tensor,
) -> Result<Tensor> {
    let hidden = dropout.call(activation.apply(&linear1.call(x.clone())?)?)?;
    dropout_out.call(linear2.call(hidden)?)
}

/// `x + block(norm(x))` (pre-norm) or `norm(x + block(x))` (post-norm).
fn residual(
    norm_first: bool,
    norm: &LayerNorm,
    x: Tensor,
    block: impl FnOnce(&Tensor) -> Result<Tensor>,
) -> Result<Tensor> {
    if norm_first {
        let update = block(&norm.call(x.clone())?)?;
        Ok(x.add(&update)?)
    } else {
        let update = block(&x)?;
        norm.call(x.add(&update)?)
    }
}

tensor_args! {
    /// The arguments of an encoder layer or encoder call: `src` with optional `src_mask`
    /// (`[S, S]` or `[N*heads, S, S]`) and `src_key_padding_mask` (`[N, S]`); bool masks
    /// are true where attention is not allowed.
    EncoderInput {
        src;
        src_mask, src_key_padding_mask;
    }
}

tensor_args! {
    /// The arguments of a decoder layer or decoder call; bool masks are true where
    /// attention is not allowed.
    DecoderInput {
        tgt, memory;
        tgt_mask, memory_mask, tgt_key_padding_mask, memory_key_padding_mask;
    }
}

/// Self-attention and feed-forward with residuals and layer norms (`nn.TransformerEncoderLayer`).
#[derive(crate::Module)]
pub struct TransformerEncoderLayer {
    core: ModuleCore,
    pub self_attn: MultiheadAttention,
    pub linear1: Linear,
    pub dropout: Dropout,
    pub linear2: Linear,
    pub norm1: LayerNorm,
    pub norm2: LayerNorm,
    pub dropout1: Dropout,
    pub dropout2: Dropout,
    #[module(skip)]
    pub d_model: usize,
    #[module(skip)]
    pub nhead: usize,
    #[module(skip)]
    pub options: TransformerOptions,
}

impl TransformerEncoderLayer {
    pub fn new(d_model: usize, nhead: usize) -> Result<Self> {
        Self::with_options(d_model, nhead, TransformerOptions::default())
    }

    pub fn with_options(d_model: usize, nhead: usize, options: TransformerOptions) -> Result<Self> {
        let p = Parts {
            d_model,
            nhead,
            o: &options,
        };
        let ff = options.dim_feedforward;
        Ok(TransformerEncoderLayer {
            core: ModuleCore::default(),
            self_attn: p.attention()?,
            linear1: p.linear(d_model, ff)?,
            dropout: p.dropout()?,
            linear2: p.linear(ff, d_model)?,
            norm1: p.norm()?,
            norm2: p.norm()?,
            dropout1: p.dropout()?,
            dropout2: p.dropout()?,
            d_model,
            nhead,
            options,
        })
    }

    /// A layer of the same configuration holding a copy of this one's parameters (PyTorch's
    /// `copy.deepcopy` in `TransformerEncoder`).
    pub fn deep_clone(&self) -> Result<Self> {
        let copy = Self::with_options(self.d_model, self.nhead, self.options.clone())?;
        copy_state(self, &copy)?;
        Ok(copy)
    }
}

/// `layer` and `num_layers - 1` copies of it made by `deep_clone` (none when `num_layers` is 0).
fn clones<L: Module>(
    layer: L,
    num_layers: usize,
    deep_clone: impl Fn(&L) -> Result<L>,
) -> Result<ModuleList<L>> {
    let mut layers = ModuleList::new();
    if num_layers == 0 {
        return Ok(layers);
    }
    let copies = (1..num_layers)
        .map(|_| deep_clone(&layer))
        .collect::<Result<Vec<L>>>()?;
    layers.append(layer);
    layers.extend(copies);
    Ok(layers)
}

/// Loads `from`'s state into `to` (same architecture), as fresh tensors.
fn copy_state(from: &dyn Module, to: &dyn Module) -> Result<()> {
    let mut state = from.state_dict()?;
    let keys: Vec<String> = state.keys().map(String::from).collect();
    for key in keys {
        if let Some(t) = state.get(&key) {
            let copied = t.deep_clone()?;
            state.insert(key, copied);
        }
    }
    to.load_state_dict(&state, true, false)?;
    Ok(())
}

impl Forward<EncoderInput> for TransformerEncoderLayer {
    type Output = Tensor;
    fn forward(&self, input: EncoderInput) -> Result<Tensor> {
        let (mask, padding) = (&input.src_mask, &input.src_key_padding_mask);
        let x = residual(
            self.options.norm_first,
            &self.norm1,
            input.src.clone(),
            |x| self_attention(&self.self_attn, &self.dropout1, x, mask, padding),
        )?;
        residual(self.options.norm_first, &self.norm2, x, |x| {
            feed_forward(
                &self.linear1,
                &self.dropout,
                &self.linear2,
                &self.dropout2,
                self.options.activation,
                x,
            )
        })
    }
}

impl Forward for TransformerEncoderLayer {
    type Output = Tensor;
    fn forward(&self, src: Tensor) -> Result<Tensor> {
        Forward::<EncoderInput>::forward(self, EncoderInput::new(src))
    }
}

/// Self-attention, cross-attention over `memory` and feed-forward, with residuals and
/// layer norms (`nn.TransformerDecoderLayer`).
#[derive(crate::Module)]
pub struct TransformerDecoderLayer {
    core: ModuleCore,
    pub self_attn: MultiheadAttention,
    pub multihead_attn: MultiheadAttention,
    pub linear1: Linear,
    pub dropout: Dropout,
    pub linear2: Linear,
    pub norm1: LayerNorm,
    pub norm2: LayerNorm,
    pub norm3: LayerNorm,
    pub dropout1: Dropout,
    pub dropout2: Dropout,
    pub dropout3: Dropout,
    #[module(skip)]
    pub d_model: usize,
    #[module(skip)]
    pub nhead: usize,
    #[module(skip)]
    pub options: TransformerOptions,
}

impl TransformerDecoderLayer {
    pub fn new(d_model: usize, nhead: usize) -> Result<Self> {
        Self::with_options(d_model, nhead, TransformerOptions::default())
    }

    pub fn with_options(d_model: usize, nhead: usize, options: TransformerOptions) -> Result<Self> {
        let p = Parts {
            d_model,
            nhead,
            o: &options,
        };
        let ff = options.dim_feedforward;
        Ok(TransformerDecoderLayer {
            core: ModuleCore::default(),
            self_attn: p.attention()?,
            multihead_attn: p.attention()?,
            linear1: p.linear(d_model, ff)?,
            dropout: p.dropout()?,
            linear2: p.linear(ff, d_model)?,
            norm1: p.norm()?,
            norm2: p.norm()?,
            norm3: p.norm()?,
            dropout1: p.dropout()?,
            dropout2: p.dropout()?,
            dropout3: p.dropout()?,
            d_model,
            nhead,
            options,
        })
    }

    /// A layer of the same configuration holding a copy of this one's parameters.
    pub fn deep_clone(&self) -> Result<Self> {
        let copy = Self::with_options(self.d_model, self.nhead, self.options.clone())?;
        copy_state(self, &copy)?;
        Ok(copy)
    }
}

impl Forward<DecoderInput> for TransformerDecoderLayer {
    type Output = Tensor;
    fn forward(&self, input: DecoderInput) -> Result<Tensor> {
        let first = self.options.norm_first;
        let x = residual(first, &self.norm1, input.tgt.clone(), |x| {
            self_attention(
                &self.self_attn,
                &self.dropout1,
                x,
                &input.tgt_mask,
                &input.tgt_key_padding_mask,
            )
        })?;
        let x = residual(first, &self.norm2, x, |x| {
            attend(
                &self.multihead_attn,
                &self.dropout2,
                x,
                &input.memory,
                &input.memory_mask,
                &input.memory_key_padding_mask,
            )
        })?;
        residual(first, &self.norm3, x, |x| {
            feed_forward(
                &self.linear1,
                &self.dropout,
                &self.linear2,
                &self.dropout3,
                self.options.activation,
                x,
            )
        })
    }
}

impl Forward<(Tensor, Tensor)> for TransformerDecoderLayer {
    type Output = Tensor;
    fn forward(&self, (tgt, memory): (Tensor, Tensor)) -> Result<Tensor> {
        Forward::<DecoderInput>::forward(self, DecoderInput::new(tgt, memory))
    }
}

/// `num_layers` clones of an encoder layer and an optional final norm
/// (`nn.TransformerEncoder`; keys `layers.<i>.*`, `norm.*`).
#[derive(crate::Module)]
pub struct TransformerEncoder {
    core: ModuleCore,
    pub layers: ModuleList<TransformerEncoderLayer>,
    pub norm: Option<LayerNorm>,
    #[module(skip)]
    pub num_layers: usize,
}

impl TransformerEncoder {
    /// Clones `encoder_layer` `num_layers` times (every clone starts with its parameters).
    pub fn new(
        encoder_layer: TransformerEncoderLayer,
        num_layers: usize,
        norm: Option<LayerNorm>,
    ) -> Result<Self> {
        Ok(TransformerEncoder {
            core: ModuleCore::default(),
            layers: clones(
                encoder_layer,
                num_layers,
                TransformerEncoderLayer::deep_clone,
            )?,
            norm,
            num_layers,
        })
    }
}

impl Forward<EncoderInput> for TransformerEncoder {
    type Output = Tensor;
    fn forward(&self, input: EncoderInput) -> Result<Tensor> {
        let mut x = input.src.clone();
        for layer in self.layers.iter() {
            let mut step = EncoderInput::new(x);
            step.src_mask = input.src_mask.clone();
            step.src_key_padding_mask = input.src_key_padding_mask.clone();
            x = layer.call(step)?;
        }
        match &self.norm {
            Some(norm) => norm.call(x),
            None => Ok(x),
        }
    }
}

impl Forward for TransformerEncoder {
    type Output = Tensor;
    fn forward(&self, src: Tensor) -> Result<Tensor> {
        Forward::<EncoderInput>::forward(self, EncoderInput::new(src))
    }
}

/// `num_layers` clones of a decoder layer and an optional final norm (`nn.TransformerDecoder`).
#[derive(crate::Module)]
pub struct TransformerDecoder {
    core: ModuleCore,
    pub layers: ModuleList<TransformerDecoderLayer>,
    pub norm: Option<LayerNorm>,
    #[module(skip)]
    pub num_layers: usize,
}

impl TransformerDecoder {
    /// Clones `decoder_layer` `num_layers` times (every clone starts with its parameters).
    pub fn new(
        decoder_layer: TransformerDecoderLayer,
        num_layers: usize,
        norm: Option<LayerNorm>,
    ) -> Result<Self> {
        Ok(TransformerDecoder {
            core: ModuleCore::default(),
            layers: clones(
                decoder_layer,
                num_layers,
                TransformerDecoderLayer::deep_clone,
            )?,
            norm,
            num_layers,
        })
    }
}

impl Forward<DecoderInput> for TransformerDecoder {
    type Output = Tensor;
    fn forward(&self, input: DecoderInput) -> Result<Tensor> {
        let mut x = input.tgt.clone();
        for layer in self.layers.iter() {
            let mut step = input.clone();
            step.tgt = x;
            x = layer.call(step)?;
        }
        match &self.norm {
            Some(norm) => norm.call(x),
            None => Ok(x),
        }
    }
}

/// An encoder-decoder transformer (`nn.Transformer`): `num_encoder_layers` encoder layers and
/// `num_decoder_layers` decoder layers, each stack ending in a LayerNorm.
#[derive(crate::Module)]
pub struct Transformer {
    core: ModuleCore,
    pub encoder: TransformerEncoder,
    pub decoder: TransformerDecoder,
    #[module(skip)]
    pub d_model: usize,
    #[module(skip)]
    pub nhead: usize,
    #[module(skip)]
    pub batch_first: bool,
}

impl Transformer {
    /// PyTorch's defaults: d_model 512, nhead 8, 6 + 6 layers, feed-forward 2048, dropout 0.1.
    pub fn new() -> Result<Self> {
        Self::with_options(512, 8, 6, 6, TransformerOptions::default())
    }

    pub fn with_options(
        d_model: usize,
        nhead: usize,
        num_encoder_layers: usize,
        num_decoder_layers: usize,
        options: TransformerOptions,
    ) -> Result<Self> {
        let p = Parts {
            d_model,
            nhead,
            o: &options,
        };
        let encoder = TransformerEncoder::new(
            TransformerEncoderLayer::with_options(d_model, nhead, options.clone())?,
            num_encoder_layers,
            Some(p.norm()?),
        )?;
        let decoder = TransformerDecoder::new(
            TransformerDecoderLayer::with_options(d_model, nhead, options.clone())?,
            num_decoder_layers,
            Some(p.norm()?),
        )?;
        Ok(Transformer {
            core: ModuleCore::default(),
            encoder,
            decoder,
            d_model,
            nhead,
            batch_first: options.batch_first,
        })
    }
}

tensor_args! {
    /// The arguments of a [`Transformer`] call (PyTorch's `forward` signature).
    TransformerInput {
        src, tgt;
        src_mask, tgt_mask, memory_mask, src_key_padding_mask, tgt_key_padding_mask, memory_key_padding_mask;
    }
}

impl Forward<TransformerInput> for Transformer {
    type Output = Tensor;
    fn forward(&self, input: TransformerInput) -> Result<Tensor> {
        let batch = if self.batch_first { 0 } else { 1 };
        let (s, t) = (input.src.shape(), input.tgt.shape());
        if s.len() != t.len() || s.get(batch) != t.get(batch) {
            return Err(NnError::Invalid(format!(
                "Transformer: the batch number of src {s:?} and tgt {t:?} must be equal"
            )));
        }
        let mut encode = EncoderInput::new(input.src.clone());
        encode.src_mask = input.src_mask.clone();
        encode.src_key_padding_mask = input.src_key_padding_mask.clone();
        let memory = self.encoder.call(encode)?;
        let mut decode = DecoderInput::new(input.tgt.clone(), memory);
        decode.tgt_mask = input.tgt_mask.clone();
        decode.memory_mask = input.memory_mask.clone();
        decode.tgt_key_padding_mask = input.tgt_key_padding_mask.clone();
        decode.memory_key_padding_mask = input.memory_key_padding_mask;
        self.decoder.call(decode)
    }
}

impl Forward<(Tensor, Tensor)> for Transformer {
    type Output = Tensor;
    fn forward(&self, (src, tgt): (Tensor, Tensor)) -> Result<Tensor> {
        Forward::<TransformerInput>::forward(self, TransformerInput::new(src, tgt))
    }
}
