//! The int8 linears: dynamic (f32 in and out, activations quantized per call as PyTorch's
//! fbgemm `quantized::linear_dynamic`) and static (u8 in and out with fixed parameters). Both
//! run `sum_k (x - x_zp)(w - w_zp)` as one u8 x i8 GEMM plus zero-point corrections from the
//! row sums of `x` and the column sums of `w`:
//! `sum x*w - w_zp * sum_k x - x_zp * sum_k w + K * x_zp * w_zp`.

use super::affine::{QParams, dynamic_qparams, min_max, quantize_f32, round_half_even};
use super::gemm_i8::gemm_u8i8_packed;
use super::weights::Weights;
use crate::cpu::tensor_from;
use crate::{Result, Tensor};
use rayon::prelude::*;

/// `acc[m, n]` of u8 rows `a [m, k]` against the weights, and the row sums of `a` that the
/// zero-point correction needs (zeros when every weight zero point is 0: symmetric weights).
pub(super) fn int8_product(
    a: &[u8],
    m: usize,
    w: &Weights,
    parallel: bool,
) -> Result<(Vec<i32>, Vec<i64>)> {
    let mut acc = crate::cpu::try_uninit_buffer::<i32>("quantized_linear", m * w.n)?;
    gemm_u8i8_packed(a, &w.packed, &mut acc, m, parallel)?;
    let row_sums = if w.zero_points.iter().all(|&z| z == 0) {
        vec![0; m]
    } else {
        a.chunks(w.k.max(1))
            .take(m)
            .map(|r| r.iter().map(|&v| i32::from(v)).sum::<i32>() as i64)
            .collect()
    };
    Ok((acc, row_sums))
}

/// Inputs `x (f32 [.., K]), w, w_scale, w_zero_point[, bias]`; f32 `[.., N]`.
pub(super) fn linear_dynamic(inputs: &[&Tensor], reduce_range: bool) -> Result<Tensor> {
    let w = Weights::cached(inputs)?;
    let mut shape = inputs[0].shape();
    let m = inputs[0].numel().checked_div(w.k).unwrap_or(0);
    let (xq, a) = inputs[0].with_slice(|x: &[f32]| {
        let (lo, hi) = min_max(x);
        let (lo, hi) = if lo <= hi { (lo, hi) } else { (0.0, 0.0) };
        let xq = dynamic_qparams(lo, hi, reduce_range);
        let range = if reduce_range { (0, 127) } else { (0, 255) };
        let mut a = crate::cpu::try_uninit_buffer::<u8>("quantized_linear", x.len())?;
        a.par_chunks_mut(1 << 14)
            .zip(x.par_chunks(1 << 14))
            .for_each(|(a, x)| {
                for (a, &v) in a.iter_mut().zip(x) {
                    *a = quantize_f32(v, xq, range) as u8;
                }
            });
        Ok((xq, a))
    })??;
    let (acc, row_sums) = int8_product(&a, m, &w, true)?;
    let n = w.n;
    let mut out = crate::cpu::try_uninit_buffer::<f32>("quantized_linear", m * n)?;
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

/// Requantization of exact int32 sums to u8 with per-output-channel constants, as fbgemm:
/// `q = clamp(round((acc - w_zp * row_sum + offset) * multiplier + bias / out_scale) +
/// out_zp, lo, 255)` with `multiplier = x_scale * w_scale / out_scale` and `lo = out_zp`
/// under a fused ReLU (the quantized zero), else 0. Clamping before rounding gives the same
/// integers (the bounds are integers) and keeps the fast rounding in range.
pub(super) struct Requantize {
    multiplier: Vec<f32>,
    /// `bias / out_scale + out_zp` per channel.
    shift: Vec<f32>,
    /// `K * x_zp * w_zp - x_zp * sum_k w` per channel.
    offset: Vec<i64>,
    w_zp: Vec<i64>,
    /// `offset` in i32 when every weight zero point is 0 and it fits: the vectorisable path.
    offset_i32: Option<Vec<i32>>,
    lo: f32,
}

impl Requantize {
    pub(super) fn new(w: &Weights, xq: QParams, outq: QParams, relu: bool) -> Requantize {
        let out_zp = outq.zero_point.clamp(0, 255) as f32;
        let offset: Vec<i64> = (0..w.n)
            .map(|j| w.k as i64 * xq.zero_point * w.zero_points[j] - xq.zero_point * w.sums[j])
            .collect();
        let offset_i32 = w
            .zero_points
            .iter()
            .all(|&z| z == 0)
            .then(|| offset.iter().map(|&o| i32::try_from(o).ok()).collect())
            .flatten();
        Requantize {
            multiplier: w.scales.iter().map(|s| xq.scale * s / outq.scale).collect(),
            shift: (0..w.n)
                .map(|j| w.bias.as_ref().map_or(0.0, |b| b[j] / outq.scale) + out_zp)
                .collect(),
            offset,
            w_zp: w.zero_points.clone(),
            offset_i32,
            lo: if relu { out_zp } else { 0.0 },
        }
    }

    /// The fast path four channels at a time with SSE2 (the x86-64 baseline) from channel
    /// `start`: the same operations in the same order as the scalar loop, `cvtps2dq`
    /// rounding half to even; returns how many leading channels are written.
    #[cfg(target_arch = "x86_64")]
    fn row_sse2(&self, acc: &[i32], offset: &[i32], out: &mut [u8], start: usize) -> usize {
        use std::arch::x86_64::*;
        let n = out
            .len()
            .min(acc.len())
            .min(offset.len())
            .min(self.multiplier.len())
            .min(self.shift.len());
        let mut j = start;
        // SAFETY: SSE2 is part of the x86-64 baseline; every load and store covers
        // elements j..j+4 < n of slices at least n long.
        unsafe {
            let (lo, hi) = (_mm_set1_ps(self.lo), _mm_set1_ps(255.0));
            while j + 4 <= n {
                let a = _mm_loadu_si128(acc.as_ptr().add(j) as *const __m128i);
                let off = _mm_loadu_si128(offset.as_ptr().add(j) as *const __m128i);
                let v = _mm_cvtepi32_ps(_mm_add_epi32(a, off));
                let v = _mm_add_ps(
                    _mm_mul_ps(v, _mm_loadu_ps(self.multiplier.as_ptr().add(j))),
                    _mm_loadu_ps(self.shift.as_ptr().add(j)),
                );
                let q = _mm_cvtps_epi32(_mm_min_ps(_mm_max_ps(v, lo), hi));
                let bytes = _mm_packus_epi16(_mm_packs_epi32(q, q), _mm_setzero_si128());
                let word = (_mm_cvtsi128_si32(bytes) as u32).to_le_bytes();
                out[j..j + 4].copy_from_slice(&word);
                j += 4;
            }
        }
        j
    }

    /// The same eight channels at a time with AVX2 (checked at run time, once); returns how
    /// many leading channels it wrote.
    #[cfg(target_arch = "x86_64")]
    fn row_avx2(&self, acc: &[i32], offset: &[i32], out: &mut [u8]) -> usize {
        if !avx2_available() {
            return 0;
        }
        // SAFETY: the CPU runs AVX2 (checked above).
        unsafe { self.row_avx2_unchecked(acc, offset, out) }
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn row_avx2_unchecked(&self, acc: &[i32], offset: &[i32], out: &mut [u8]) -> usize {
        use std::arch::x86_64::*;
        let n = out
            .len()
            .min(acc.len())
            .min(offset.len())
            .min(self.multiplier.len())
            .min(self.shift.len());
        let mut j = 0;
        // SAFETY: every load and store covers elements j..j+8 < n of slices at least n long.
        unsafe {
            let (lo, hi) = (_mm256_set1_ps(self.lo), _mm256_set1_ps(255.0));
            while j + 8 <= n {
                let a = _mm256_loadu_si256(acc.as_ptr().add(j) as *const __m256i);
                let off = _mm256_loadu_si256(offset.as_ptr().add(j) as *const __m256i);
                let v = _mm256_cvtepi32_ps(_mm256_add_epi32(a, off));
                let v = _mm256_add_ps(
                    _mm256_mul_ps(v, _mm256_loadu_ps(self.multiplier.as_ptr().add(j))),
                    _mm256_loadu_ps(self.shift.as_ptr().add(j)),
                );
                let q = _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(v, lo), hi));
                let words =
                    _mm_packs_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256::<1>(q));
                let bytes = _mm_packus_epi16(words, words);
                _mm_storel_epi64(out.as_mut_ptr().add(j) as *mut __m128i, bytes);
                j += 8;
            }
        }
        j
    }

    #[cfg(not(target_arch = "x86_64"))]
    fn row_avx2(&self, _acc: &[i32], _offset: &[i32], _out: &mut [u8]) -> usize {
        0
    }

    #[cfg(not(target_arch = "x86_64"))]
    fn row_sse2(&self, _acc: &[i32], _offset: &[i32], _out: &mut [u8], start: usize) -> usize {
        start
    }

    /// The u8 outputs of one row from its raw sums and its input row's sum.
    pub(super) fn row(&self, acc: &[i32], row_sum: i64, out: &mut [u8]) {
        match &self.offset_i32 {
            Some(offset) => {
                let done = self.row_avx2(acc, offset, out);
                self.row_tail(acc, offset, out, done);
            }
            None => {
                let finish = |v: f32| round_half_even(v.clamp(self.lo, 255.0)) as u8;
                for (j, (o, &a)) in out.iter_mut().zip(acc).enumerate() {
                    let exact = i64::from(a) - self.w_zp[j] * row_sum + self.offset[j];
                    *o = finish(exact as f32 * self.multiplier[j] + self.shift[j]);
                }
            }
        }
    }

    /// Channels `start..` of a row on the fast path: SSE2, then one at a time.
    #[inline]
    fn row_tail(&self, acc: &[i32], offset: &[i32], out: &mut [u8], start: usize) {
        let finish = |v: f32| round_half_even(v.clamp(self.lo, 255.0)) as u8;
        let done = self.row_sse2(acc, offset, out, start);
        for ((((o, &a), &off), &m), &sh) in out
            .iter_mut()
            .zip(acc)
            .zip(offset)
            .zip(&self.multiplier)
            .zip(&self.shift)
            .skip(done)
        {
            *o = finish(a.wrapping_add(off) as f32 * m + sh);
        }
    }

    /// [`Requantize::row`] for consecutive rows of `acc` and `out` (as many as `row_sums`),
    /// choosing the instructions once for them all.
    pub(super) fn rows(&self, acc: &[i32], row_sums: &[i64], out: &mut [u8]) {
        let n = self.multiplier.len().max(1);
        #[cfg(target_arch = "x86_64")]
        if let Some(offset) = &self.offset_i32
            && avx2_available()
        {
            // SAFETY: the CPU runs AVX2 (checked above).
            unsafe { self.rows_avx2(acc, offset, out, n) };
            return;
        }
        for ((y, acc), &rs) in out
            .chunks_exact_mut(n)
            .zip(acc.chunks_exact(n))
            .zip(row_sums)
        {
            self.row(acc, rs, y);
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn rows_avx2(&self, acc: &[i32], offset: &[i32], out: &mut [u8], n: usize) {
        for (y, acc) in out.chunks_exact_mut(n).zip(acc.chunks_exact(n)) {
            // SAFETY: this function runs only where AVX2 is available.
            let done = unsafe { self.row_avx2_unchecked(acc, offset, y) };
            self.row_tail(acc, offset, y, done);
        }
    }
}

/// Whether the CPU runs AVX2, detected once.
#[cfg(target_arch = "x86_64")]
fn avx2_available() -> bool {
    static AVX2: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *AVX2.get_or_init(|| is_x86_feature_detected!("avx2"))
}

/// Inputs `x (u8 [.., K]), w, w_scale, w_zero_point[, bias]`; u8 `[.., N]`.
pub(super) fn linear_static(
    inputs: &[&Tensor],
    xq: QParams,
    outq: QParams,
    relu: bool,
) -> Result<Tensor> {
    let w = Weights::cached(inputs)?;
    let mut shape = inputs[0].shape();
    let m = inputs[0].numel().checked_div(w.k).unwrap_or(0);
    let (acc, row_sums) = inputs[0].with_slice(|a: &[u8]| int8_product(a, m, &w, true))??;
    let n = w.n;
    let requantize = Requantize::new(&w, xq, outq, relu);
    let mut out = crate::cpu::try_uninit_buffer::<u8>("quantized_linear", m * n)?;
    out.par_chunks_mut(n.max(1))
        .zip(acc.par_chunks(n.max(1)))
        .zip(row_sums.par_iter())
        .for_each(|((o, acc), &rs)| requantize.row(acc, rs, o));
    if let Some(last) = shape.last_mut() {
        *last = n;
    }
    Ok(tensor_from(out, &shape))
}
