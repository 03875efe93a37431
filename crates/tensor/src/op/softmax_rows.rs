//! Softmax and log-softmax of packed f32 rows with the vector unit's full width (16 lanes with
//! AVX-512, 8 with AVX2), `exp` computed as [`crate::exp_poly::exp_f32`] computes it, operation
//! for operation, so that each exponential equals the compiled kernels' bit for bit; only the
//! order of the row's sum differs from the scalar loop. A row is read three times (its
//! maximum, the exponentials and their sum, the scaling), while it is in cache.

use crate::exp_poly::{
    EXP_F32_HIGH, EXP_F32_LOW, EXP_F32_POLY, LN2_HIGH, LN2_LOW, LOG2_E, ROUNDER,
};

/// Rows per task when the rows are shared out across the threads.
const ROWS_PER_TASK: usize = 64;

/// The softmax (or log-softmax) of each row of `n` floats of `src`, computed with the vector
/// unit, on the thread pool when there are many rows; `None` when this CPU has no vector
/// instructions for it (the caller's scalar loop runs then), `OutOfMemory` when the result's
/// buffer cannot be had.
pub(super) fn rows(src: &[f32], n: usize, log: bool) -> crate::Result<Option<Vec<f32>>> {
    if !has_vectors() || n == 0 {
        return Ok(None);
    }
    let mut out = crate::buffer_cache::try_uninit_buffer::<f32>("softmax", src.len())?;
    let task = n * ROWS_PER_TASK;
    if src.len() <= task {
        vector_rows(src, &mut out, n, log);
    } else {
        use rayon::prelude::*;
        src.par_chunks(task)
            .zip(out.par_chunks_mut(task))
            .for_each(|(s, d)| {
                vector_rows(s, d, n, log);
            });
    }
    Ok(Some(out))
}

/// Whether [`vector_rows`] has vector instructions on this CPU.
fn has_vectors() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        is_x86_feature_detected!("avx2")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// `dst[r] = softmax(src[r])` (or log-softmax) for each row `r` of `n` floats, with vector
/// instructions; `false` when this CPU has none of them (nothing written then).
fn vector_rows(src: &[f32], dst: &mut [f32], n: usize, log: bool) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        if is_x86_feature_detected!("avx512f") {
            for (s, d) in src.chunks_exact(n).zip(dst.chunks_exact_mut(n)) {
                // SAFETY: the CPU has AVX-512 F; the rows have `n` floats each.
                unsafe { row_avx512(s, d, log) };
            }
            return true;
        }
        if is_x86_feature_detected!("avx2") {
            for (s, d) in src.chunks_exact(n).zip(dst.chunks_exact_mut(n)) {
                // SAFETY: the CPU has AVX2.
                unsafe { row_avx2(s, d, log) };
            }
            return true;
        }
    }
    let _ = (src, dst, n, log);
    false
}

/// The row maximum the exponentials are taken against: an infinite one counts as 0, as in the
/// scalar loop (so that a row of `-inf` is NaN-free where it can be).
fn shift(max: f32) -> f32 {
    if max.is_infinite() { 0.0 } else { max }
}

/// The end of a row: `d = e / sum` (the exponentials already in `d`) or `d = s - (m + ln sum)`,
/// scalar for the last floats the vectors leave.
fn finish_scalar(s: &[f32], d: &mut [f32], m: f32, sum: f32, log: bool) {
    if log {
        let lse = m + sum.ln();
        d.iter_mut().zip(s).for_each(|(d, s)| *d = s - lse);
    } else {
        let inv = sum.recip();
        d.iter_mut().for_each(|d| *d *= inv);
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::*;
    use std::arch::x86_64::*;

    /// `exp` of 16 lanes, as `exp_f32`: clamp (NaN kept), reduce, Cephes' polynomial, two
    /// exact powers of two.
    #[inline]
    #[target_feature(enable = "avx512f")]
    pub(super) fn exp16(x: __m512) -> __m512 {
        let clamped = _mm512_min_ps(
            _mm512_max_ps(x, _mm512_set1_ps(EXP_F32_LOW)),
            _mm512_set1_ps(EXP_F32_HIGH),
        );
        // `min`/`max` return their second operand for NaN: keep the NaN lanes of `x`.
        let c = _mm512_mask_blend_ps(_mm512_cmp_ps_mask::<_CMP_UNORD_Q>(x, x), clamped, x);
        let rounder = _mm512_set1_ps(ROUNDER);
        let t = _mm512_add_ps(_mm512_mul_ps(c, _mm512_set1_ps(LOG2_E)), rounder);
        let n = _mm512_sub_ps(t, rounder);
        let r = _mm512_sub_ps(c, _mm512_mul_ps(n, _mm512_set1_ps(LN2_HIGH)));
        let r = _mm512_sub_ps(r, _mm512_mul_ps(n, _mm512_set1_ps(LN2_LOW)));
        let mut p = _mm512_set1_ps(EXP_F32_POLY[0]);
        for k in &EXP_F32_POLY[1..] {
            p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(*k));
        }
        let y = _mm512_add_ps(
            _mm512_add_ps(_mm512_mul_ps(p, _mm512_mul_ps(r, r)), r),
            _mm512_set1_ps(1.0),
        );
        let n = _mm512_sub_epi32(
            _mm512_castps_si512(t),
            _mm512_set1_epi32(ROUNDER.to_bits() as i32),
        );
        let half = _mm512_srai_epi32::<1>(n);
        let rest = _mm512_sub_epi32(n, half);
        let power = |e: __m512i| {
            _mm512_castsi512_ps(_mm512_slli_epi32::<23>(_mm512_add_epi32(
                e,
                _mm512_set1_epi32(127),
            )))
        };
        _mm512_mul_ps(_mm512_mul_ps(y, power(half)), power(rest))
    }

    /// `exp` of 8 lanes, as [`exp16`].
    #[inline]
    #[target_feature(enable = "avx2")]
    pub(super) fn exp8(x: __m256) -> __m256 {
        let clamped = _mm256_min_ps(
            _mm256_max_ps(x, _mm256_set1_ps(EXP_F32_LOW)),
            _mm256_set1_ps(EXP_F32_HIGH),
        );
        let c = _mm256_blendv_ps(clamped, x, _mm256_cmp_ps::<_CMP_UNORD_Q>(x, x));
        let rounder = _mm256_set1_ps(ROUNDER);
        let t = _mm256_add_ps(_mm256_mul_ps(c, _mm256_set1_ps(LOG2_E)), rounder);
        let n = _mm256_sub_ps(t, rounder);
        let r = _mm256_sub_ps(c, _mm256_mul_ps(n, _mm256_set1_ps(LN2_HIGH)));
        let r = _mm256_sub_ps(r, _mm256_mul_ps(n, _mm256_set1_ps(LN2_LOW)));
        let mut p = _mm256_set1_ps(EXP_F32_POLY[0]);
        for k in &EXP_F32_POLY[1..] {
            p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(*k));
        }
        let y = _mm256_add_ps(
            _mm256_add_ps(_mm256_mul_ps(p, _mm256_mul_ps(r, r)), r),
            _mm256_set1_ps(1.0),
        );
        let n = _mm256_sub_epi32(
            _mm256_castps_si256(t),
            _mm256_set1_epi32(ROUNDER.to_bits() as i32),
        );
        let half = _mm256_srai_epi32::<1>(n);
        let rest = _mm256_sub_epi32(n, half);
        let power = |e: __m256i| {
            _mm256_castsi256_ps(_mm256_slli_epi32::<23>(_mm256_add_epi32(
                e,
                _mm256_set1_epi32(127),
            )))
        };
        _mm256_mul_ps(_mm256_mul_ps(y, power(half)), power(rest))
    }
}

/// One row of [`vector_rows`] with 16 lanes; the last `len % 16` floats scalar.
///
/// # Safety
/// The CPU has AVX-512 F; `s` and `d` have the same length.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn row_avx512(s: &[f32], d: &mut [f32], log: bool) {
    use std::arch::x86_64::*;
    let whole = s.len() / 16 * 16;
    // SAFETY (every block below): vector `i` reads `s[16 i .. 16 i + 16]` and writes the same
    // floats of `d`, both inside the slices (`16 i + 16 <= whole <= len`).
    let mut best = _mm512_set1_ps(f32::NEG_INFINITY);
    for i in (0..whole).step_by(16) {
        best = _mm512_max_ps(unsafe { _mm512_loadu_ps(s.as_ptr().add(i)) }, best);
    }
    let mut m = _mm512_reduce_max_ps(best);
    for &v in &s[whole..] {
        m = if v > m { v } else { m };
    }
    let m = shift(m);
    let shifted = _mm512_set1_ps(m);
    let mut sums = _mm512_setzero_ps();
    for i in (0..whole).step_by(16) {
        let e = x86::exp16(_mm512_sub_ps(
            unsafe { _mm512_loadu_ps(s.as_ptr().add(i)) },
            shifted,
        ));
        sums = _mm512_add_ps(sums, e);
        if !log {
            unsafe { _mm512_storeu_ps(d.as_mut_ptr().add(i), e) };
        }
    }
    let mut sum = _mm512_reduce_add_ps(sums);
    for (d, &v) in d[whole..].iter_mut().zip(&s[whole..]) {
        let e = crate::exp_poly::exp_f32(v - m);
        sum += e;
        *d = e;
    }
    if log {
        let lse = _mm512_set1_ps(m + sum.ln());
        for i in (0..whole).step_by(16) {
            unsafe {
                let v = _mm512_loadu_ps(s.as_ptr().add(i));
                _mm512_storeu_ps(d.as_mut_ptr().add(i), _mm512_sub_ps(v, lse));
            }
        }
    } else {
        let inv = _mm512_set1_ps(sum.recip());
        for i in (0..whole).step_by(16) {
            unsafe {
                let p = d.as_mut_ptr().add(i);
                _mm512_storeu_ps(p, _mm512_mul_ps(_mm512_loadu_ps(p), inv));
            }
        }
    }
    finish_scalar(&s[whole..], &mut d[whole..], m, sum, log);
}

/// One row of [`vector_rows`] with 8 lanes, as [`row_avx512`].
///
/// # Safety
/// The CPU has AVX2; `s` and `d` have the same length.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn row_avx2(s: &[f32], d: &mut [f32], log: bool) {
    use std::arch::x86_64::*;
    let whole = s.len() / 8 * 8;
    let lanes = |v: __m256| -> [f32; 8] { unsafe { std::mem::transmute(v) } };
    // SAFETY (every block below): vector `i` reads `s[8 i .. 8 i + 8]` and writes the same
    // floats of `d`, both inside the slices (`8 i + 8 <= whole <= len`).
    let mut best = _mm256_set1_ps(f32::NEG_INFINITY);
    for i in (0..whole).step_by(8) {
        best = _mm256_max_ps(unsafe { _mm256_loadu_ps(s.as_ptr().add(i)) }, best);
    }
    let mut m = f32::NEG_INFINITY;
    for v in lanes(best).into_iter().chain(s[whole..].iter().copied()) {
        m = if v > m { v } else { m };
    }
    let m = shift(m);
    let shifted = _mm256_set1_ps(m);
    let mut sums = _mm256_setzero_ps();
    for i in (0..whole).step_by(8) {
        let e = x86::exp8(_mm256_sub_ps(
            unsafe { _mm256_loadu_ps(s.as_ptr().add(i)) },
            shifted,
        ));
        sums = _mm256_add_ps(sums, e);
        if !log {
            unsafe { _mm256_storeu_ps(d.as_mut_ptr().add(i), e) };
        }
    }
    let mut sum: f32 = lanes(sums).iter().sum();
    for (d, &v) in d[whole..].iter_mut().zip(&s[whole..]) {
        let e = crate::exp_poly::exp_f32(v - m);
        sum += e;
        *d = e;
    }
    if log {
        let lse = _mm256_set1_ps(m + sum.ln());
        for i in (0..whole).step_by(8) {
            unsafe {
                let v = _mm256_loadu_ps(s.as_ptr().add(i));
                _mm256_storeu_ps(d.as_mut_ptr().add(i), _mm256_sub_ps(v, lse));
            }
        }
    } else {
        let inv = _mm256_set1_ps(sum.recip());
        for i in (0..whole).step_by(8) {
            unsafe {
                let p = d.as_mut_ptr().add(i);
                _mm256_storeu_ps(p, _mm256_mul_ps(_mm256_loadu_ps(p), inv));
            }
        }
    }
    finish_scalar(&s[whole..], &mut d[whole..], m, sum, log);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exp_poly::exp_f32;

    /// The scalar loop with the same `exp`: the rows' definition up to the order of the sum.
    fn by_definition(s: &[f32], log: bool) -> Vec<f32> {
        let m = shift(
            s.iter()
                .fold(f32::NEG_INFINITY, |a, &v| if v > a { v } else { a }),
        );
        let e: Vec<f32> = s.iter().map(|&v| exp_f32(v - m)).collect();
        let sum: f32 = e.iter().sum();
        if log {
            s.iter().map(|&v| v - (m + sum.ln())).collect()
        } else {
            e.iter().map(|&v| v * sum.recip()).collect()
        }
    }

    /// Rows of every length up to 70 (whole vectors and tails), of large and small values,
    /// with `-inf`, `+inf` and NaN entries and rows of `-inf` only.
    fn cases() -> Vec<Vec<f32>> {
        let mut rows = Vec::new();
        for len in 1..70 {
            let plain: Vec<f32> = (0..len)
                .map(|i| ((i * 37) % 23) as f32 * 1.7 - 20.0)
                .collect();
            rows.push(plain.clone());
            let mut special = plain.iter().map(|v| v * 4.0).collect::<Vec<f32>>();
            special[len / 2] = f32::NEG_INFINITY;
            rows.push(special.clone());
            special[len / 3] = f32::INFINITY;
            rows.push(special.clone());
            special[len - 1] = f32::NAN;
            rows.push(special);
            rows.push(vec![f32::NEG_INFINITY; len]);
        }
        rows
    }

    /// Agreement up to the sum's order: a few ulp of the result, or for log-softmax of the
    /// row's largest finite value (`x - (max + ln sum)` rounds at its scale).
    fn same(got: &[f32], expected: &[f32], row: Option<&[f32]>, what: &str) {
        let scale = row
            .unwrap_or_default()
            .iter()
            .filter(|v| v.is_finite())
            .fold(1.0f32, |a, v| a.max(v.abs()));
        for (i, (&g, &e)) in got.iter().zip(expected).enumerate() {
            let close = (g.is_nan() && e.is_nan())
                || g == e
                || (g - e).abs() <= 4.0 * f32::EPSILON * e.abs().max(scale);
            assert!(close, "{what}: element {i} is {g}, expected {e}");
        }
    }

    /// Each instruction set this CPU has computes the rows as their definition does, both
    /// softmax and log-softmax.
    #[test]
    fn vector_rows_match_the_definition() {
        for row in cases() {
            for log in [false, true] {
                let expected = by_definition(&row, log);
                let what = format!("len {} log {log}: {row:?}", row.len());
                #[cfg(target_arch = "x86_64")]
                {
                    if is_x86_feature_detected!("avx512f") {
                        let mut got = vec![0.0; row.len()];
                        // SAFETY: the CPU has AVX-512 F; equal lengths.
                        unsafe { row_avx512(&row, &mut got, log) };
                        same(
                            &got,
                            &expected,
                            log.then_some(&row[..]),
                            &format!("avx512 {what}"),
                        );
                    }
                    if is_x86_feature_detected!("avx2") {
                        let mut got = vec![0.0; row.len()];
                        // SAFETY: the CPU has AVX2; equal lengths.
                        unsafe { row_avx2(&row, &mut got, log) };
                        same(
                            &got,
                            &expected,
                            log.then_some(&row[..]),
                            &format!("avx2 {what}"),
                        );
                    }
                }
            }
        }
    }

    /// Each lane's `exp` is `exp_f32`'s bit for bit (NaN aside), over a sweep of the f32 range.
    #[test]
    fn vector_exp_equals_the_scalar_polynomial() {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::x86_64::*;
            let xs: Vec<f32> = (0..=u32::MAX)
                .step_by(65_537)
                .map(f32::from_bits)
                .chain([f32::INFINITY, f32::NEG_INFINITY, 89.0, -104.0, 0.0, -0.0])
                .collect();
            for chunk in xs.chunks_exact(16) {
                let expected: Vec<u32> = chunk.iter().map(|&x| exp_f32(x).to_bits()).collect();
                let check = |got: &[f32], isa: &str| {
                    for ((g, e), x) in got.iter().zip(&expected).zip(chunk) {
                        let e = f32::from_bits(*e);
                        assert!(
                            g.to_bits() == e.to_bits() || (g.is_nan() && e.is_nan()),
                            "{isa}: exp({x:e}) is {g:e}, expected {e:e}"
                        );
                    }
                };
                if is_x86_feature_detected!("avx512f") {
                    let mut got = [0.0f32; 16];
                    // SAFETY: the CPU has AVX-512 F; 16 floats each.
                    unsafe {
                        let v = x86::exp16(_mm512_loadu_ps(chunk.as_ptr()));
                        _mm512_storeu_ps(got.as_mut_ptr(), v);
                    }
                    check(&got, "avx512");
                }
                if is_x86_feature_detected!("avx2") {
                    let mut got = [0.0f32; 16];
                    // SAFETY: the CPU has AVX2; 8 floats each.
                    unsafe {
                        for h in 0..2 {
                            let v = x86::exp8(_mm256_loadu_ps(chunk.as_ptr().add(8 * h)));
                            _mm256_storeu_ps(got.as_mut_ptr().add(8 * h), v);
                        }
                    }
                    check(&got, "avx2");
                }
            }
        }
    }
}
