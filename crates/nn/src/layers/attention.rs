//! `MultiheadAttention`: PyTorch's packed `in_proj_weight` (or separate `q/k/v_proj_weight`
//! when key or value widths differ), `out_proj`, `batch_first`, key-padding and attention
//! masks (bool: true = masked out), and the attention weights averaged over heads or per head.

use super::linear::NonDynamicallyQuantizableLinear;
use super::options::{initialized, optional_parameter, options, parameter};
use crate::init;
use crate::{Args, Call, Forward, ModuleCore, ModuleExt, NnError, Parameter, Result};
use tessera_tensor::functional::{AttentionOptions, attention_with_weights};
use tessera_tensor::{DType, Device, Tensor};

options! {
    /// Options of [`MultiheadAttention`] (PyTorch's defaults).
    MultiheadAttentionOptions {
        /// Dropout on the attention probabilities in training.
        dropout: f64 = 0.0,
        /// Whether the input and output projections learn biases.
        bias: bool = true,
        /// Width of the keys (`None`: `embed_dim`).
        kdim: Option<usize> = None,
        /// Width of the values (`None`: `embed_dim`).
        vdim: Option<usize> = None,
        /// Inputs and outputs are `[N, L, E]` rather than `[L, N, E]`.
        batch_first: bool = false,
        dtype: DType = DType::F32,
        device: Device = Device::Cpu,
    }
}

/// Declares an input struct of required tensors and optional tensor arguments, with
/// chainable setters for the optional ones and [`Args`] (so hooks see and may replace every
/// tensor present, in declaration order).
macro_rules! tensor_args {
    ($(#[$doc:meta])* $name:ident { $($req:ident),* ; $($opt:ident),* ; $($flag:ident : $default:expr),* }) => {
        $(#[$doc])*
        #[derive(Debug, Clone)]
        pub struct $name {
            $(pub $req: Tensor,)*
            $(pub $opt: Option<Tensor>,)*
            $(pub $flag: bool,)*
        }

        impl $name {
            /// The required tensors, every option absent and every flag at PyTorch's default.
            #[allow(clippy::new_without_default)]
            pub fn new($($req: Tensor),*) -> Self {
                $name { $($req,)* $($opt: None,)* $($flag: $default,)* }
            }
            $(
                pub fn $opt(mut self, mask: Tensor) -> Self {
                    self.$opt = Some(mask);
                    self
                }
            )*
            $(
                pub fn $flag(mut self, value: bool) -> Self {
                    self.$flag = value;
                    self
                }
            )*
        }

        impl Args for $name {
            fn tensors(&self) -> Vec<Tensor> {
                let mut all = vec![$(self.$req.clone()),*];
                $(all.extend(self.$opt.clone());)*
                all
            }
            fn with_tensors(mut self, tensors: Vec<Tensor>) -> Result<Self> {
                let expected = self.tensors().len();
                if tensors.len() != expected {
                    return Err(NnError::Invalid(format!(
                        "a hook returned {} tensors where the module takes {expected}",
                        tensors.len()
                    )));
                }
                let mut it = tensors.into_iter();
                $(if let Some(t) = it.next() { self.$req = t; })*
                $(if self.$opt.is_some() { self.$opt = it.next(); })*
                Ok(self)
            }
        }
    };
}
pub(crate) use tensor_args;

tensor_args! {
    /// The arguments of a [`MultiheadAttention`] call (PyTorch's `forward` signature):
    /// `AttentionInput::new(q, k, v).key_padding_mask(m).need_weights(false)`.
    AttentionInput {
        query, key, value;
        key_padding_mask, attn_mask;
        need_weights: true, average_attn_weights: true
    }
}

/// The attention output and, when `need_weights`, the weights `[N, L, S]` (averaged over
/// heads) or `[N, heads, L, S]`, batch first whatever `batch_first` says.
pub type AttentionOutput = (Tensor, Option<Tensor>);

impl Args for (Tensor, Option<Tensor>) {
    fn tensors(&self) -> Vec<Tensor> {
        std::iter::once(self.0.clone())
            .chain(self.1.clone())
            .collect()
    }
    fn with_tensors(self, tensors: Vec<Tensor>) -> Result<Self> {
        let mut it = tensors.into_iter();
        let output = it
            .next()
            .ok_or_else(|| NnError::Invalid("a hook returned no tensors".into()))?;
        Ok((output, self.1.and(it.next())))
    }
}

/// Attention of `num_heads` heads over `embed_dim` features, as PyTorch's
/// `nn.MultiheadAttention`.
#[derive(crate::Module)]
pub struct MultiheadAttention {
    core: ModuleCore,
    pub embed_dim: usize,
    pub num_heads: usize,
    #[module(skip)]
    pub options: MultiheadAttentionOptions,
    /// `[3E, E]`: W_q, W_k, W_v stacked (when keys and values are `embed_dim` wide).
    pub in_proj_weight: Option<Parameter>,
    pub q_proj_weight: Option<Parameter>,
    pub k_proj_weight: Option<Parameter>,
    pub v_proj_weight: Option<Parameter>,
    /// `[3E]`: b_q, b_k, b_v stacked.
    pub in_proj_bias: Option<Parameter>,
    pub out_proj: NonDynamicallyQuantizableLinear,
}

impl MultiheadAttention {
    pub fn new(embed_dim: usize, num_heads: usize) -> Result<Self> {
        Self::with_options(embed_dim, num_heads, MultiheadAttentionOptions::default())
    }

    pub fn with_options(
        embed_dim: usize,
        num_heads: usize,
        options: MultiheadAttentionOptions,
    ) -> Result<Self> {
        if num_heads == 0 || !embed_dim.is_multiple_of(num_heads) {
            return Err(NnError::Invalid(format!(
                "MultiheadAttention: embed_dim ({embed_dim}) must be divisible by num_heads ({num_heads})"
            )));
        }
        if !(0.0..=1.0).contains(&options.dropout) {
            return Err(NnError::Invalid(format!(
                "MultiheadAttention: dropout probability has to be between 0 and 1, but got {}",
                options.dropout
            )));
        }
        let (dtype, device, e) = (options.dtype, options.device, embed_dim);
        let kdim = options.kdim.unwrap_or(e);
        let vdim = options.vdim.unwrap_or(e);
        let packed = kdim == e && vdim == e;
        let weight =
            |shape: &[usize], wanted: bool| optional_parameter(wanted, shape, dtype, device);
        let layer = MultiheadAttention {
            core: ModuleCore::default(),
            embed_dim,
            num_heads,
            in_proj_weight: weight(&[3 * e, e], packed)?,
            q_proj_weight: weight(&[e, e], !packed)?,
            k_proj_weight: weight(&[e, kdim], !packed)?,
            v_proj_weight: weight(&[e, vdim], !packed)?,
            in_proj_bias: options
                .bias
                .then(|| parameter(&[3 * e], dtype, device))
                .transpose()?,
            out_proj: NonDynamicallyQuantizableLinear::with_options(
                e,
                e,
                super::LinearOptions::default()
                    .bias(options.bias)
                    .dtype(dtype)
                    .device(device),
            )?,
            options,
        };
        initialized(layer, MultiheadAttention::reset_parameters)
    }

    /// PyTorch's `_reset_parameters`: Xavier-uniform projection weights, zero biases.
    pub fn reset_parameters(&self) -> Result<()> {
        for w in [
            &self.in_proj_weight,
            &self.q_proj_weight,
            &self.k_proj_weight,
            &self.v_proj_weight,
        ]
        .into_iter()
        .flatten()
        {
            init::xavier_uniform_(w, 1.0, None)?;
        }
        for b in [&self.in_proj_bias, &self.out_proj.bias]
            .into_iter()
            .flatten()
        {
            init::zeros_(b)?;
        }
        Ok(())
    }

    pub fn head_dim(&self) -> usize {
        self.embed_dim / self.num_heads
    }

    /// The projection weight and bias of `q`, `k` or `v` (`which` 0, 1, 2).
    fn projection(&self, which: usize) -> Result<(Tensor, Option<Tensor>)> {
        let e = self.embed_dim;
        let weight = match &self.in_proj_weight {
            Some(w) => w.narrow(0, which * e, e)?,
            None => {
                let separate = [
                    &self.q_proj_weight,
                    &self.k_proj_weight,
                    &self.v_proj_weight,
                ];
                separate[which]
                    .as_ref()
                    .map(|p| p.tensor().clone())
                    .ok_or_else(|| {
                        NnError::Invalid("MultiheadAttention: no projection weight".into())
                    })?
            }
        };
        let bias = self
            .in_proj_bias
            .as_ref()
            .map(|b| b.narrow(0, which * e, e))
            .transpose()?;
        Ok((weight, bias))
    }

    /// The additive `[N or 1, heads or 1, L, S]` mask from PyTorch's bool (true = masked out)
    /// or float masks; `None` when there are none.
    fn merged_mask(
        &self,
        input: &AttentionInput,
        n: usize,
        l: usize,
        s: usize,
        dtype: DType,
    ) -> Result<Option<Tensor>> {
        let additive = |mask: &Tensor| -> Result<Tensor> {
            if mask.dtype() == DType::Bool {
                let blocked = Tensor::full(&[], f64::NEG_INFINITY, dtype)?;
                let open = Tensor::zeros(&[], dtype)?;
                Ok(Tensor::where_(mask, &blocked, &open)?)
            } else {
                Ok(mask.to_dtype(dtype)?)
            }
        };
        let heads = self.num_heads;
        let attn = match &input.attn_mask {
            None => None,
            Some(m) => Some(match m.shape().as_slice() {
                [ml, ms] if (*ml, *ms) == (l, s) => additive(m)?.reshape(&[1, 1, l, s])?,
                [b, ml, ms] if (*b, *ml, *ms) == (n * heads, l, s) => {
                    additive(m)?.reshape(&[n, heads, l, s])?
                }
                other => {
                    return Err(NnError::Invalid(format!(
                        "MultiheadAttention: attn_mask of shape {other:?} is neither [{l}, {s}] nor [{}, {l}, {s}]",
                        n * heads
                    )));
                }
            }),
        };
        let padding = match &input.key_padding_mask {
            None => None,
            Some(m) if m.shape() == [n, s] => Some(additive(m)?.reshape(&[n, 1, 1, s])?),
            Some(m) => {
                return Err(NnError::Invalid(format!(
                    "MultiheadAttention: key_padding_mask of shape {:?} should be [{n}, {s}]",
                    m.shape()
                )));
            }
        };
        Ok(match (attn, padding) {
            (Some(a), Some(p)) => Some(a.add(&p)?),
            (a, p) => a.or(p),
        })
    }
}

impl Forward<AttentionInput> for MultiheadAttention {
    type Output = AttentionOutput;
    fn forward(&self, input: AttentionInput) -> Result<AttentionOutput> {
        let unbatched = input.query.ndim() == 2;
        let batch_first = |t: &Tensor| -> Result<Tensor> {
            Ok(if unbatched {
                t.unsqueeze(0)?
            } else if self.options.batch_first {
                t.clone()
            } else {
                t.transpose(0, 1)?
            })
        };
        let (query, key, value) = (
            batch_first(&input.query)?,
            batch_first(&input.key)?,
            batch_first(&input.value)?,
        );
        let (qs, ks) = (query.shape(), key.shape());
        if qs.len() != 3 || qs[2] != self.embed_dim || ks.len() != 3 || value.ndim() != 3 {
            return Err(NnError::Invalid(format!(
                "MultiheadAttention: query {:?}, key {:?} and value {:?} do not fit embed_dim {} (batch_first={})",
                input.query.shape(),
                input.key.shape(),
                input.value.shape(),
                self.embed_dim,
                self.options.batch_first
            )));
        }
        let (n, l, s, h, d) = (qs[0], qs[1], ks[1], self.num_heads, self.head_dim());
        let heads = |x: &Tensor, which: usize, len: usize| -> Result<Tensor> {
            let (w, b) = self.projection(which)?;
            Ok(x.linear(&w, b.as_ref())?
                .reshape(&[n, len, h, d])?
                .transpose(1, 2)?)
        };
        let (q, k, v) = (
            heads(&query, 0, l)?,
            heads(&key, 1, s)?,
            heads(&value, 2, s)?,
        );
        let mask = self.merged_mask(&input, n, l, s, q.dtype())?;
        let dropout_p = if self.is_training() {
            self.options.dropout
        } else {
            0.0
        };
        let options = AttentionOptions {
            attn_mask: mask.as_ref(),
            dropout_p,
            ..Default::default()
        };
        let (attended, weights) = attention_with_weights(&q, &k, &v, &options)?;
        let merged = attended.transpose(1, 2)?.reshape(&[n, l, self.embed_dim])?;
        let output = self.out_proj.call(merged)?;
        let output = if unbatched {
            output.squeeze_dim(0)?
        } else if self.options.batch_first {
            output
        } else {
            output.transpose(0, 1)?
        };
        let weights = match (input.need_weights, input.average_attn_weights) {
            (false, _) => None,
            (true, true) => Some(weights.mean(&[1], false)?),
            (true, false) => Some(weights),
        };
        let weights = match (weights, unbatched) {
            (Some(w), true) => Some(w.squeeze_dim(0)?),
            (w, _) => w,
        };
        Ok((output, weights))
    }
}
