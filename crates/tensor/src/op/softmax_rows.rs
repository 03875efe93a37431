//! Softmax and log-softmax of packed f32 rows with the vector unit's full width (16 lanes with
//! AVX-512, 8 with AVX2), `exp` computed as [`crate::exp_poly::exp_f32`] computes it, operation
//! for operation, so that each exponential equals the compiled kernels' bit for bit; only the
//! order of the row's sum differs from the scalar loop. A row is read three times (its
//! maximum, the exponentials and their sum, the scaling), while it is in cache.

use crate::exp_poly::{
    EXP_F32_HIGH, EXP_F32_LOW, EXP_F32_POLY, LN2_HIGH, LN2_LOW, LOG2_E, ROUNDER,
};
use crate::simd::Lanes;
#[cfg(target_arch = "x86_64")]
use crate::simd::{Ymm, Zmm};

/// Rows per task when the rows are shared out across the threads.
const ROWS_PER_TASK: usize = 64;

/// The softmax (or log-softmax) of each row of `n` floats of `src`, computed with the vector
/// unit, on the thread pool when there are many rows; `None` when this CPU has no vector
/// instructions for it (the caller's scalar loop runs then), `OutOfMemory` when the result's
/// buffer cannot be had.
pub(super) fn rows(src: &[f32], n: usize, log: bool) -> crate::Result<Option<Vec<f32>>> {
    if !crate::simd::has_avx2() || n == 0 {
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
            .for_each(|(s, d)| vector_rows(s, d, n, log));
    }
    Ok(Some(out))
}

/// `dst[r] = softmax(src[r])` (or log-softmax) for each row `r` of `n` floats, with the
/// widest vectors this CPU has; the caller checked [`crate::simd::has_avx2`].
fn vector_rows(src: &[f32], dst: &mut [f32], n: usize, log: bool) {
    #[cfg(target_arch = "x86_64")]
    for (s, d) in src.chunks_exact(n).zip(dst.chunks_exact_mut(n)) {
        if crate::simd::has_avx512() {
            // SAFETY: the CPU has AVX-512 F; the rows have `n` floats each.
            unsafe { row_avx512(s, d, log) };
        } else {
            // SAFETY: the caller checked AVX2.
            unsafe { row_avx2(s, d, log) };
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (src, dst, n, log);
}

/// The row maximum the exponentials are taken against: an infinite one counts as 0, as in the
/// scalar loop (so that a row of `-inf` is NaN-free where it can be).
fn shift(max: f32) -> f32 {
    if max.is_infinite() { 0.0 } else { max }
}

/// `exp` of every lane, as `exp_f32`: clamp (NaN kept), reduce, Cephes' polynomial, two exact
/// powers of two.
#[inline(always)]
unsafe fn exp<W: Lanes>(x: W::V) -> W::V {
    unsafe {
        let clamped = W::min(W::max(x, W::splat(EXP_F32_LOW)), W::splat(EXP_F32_HIGH));
        let c = W::nan_of(x, clamped);
        let rounder = W::splat(ROUNDER);
        let t = W::add(W::mul(c, W::splat(LOG2_E)), rounder);
        let n = W::sub(t, rounder);
        let r = W::sub(c, W::mul(n, W::splat(LN2_HIGH)));
        let r = W::sub(r, W::mul(n, W::splat(LN2_LOW)));
        let mut p = W::splat(EXP_F32_POLY[0]);
        for k in &EXP_F32_POLY[1..] {
            p = W::add(W::mul(p, r), W::splat(*k));
        }
        let y = W::add(W::add(W::mul(p, W::mul(r, r)), r), W::splat(1.0));
        let n = W::isub(W::bits(t), W::isplat(ROUNDER.to_bits() as i32));
        let half = W::half(n);
        let rest = W::isub(n, half);
        let bias = W::isplat(127);
        let power = |e: W::I| W::exponent(W::iadd(e, bias));
        W::mul(W::mul(y, power(half)), power(rest))
    }
}

/// The lanes of `v`, in order.
#[inline(always)]
unsafe fn lanes<W: Lanes>(v: W::V) -> [f32; 16] {
    let mut out = [0.0f32; 16];
    // SAFETY: `out` holds 16 floats, at least `W::LANES`.
    unsafe { W::store(out.as_mut_ptr(), v) };
    out
}

/// One row of [`vector_rows`] at width `W`; the last `len % LANES` floats scalar.
///
/// # Safety
/// The CPU has `W`'s instructions; `s` and `d` have the same length.
#[inline(always)]
unsafe fn row<W: Lanes>(s: &[f32], d: &mut [f32], log: bool) {
    let whole = s.len() / W::LANES * W::LANES;
    let vectors = (0..whole).step_by(W::LANES);
    // SAFETY (every block below): vector `i` reads `s[i .. i + LANES]` and writes the same
    // floats of `d`, both inside the slices (`i + LANES <= whole <= len`).
    unsafe {
        let mut best = W::splat(f32::NEG_INFINITY);
        for i in vectors.clone() {
            best = W::max(W::load(s.as_ptr().add(i)), best);
        }
        let mut m = f32::NEG_INFINITY;
        for &v in lanes::<W>(best)[..W::LANES].iter().chain(&s[whole..]) {
            m = if v > m { v } else { m };
        }
        let m = shift(m);
        let shifted = W::splat(m);
        let mut sums = W::splat(0.0);
        for i in vectors.clone() {
            let e = exp::<W>(W::sub(W::load(s.as_ptr().add(i)), shifted));
            sums = W::add(sums, e);
            if !log {
                W::store(d.as_mut_ptr().add(i), e);
            }
        }
        let mut sum: f32 = lanes::<W>(sums)[..W::LANES].iter().sum();
        for (d, &v) in d[whole..].iter_mut().zip(&s[whole..]) {
            let e = crate::exp_poly::exp_f32(v - m);
            sum += e;
            *d = e;
        }
        if log {
            let lse = m + sum.ln();
            for i in vectors {
                W::store(
                    d.as_mut_ptr().add(i),
                    W::sub(W::load(s.as_ptr().add(i)), W::splat(lse)),
                );
            }
            d[whole..]
                .iter_mut()
                .zip(&s[whole..])
                .for_each(|(d, s)| *d = s - lse);
        } else {
            let inv = sum.recip();
            for i in vectors {
                let p = d.as_mut_ptr().add(i);
                W::store(p, W::mul(W::load(p), W::splat(inv)));
            }
            d[whole..].iter_mut().for_each(|d| *d *= inv);
        }
    }
}

/// [`row`] with 16 lanes.
///
/// # Safety
/// The CPU has AVX-512 F; `s` and `d` have the same length.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn row_avx512(s: &[f32], d: &mut [f32], log: bool) {
    unsafe { row::<Zmm>(s, d, log) }
}

/// [`row`] with 8 lanes.
///
/// # Safety
/// The CPU has AVX2; `s` and `d` have the same length.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn row_avx2(s: &[f32], d: &mut [f32], log: bool) {
    unsafe { row::<Ymm>(s, d, log) }
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

    /// `exp` of 16 floats with 16 lanes.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f")]
    unsafe fn exp_avx512(x: &[f32], y: &mut [f32; 16]) {
        unsafe { Zmm::store(y.as_mut_ptr(), exp::<Zmm>(Zmm::load(x.as_ptr()))) }
    }

    /// `exp` of 16 floats with 8 lanes.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn exp_avx2(x: &[f32], y: &mut [f32; 16]) {
        for h in 0..2 {
            unsafe {
                let v = exp::<Ymm>(Ymm::load(x.as_ptr().add(8 * h)));
                Ymm::store(y.as_mut_ptr().add(8 * h), v);
            }
        }
    }

    /// Each lane's `exp` is `exp_f32`'s bit for bit (NaN aside), over a sweep of the f32 range.
    #[test]
    fn vector_exp_equals_the_scalar_polynomial() {
        #[cfg(target_arch = "x86_64")]
        {
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
                    unsafe { exp_avx512(chunk, &mut got) };
                    check(&got, "avx512");
                }
                if is_x86_feature_detected!("avx2") {
                    let mut got = [0.0f32; 16];
                    // SAFETY: the CPU has AVX2; 8 floats each.
                    unsafe { exp_avx2(chunk, &mut got) };
                    check(&got, "avx2");
                }
            }
        }
    }
}
