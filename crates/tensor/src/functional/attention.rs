//! Scaled dot-product attention (PyTorch's `F.scaled_dot_product_attention`), composed from
//! the op table's matmul, where/add, softmax and dropout, so tracing, passes and compilers see
//! ordinary ops and autograd needs no formula of its own.

use crate::{DType, Result, Tensor, TensorError};

/// The optional arguments of [`scaled_dot_product_attention`], PyTorch's defaults.
#[derive(Debug, Clone, Default)]
pub struct AttentionOptions<'a> {
    /// Bool `[.., L, S]` (true = take part, as PyTorch's SDPA) or float (added to the scaled
    /// scores), broadcast against the scores.
    pub attn_mask: Option<&'a Tensor>,
    /// Dropout on the attention probabilities, drawn from the global generator
    /// (`manual_seed`); 0 is none.
    pub dropout_p: f64,
    /// Query `i` attends to keys `0..=i`: the top-left aligned `ones(L, S).tril()` mask, also
    /// when `L != S`. Cannot be combined with `attn_mask`.
    pub is_causal: bool,
    /// Replaces the default scale `1 / sqrt(E)`.
    pub scale: Option<f64>,
}

/// `softmax(query @ key^T * scale + mask) @ value` over query `[.., L, E]`, key `[.., S, E]`
/// and value `[.., S, Ev]`, giving `[.., L, Ev]`.
pub fn scaled_dot_product_attention(
    query: &Tensor,
    key: &Tensor,
    value: &Tensor,
    options: &AttentionOptions,
) -> Result<Tensor> {
    Ok(attention_with_weights(query, key, value, options)?.0)
}

/// [`scaled_dot_product_attention`] that also returns the attention probabilities
/// `[.., L, S]` (after dropout), as `nn.MultiheadAttention` reports them.
pub fn attention_with_weights(
    query: &Tensor,
    key: &Tensor,
    value: &Tensor,
    options: &AttentionOptions,
) -> Result<(Tensor, Tensor)> {
    const OP: &str = "scaled_dot_product_attention";
    let (q, k, v) = (query.shape(), key.shape(), value.shape());
    let fits = q.len() >= 2
        && k.len() >= 2
        && v.len() >= 2
        && q.last() == k.last()
        && k[k.len() - 2] == v[v.len() - 2];
    if !fits {
        return Err(TensorError::invalid(
            OP,
            format!(
                "query {q:?}, key {k:?} and value {v:?} do not fit [.., L, E], [.., S, E] and [.., S, Ev]"
            ),
        ));
    }
    if options.is_causal && options.attn_mask.is_some() {
        return Err(TensorError::invalid(
            OP,
            "attn_mask and is_causal cannot both be given",
        ));
    }
    let (l, s, e) = (q[q.len() - 2], k[k.len() - 2], q[q.len() - 1]);
    let scale = options.scale.unwrap_or(1.0 / (e as f64).sqrt());
    let scores = query.matmul(&key.transpose(-2, -1)?)?.mul_scalar(scale)?;
    let causal;
    let mask = if options.is_causal {
        causal = causal_mask(l, s)?;
        Some(&causal)
    } else {
        options.attn_mask
    };
    let scores = match mask {
        Some(mask) if mask.dtype() == DType::Bool => {
            let blocked = Tensor::full(&[], f64::NEG_INFINITY, scores.dtype())?;
            Tensor::where_(mask, &scores, &blocked)?
        }
        Some(mask) => scores.add(mask)?,
        None => scores,
    };
    let mut weights = scores.softmax(-1)?;
    if options.dropout_p > 0.0 {
        weights = super::dropout(&weights, options.dropout_p, true)?;
    }
    let output = weights.matmul(value)?;
    Ok((output, weights))
}

/// The bool `[L, S]` mask that lets query `i` see keys `0..=i`.
pub fn causal_mask(l: usize, s: usize) -> Result<Tensor> {
    let len = l.checked_mul(s).ok_or_else(|| {
        TensorError::invalid("causal_mask", format!("a [{l}, {s}] mask overflows"))
    })?;
    let mut keep = Vec::new();
    keep.try_reserve_exact(len).map_err(|_| {
        TensorError::invalid("causal_mask", format!("no memory for a [{l}, {s}] mask"))
    })?;
    keep.extend((0..len).map(|i| i % s.max(1) <= i / s.max(1)));
    Tensor::from_vec(keep, &[l, s])
}
