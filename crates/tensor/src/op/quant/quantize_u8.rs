//! Quantizing f32 to u8 per tensor, the first op of every static int8 network, eight values
//! at a time with AVX2 (picked at run time): `clamp(round_half_even(x * (1/scale)) + zp, 0,
//! 255)` as the scalar definition, NaN giving the zero point as it does there.

use super::affine::{QParams, quantize_f32};
use crate::cpu::tensor_from;
use crate::{Result, Tensor};
use rayon::prelude::*;

/// Elements per parallel task.
const CHUNK: usize = 1 << 15;

/// `x` (f32) quantized to u8 with `q`.
pub(super) fn quantize_f32_to_u8(x: &Tensor, q: QParams) -> Result<Tensor> {
    let out = x.with_slice(|s: &[f32]| {
        let mut out = crate::cpu::try_uninit_buffer::<u8>("quantize_per_tensor", s.len())?;
        out.par_chunks_mut(CHUNK)
            .zip(s.par_chunks(CHUNK))
            .for_each(|(o, s)| {
                let done = simd(s, q, o);
                for (o, &v) in o.iter_mut().zip(s).skip(done) {
                    *o = quantize_f32(v, q, (0, 255)) as u8;
                }
            });
        Ok(out)
    })??;
    Ok(tensor_from(out, &x.shape()))
}

/// The leading multiple of eight values with AVX2 when the CPU has it; how many it wrote.
#[cfg(target_arch = "x86_64")]
fn simd(src: &[f32], q: QParams, out: &mut [u8]) -> usize {
    static AVX2: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    if !*AVX2.get_or_init(|| is_x86_feature_detected!("avx2")) {
        return 0;
    }
    // SAFETY: the CPU runs AVX2 (checked above).
    unsafe { avx2(src, q, out) }
}

#[cfg(not(target_arch = "x86_64"))]
fn simd(_src: &[f32], _q: QParams, _out: &mut [u8]) -> usize {
    0
}

/// Clamping `x * (1/scale)` to one step beyond the representable range before rounding
/// gives the scalar's integers (its clamp comes after rounding) and keeps the conversion in
/// i32; NaN is replaced by 0 (the scalar rounds NaN to 0).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn avx2(src: &[f32], q: QParams, out: &mut [u8]) -> usize {
    use std::arch::x86_64::*;
    let n = src.len().min(out.len()) / 8 * 8;
    let zp = q.zero_point.clamp(-1 << 20, 1 << 20) as i32;
    // SAFETY: every load reads src[j..j + 8] and every store writes out[j..j + 8], j + 8 <= n.
    unsafe {
        let inverse = _mm256_set1_ps(1.0 / q.scale);
        let lo = _mm256_set1_ps((-1 - zp) as f32);
        let hi = _mm256_set1_ps((256 - zp) as f32);
        let zero_point = _mm256_set1_epi32(zp);
        for j in (0..n).step_by(8) {
            let v = _mm256_mul_ps(_mm256_loadu_ps(src.as_ptr().add(j)), inverse);
            let nan = _mm256_cmp_ps::<_CMP_UNORD_Q>(v, v);
            let v = _mm256_andnot_ps(nan, _mm256_min_ps(_mm256_max_ps(v, lo), hi));
            let q = _mm256_add_epi32(_mm256_cvtps_epi32(v), zero_point);
            let words =
                _mm_packs_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256::<1>(q));
            let bytes = _mm_packus_epi16(words, words);
            _mm_storel_epi64(out.as_mut_ptr().add(j) as *mut __m128i, bytes);
        }
    }
    n
}
