//! The int8 weights of a quantized linear or conv as the GEMM reads them: packed for the
//! best kernel, with per-output-channel scales, zero points, bias and column sums. Prepared
//! once per weight and kept beside its storage (see [`Tensor::derived`]) until the weight,
//! or one of the tensors prepared with it, is written or replaced.

use super::gemm_i8::{Int8Kernel, PackedInt8};
use crate::{Result, Tensor};
use rayon::prelude::*;

/// The prepared weights of one quantized linear or conv (`[N, K]` after flattening).
pub(super) struct Weights {
    pub(super) n: usize,
    pub(super) k: usize,
    pub(super) packed: PackedInt8,
    pub(super) scales: Vec<f32>,
    pub(super) zero_points: Vec<i64>,
    pub(super) bias: Option<Vec<f32>>,
    /// `sum_k w[n, k]` for each output channel.
    pub(super) sums: Vec<i64>,
    /// The scales, zero points and bias read, with their versions: a preparation is reused
    /// only while they are the same tensors, unwritten.
    sources: Vec<(Tensor, u64)>,
}

impl Weights {
    /// The prepared form of inputs 1.. of a quantized linear or conv (weight, scales, zero
    /// points, bias): from the weight's cache when it was prepared with the same other
    /// tensors, else prepared now and cached.
    pub(super) fn cached(inputs: &[&Tensor]) -> Result<std::sync::Arc<Weights>> {
        let others = &inputs[2..];
        let current = |w: &Weights| {
            w.sources.len() == others.len()
                && w.sources.iter().zip(others).all(|((s, version), t)| {
                    t.shares_storage(s) && t.layout() == s.layout() && t.version() == *version
                })
        };
        inputs[1].derived(current, |_| Weights::read(inputs))
    }

    /// Reads and prepares inputs 1.. of a quantized linear or conv.
    fn read(inputs: &[&Tensor]) -> Result<Weights> {
        let w = inputs[1];
        let n = w.shape().first().copied().unwrap_or(0);
        let k = w.numel().checked_div(n).unwrap_or(0);
        let data = w.to_vec::<i8>()?;
        let per_channel = |v: Vec<f32>| if v.len() == 1 { vec![v[0]; n] } else { v };
        let scales = per_channel(inputs[2].to_vec::<f32>()?);
        let zps = inputs[3].to_vec::<i64>()?;
        let zero_points = if zps.len() == 1 { vec![zps[0]; n] } else { zps };
        let bias = inputs.get(4).map(|b| b.to_vec::<f32>()).transpose()?;
        let sums = data
            .par_chunks(k.max(1))
            .take(n)
            .map(|row| row.iter().map(|&v| i32::from(v)).sum::<i32>() as i64)
            .collect();
        Ok(Weights {
            n,
            k,
            packed: PackedInt8::new(Int8Kernel::best(), &data, n, k)?,
            scales,
            zero_points,
            bias,
            sums,
            sources: inputs[2..]
                .iter()
                .map(|t| (t.detach(), t.version()))
                .collect(),
        })
    }

    /// The exact integer `sum_k (x - x_zp)(w - w_zp)` of one output from the raw product.
    #[inline]
    pub(super) fn correct(&self, raw: i32, row_sum: i64, x_zp: i64, col: usize) -> i64 {
        let w_zp = self.zero_points[col];
        i64::from(raw) - w_zp * row_sum - x_zp * self.sums[col] + self.k as i64 * x_zp * w_zp
    }
}
