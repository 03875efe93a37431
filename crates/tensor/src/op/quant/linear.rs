//! The int8 linears: dynamic (f32 in and out, activations quantized per call as PyTorch's
//! fbgemm `quantized::linear_dynamic`) and static (u8 in and out with fixed parameters). Both
//! run `sum_k (x - x_zp)(w - w_zp)` as one u8 x i8 GEMM plus zero-point corrections from the
//! row sums of `x` and the column sums of `w`:
//! `sum x*w - w_zp * sum_k x - x_zp * sum_k w + K * x_zp * w_zp`.

use super::affine::{QParams, dynamic_qparams, min_max, quantize_f32};
use super::gemm_i8::gemm_u8i8;
use crate::cpu::tensor_from;
use crate::{Result, Tensor};
use rayon::prelude::*;

/// The int8 weights of a linear or conv as a `[N, K]` matrix, with per-output-channel
/// scales, zero points, bias and column sums.
pub(super) struct Weights {
    pub(super) n: usize,
    pub(super) k: usize,
    pub(super) data: Vec<i8>,
    pub(super) scales: Vec<f32>,
    pub(super) zero_points: Vec<i64>,
    pub(super) bias: Option<Vec<f32>>,
    /// `sum_k w[n, k]` for each output channel.
    pub(super) sums: Vec<i64>,
}

impl Weights {
    /// Reads inputs 1.. of a quantized linear or conv (weight, scales, zero points, bias).
    pub(super) fn read(inputs: &[&Tensor]) -> Result<Weights> {
        let w = inputs[1];
        let n = w.shape().first().copied().unwrap_or(0);
        let k = if n == 0 { 0 } else { w.numel() / n };
        let data = w.to_vec::<i8>()?;
        let per_channel = |v: Vec<f32>| if v.len() == 1 { vec![v[0]; n] } else { v };
        let scales = per_channel(inputs[2].to_vec::<f32>()?);
        let zps = inputs[3].to_vec::<i64>()?;
        let zero_points = if zps.len() == 1 { vec![zps[0]; n] } else { zps };
        let bias = inputs.get(4).map(|b| b.to_vec::<f32>()).transpose()?;
        let sums = data
            .chunks(k.max(1))
            .take(n)
            .map(|row| row.iter().map(|&v| i64::from(v)).sum())
            .collect();
        Ok(Weights {
            n,
            k,
            data,
            scales,
            zero_points,
            bias,
            sums,
        })
    }

    /// The exact integer `sum_k (x - x_zp)(w - w_zp)` of one output from the raw product.
    #[inline]
    pub(super) fn correct(&self, raw: i32, row_sum: i64, x_zp: i64, col: usize) -> i64 {
        let w_zp = self.zero_points[col];
        i64::from(raw) - w_zp * row_sum - x_zp * self.sums[col] + self.k as i64 * x_zp * w_zp
    }
}

/// `acc[m, n]` of u8 rows `a [m, k]` against the weights, and the row sums of `a`.
pub(super) fn int8_product(a: &[u8], m: usize, w: &Weights) -> Result<(Vec<i32>, Vec<i64>)> {
    let mut acc = vec![0i32; m * w.n];
    gemm_u8i8(a, &w.data, &mut acc, (m, w.n, w.k))?;
    let row_sums = a
        .par_chunks(w.k.max(1))
        .take(m)
        .map(|r| r.iter().map(|&v| i64::from(v)).sum())
        .collect();
    Ok((acc, row_sums))
}

/// Inputs `x (f32 [.., K]), w, w_scale, w_zero_point[, bias]`; f32 `[.., N]`.
pub(super) fn linear_dynamic(inputs: &[&Tensor], reduce_range: bool) -> Result<Tensor> {
    let w = Weights::read(inputs)?;
    let mut shape = inputs[0].shape();
    let m = if w.k == 0 { 0 } else { inputs[0].numel() / w.k };
    let (xq, a) = inputs[0].with_slice(|x: &[f32]| {
        let (lo, hi) = min_max(x);
        let (lo, hi) = if lo <= hi { (lo, hi) } else { (0.0, 0.0) };
        let xq = dynamic_qparams(lo, hi, reduce_range);
        let range = if reduce_range { (0, 127) } else { (0, 255) };
        let a: Vec<u8> = x
            .par_iter()
            .with_min_len(1 << 14)
            .map(|&v| quantize_f32(v, xq, range) as u8)
            .collect();
        (xq, a)
    })?;
    let (acc, row_sums) = int8_product(&a, m, &w)?;
    let n = w.n;
    let mut out = vec![0f32; m * n];
    let scales: Vec<f32> = w.scales.iter().map(|s| s * xq.scale).collect();
    out.par_chunks_mut(n.max(1))
        .zip(acc.par_chunks(n.max(1)))
        .zip(row_sums.par_iter())
        .for_each(|((o, acc), &rs)| {
            for (j, (o, &raw)) in o.iter_mut().zip(acc).enumerate() {
                let v = w.correct(raw, rs, xq.zero_point, j) as f32 * scales[j];
                *o = match &w.bias {
                    Some(b) => v + b[j],
                    None => v,
                };
            }
        });
    if let Some(last) = shape.last_mut() {
        *last = n;
    }
    Ok(tensor_from(out, &shape))
}

/// `relu?(real) / out_scale + out_zp`, rounded half to even and clamped to u8.
#[inline]
pub(super) fn requantize(real: f32, out: QParams, relu: bool) -> u8 {
    let q = quantize_f32(real, out, (0, 255));
    if relu {
        q.max(out.zero_point.clamp(0, 255)) as u8
    } else {
        q as u8
    }
}

/// Inputs `x (u8 [.., K]), w, w_scale, w_zero_point[, bias]`; u8 `[.., N]`.
pub(super) fn linear_static(
    inputs: &[&Tensor],
    xq: QParams,
    outq: QParams,
    relu: bool,
) -> Result<Tensor> {
    let w = Weights::read(inputs)?;
    let mut shape = inputs[0].shape();
    let m = if w.k == 0 { 0 } else { inputs[0].numel() / w.k };
    let (acc, row_sums) = inputs[0].with_slice(|a: &[u8]| int8_product(a, m, &w))??;
    let n = w.n;
    let scales: Vec<f32> = w.scales.iter().map(|s| s * xq.scale).collect();
    let mut out = vec![0u8; m * n];
    out.par_chunks_mut(n.max(1))
        .zip(acc.par_chunks(n.max(1)))
        .zip(row_sums.par_iter())
        .for_each(|((o, acc), &rs)| {
            for (j, (o, &raw)) in o.iter_mut().zip(acc).enumerate() {
                let mut real = w.correct(raw, rs, xq.zero_point, j) as f32 * scales[j];
                if let Some(b) = &w.bias {
                    real += b[j];
                }
                *o = requantize(real, outq, relu);
            }
        });
    if let Some(last) = shape.last_mut() {
        *last = n;
    }
    Ok(tensor_from(out, &shape))
}
