//! The output stage a compiled convolution call may apply before it writes anything: its bias,
//! a ReLU and a max pool over non-overlapping windows, so that the full-size activation
//! between a convolution and its pooling is never written out and read back (the small CNN's
//! first convolution: 4 MiB at batch 64). The direct kernel applies the stage to each band of
//! rows while it is in cache ([`super::direct`]); the other paths convolve the images into a
//! scratch buffer and apply it after ([`apply`]).

use super::Geometry;
use crate::Float;
use crate::buffer_cache::{recycle, try_uninit_buffer};
use crate::{Result, TensorError};
use rayon::prelude::*;

/// What a convolution call does to its output (after adding the bias) before it writes it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct ConvStage {
    /// `y > 0 ? y : 0` per element, as the eager `relu` (NaN becomes 0).
    pub relu: bool,
    /// The maximum over windows of `[kH, kW]` that tile the output from its top left corner
    /// (stride equal to the window, no padding; rows and columns past the last whole window
    /// are dropped), as the eager `max_pool2d` of those parameters: NaN wins.
    pub max_pool: Option<[usize; 2]>,
}

impl ConvStage {
    /// The stage that writes the convolution as it is.
    pub fn is_identity(&self) -> bool {
        *self == ConvStage::default()
    }

    /// The size of a written plane for a convolution plane of `[oH, oW]`.
    pub fn plane(&self, [oh, ow]: [usize; 2]) -> [usize; 2] {
        match self.max_pool {
            Some([kh, kw]) => [oh / kh.max(1), ow / kw.max(1)],
            None => [oh, ow],
        }
    }

    /// An error unless every window has at least one row and one column.
    pub fn check(&self) -> Result<()> {
        match self.max_pool {
            Some([kh, kw]) if kh == 0 || kw == 0 => Err(TensorError::invalid(
                "conv2d",
                format!("a stage's max pool window of {kh}x{kw}"),
            )),
            _ => Ok(()),
        }
    }
}

/// Whether `v` replaces `best` as a window's maximum (as the eager max pool: NaN wins, the
/// first of equal values stays).
#[inline(always)]
fn beats<T: Float>(v: T, best: T) -> bool {
    v > best || v.is_nan()
}

#[inline(always)]
fn relu<T: Float>(v: T) -> T {
    if v > T::zero() { v } else { T::zero() }
}

/// `out` (images of the staged planes) from `conv` (the same images' convolution planes of
/// `g`, bias added): the stage applied plane by plane, in parallel.
pub(super) fn apply<T: Float>(g: &Geometry, stage: ConvStage, conv: &mut [T], out: &mut [T]) {
    let [ph, pw] = stage.plane([g.oh, g.ow]);
    let (plane, staged) = (g.oh * g.ow, ph * pw);
    if plane == 0 || staged == 0 {
        return;
    }
    conv.par_chunks_mut(plane)
        .zip(out.par_chunks_mut(staged))
        .for_each(|(src, dst)| {
            if stage.relu {
                src.iter_mut().for_each(|v| *v = relu(*v));
            }
            match stage.max_pool {
                Some(window) => pool_rows(src, g.ow, window, dst, pw),
                None => dst.copy_from_slice(src),
            }
        });
}

/// The pooled rows `dst` (`pw` columns each) of the rows `src` (`w` columns each): each
/// output row from the next `kH` input rows.
pub(super) fn pool_rows<T: Float>(
    src: &[T],
    w: usize,
    [kh, kw]: [usize; 2],
    dst: &mut [T],
    pw: usize,
) {
    if pw == 0 {
        return;
    }
    let done = pool_fast(src, w, [kh, kw], dst, pw);
    for (r, out) in dst.chunks_exact_mut(pw).enumerate() {
        let rows = &src[r * kh * w..][..kh * w];
        for (j, best) in out.iter_mut().enumerate().skip(done) {
            *best = rows[j * kw];
            for dy in 0..kh {
                for dx in 0..kw {
                    let v = rows[dy * w + j * kw + dx];
                    *best = if beats(v, *best) { v } else { *best };
                }
            }
        }
    }
}

/// The first outputs of each pooled row that vector code computes (f32, 2-wide windows, on
/// x86 with AVX2), how many per row; the caller computes the rest.
fn pool_fast<T: Float>(
    src: &[T],
    w: usize,
    [kh, kw]: [usize; 2],
    dst: &mut [T],
    pw: usize,
) -> usize {
    // The vector code reads without bounds checks what the scalar code reads with them.
    assert!(
        w >= kw * pw && src.len() >= dst.len() / pw * kh * w,
        "pooling {} rows of {pw} from {} floats in rows of {w}",
        dst.len() / pw,
        src.len()
    );
    #[cfg(target_arch = "x86_64")]
    if T::DTYPE == crate::DType::F32 && kw == 2 {
        // SAFETY: `T` is f32 (only f32 has that dtype): the slices are reinterpreted as
        // themselves.
        let (src, dst) = unsafe {
            (
                std::slice::from_raw_parts(src.as_ptr() as *const f32, src.len()),
                std::slice::from_raw_parts_mut(dst.as_mut_ptr() as *mut f32, dst.len()),
            )
        };
        let rows = Rows { w, kh, pw };
        if crate::simd::has_avx512() {
            // SAFETY: the CPU has AVX-512 F.
            return unsafe { pair_pool_avx512(src, rows, dst) };
        }
        if crate::simd::has_avx2() {
            // SAFETY: the CPU has AVX2.
            return unsafe { pair_pool_avx2(src, rows, dst) };
        }
    }
    let _ = (src, w, kh, kw, dst, pw);
    0
}

/// The rows a vector pool reads and writes: `kh` rows of `w` floats per output row of `pw`.
#[derive(Clone, Copy)]
struct Rows {
    w: usize,
    kh: usize,
    pw: usize,
}

/// 16 outputs at a time of [`pool_fast`] with 2-wide windows: per row of the windows, its
/// even and odd columns split apart, and the taps taken in eager's order (row by row, left
/// before right; the first of equal values stays, so `-0` and `+0`, or two NaNs, come out as
/// eager's); how many outputs per row it wrote.
///
/// # Safety
/// The CPU has AVX-512 F; `src` holds `kh` rows of `w >= 2 pw` floats per output row of `dst`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn pair_pool_avx512(src: &[f32], Rows { w, kh, pw }: Rows, dst: &mut [f32]) -> usize {
    use std::arch::x86_64::*;
    /// `x` or `y` per lane, `y` where it beats `x`.
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn select(x: __m512, y: __m512) -> __m512 {
        let wins =
            _mm512_cmp_ps_mask::<_CMP_GT_OQ>(y, x) | _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(y, y);
        _mm512_mask_blend_ps(wins, x, y)
    }
    let groups = pw / 16;
    let even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
    let odd = _mm512_set_epi32(31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
    for r in 0..dst.len() / pw {
        for g in 0..groups {
            // SAFETY: columns `32 g .. 32 g + 32` of the `kh` rows of output row `r` lie in
            // `src` (`32 g + 32 <= 2 pw <= w`), its outputs `16 g .. 16 g + 16` in `dst`.
            unsafe {
                let at = src.as_ptr().add(r * kh * w + 32 * g);
                let (a, b) = (_mm512_loadu_ps(at), _mm512_loadu_ps(at.add(16)));
                let mut best = _mm512_permutex2var_ps(a, even, b);
                best = select(best, _mm512_permutex2var_ps(a, odd, b));
                for dy in 1..kh {
                    let row = at.add(dy * w);
                    let (a, b) = (_mm512_loadu_ps(row), _mm512_loadu_ps(row.add(16)));
                    best = select(best, _mm512_permutex2var_ps(a, even, b));
                    best = select(best, _mm512_permutex2var_ps(a, odd, b));
                }
                _mm512_storeu_ps(dst.as_mut_ptr().add(r * pw + 16 * g), best);
            }
        }
    }
    groups * 16
}

/// 8 outputs at a time of [`pool_fast`] with 2-wide windows, in eager's order, as
/// [`pair_pool_avx512`].
///
/// # Safety
/// The CPU has AVX2; as [`pair_pool_avx512`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn pair_pool_avx2(src: &[f32], Rows { w, kh, pw }: Rows, dst: &mut [f32]) -> usize {
    use std::arch::x86_64::*;
    /// `x` or `y` per lane, `y` where it beats `x`.
    #[inline]
    #[target_feature(enable = "avx2")]
    fn select(x: __m256, y: __m256) -> __m256 {
        let wins = _mm256_or_ps(
            _mm256_cmp_ps::<_CMP_GT_OQ>(y, x),
            _mm256_cmp_ps::<_CMP_UNORD_Q>(y, y),
        );
        _mm256_blendv_ps(x, y, wins)
    }
    /// The 64-bit pairs of `v` in the order `0 2 1 3`.
    #[inline]
    #[target_feature(enable = "avx2")]
    fn order(v: __m256) -> __m256 {
        _mm256_castpd_ps(_mm256_permute4x64_pd::<0xD8>(_mm256_castps_pd(v)))
    }
    let groups = pw / 8;
    for r in 0..dst.len() / pw {
        for g in 0..groups {
            // SAFETY: as in `pair_pool_avx512`, with 16 columns per group.
            unsafe {
                let at = src.as_ptr().add(r * kh * w + 16 * g);
                // Per 128-bit lane `a0 a2 b0 b2 | a4 a6 b4 b6` (and the odd ones), then the
                // 64-bit pairs put in order.
                let split = |row: *const f32| {
                    let (a, b) = (_mm256_loadu_ps(row), _mm256_loadu_ps(row.add(8)));
                    (
                        order(_mm256_shuffle_ps::<0x88>(a, b)),
                        order(_mm256_shuffle_ps::<0xDD>(a, b)),
                    )
                };
                let (left, right) = split(at);
                let mut best = select(left, right);
                for dy in 1..kh {
                    let (left, right) = split(at.add(dy * w));
                    best = select(select(best, left), right);
                }
                _mm256_storeu_ps(dst.as_mut_ptr().add(r * pw + 8 * g), best);
            }
        }
    }
    groups * 8
}

/// The images `first..` of `conv(x, w) + bias` with `stage` applied, into `out` (a whole number
/// of staged images); the caller checked the buffers against `g`.
pub(super) fn forward_into<T: Float>(
    g: &Geometry,
    x: &[T],
    w: &[T],
    bias: Option<&[T]>,
    stage: ConvStage,
    first: usize,
    out: &mut [T],
) -> Result<()> {
    if stage.is_identity() {
        return super::lowering::forward_into(g, x, w, bias, first, out);
    }
    if let Some((x, w, bias, out)) = super::lowering::as_f32(x, w, bias, out)
        && super::direct::applies(g)
    {
        return super::direct::forward_into(g, x, w, bias, stage, first, out);
    }
    let [ph, pw] = stage.plane([g.oh, g.ow]);
    let images = out.len().checked_div(g.c_out * ph * pw).unwrap_or(0);
    let mut conv = try_uninit_buffer::<T>("conv2d", images * g.c_out * g.oh * g.ow)?;
    super::lowering::forward_into(g, x, w, bias, first, &mut conv)?;
    apply(g, stage, &mut conv, out);
    recycle(conv);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The window maxima of a pooled row by their definition: every tap in order, NaN wins.
    fn by_definition(rows: &[f32], w: usize, kh: usize, pw: usize) -> Vec<f32> {
        (0..pw)
            .map(|j| {
                let mut best = rows[2 * j];
                for dy in 0..kh {
                    for dx in 0..2 {
                        let v = rows[dy * w + 2 * j + dx];
                        best = if beats(v, best) { v } else { best };
                    }
                }
                best
            })
            .collect()
    }

    /// `kh` rows of `w` floats whose 2-wide windows cycle through ties only the order of the
    /// taps decides (`-0` before `+0` and after it, two NaN payloads either way, in the first
    /// row and in later ones), NaN behind a larger value, and plain values.
    fn windows(kh: usize, w: usize, pw: usize) -> Vec<f32> {
        let (nan, other_nan) = (f32::NAN, f32::from_bits(0x7fc0_0001));
        let patterns: [[f32; 4]; 8] = [
            [-1.0, -2.0, -0.0, 0.0],
            [-1.0, -2.0, 0.0, -0.0],
            [-0.0, 0.0, -3.0, -1.0],
            [-3.0, -1.0, nan, other_nan],
            [other_nan, nan, -1.0, -2.0],
            [5.0, 4.0, 3.0, nan],
            [1.0, 2.0, 3.0, 4.0],
            [0.0, -0.0, -0.0, 0.0],
        ];
        let mut rows: Vec<f32> = (0..kh * w).map(|i| -((i % 7) as f32) - 10.0).collect();
        for j in 0..pw {
            let p = patterns[(j + kh) % patterns.len()];
            // The pattern's second row goes into the window's last row, so that with three
            // rows the tie sits behind a row of plain values.
            let last = (kh - 1) * w;
            rows[2 * j..2 * j + 2].copy_from_slice(&p[..2]);
            if kh > 1 {
                rows[last + 2 * j..last + 2 * j + 2].copy_from_slice(&p[2..]);
            }
        }
        rows
    }

    /// Both vector pools of 2-wide windows (whichever this CPU runs) equal the definition bit
    /// for bit for 1 to 3 rows, rows longer than the windows, NaN (of two payloads) in first
    /// and later taps, and windows of `-0` and `+0`.
    #[test]
    fn vector_pair_pools_match_the_definition() {
        #[cfg(target_arch = "x86_64")]
        for kh in 1..4 {
            for pw in [0, 7, 8, 16, 23, 40] {
                let w = 2 * pw + 3;
                let rows = windows(kh, w, pw);
                let expected = by_definition(&rows, w, kh, pw);
                let same = |got: &[f32], done: usize, isa: &str| {
                    for (j, (g, e)) in got.iter().zip(&expected).take(done).enumerate() {
                        assert_eq!(
                            g.to_bits(),
                            e.to_bits(),
                            "{isa} kh {kh} pw {pw}: output {j} is {g}, expected {e}"
                        );
                    }
                };
                let shape = Rows { w, kh, pw };
                if pw > 0 && crate::simd::has_avx512() {
                    let mut got = vec![0.0; pw];
                    // SAFETY: the CPU has AVX-512 F; `rows` holds `kh` rows of `w` columns.
                    let done = unsafe { pair_pool_avx512(&rows, shape, &mut got) };
                    assert_eq!(done, pw / 16 * 16);
                    same(&got, done, "avx512");
                }
                if pw > 0 && crate::simd::has_avx2() {
                    let mut got = vec![0.0; pw];
                    // SAFETY: the CPU has AVX2; as above.
                    let done = unsafe { pair_pool_avx2(&rows, shape, &mut got) };
                    assert_eq!(done, pw / 8 * 8);
                    same(&got, done, "avx2");
                }
                let mut got = vec![0.0; pw];
                pool_rows(&rows, w, [kh, 2], &mut got, pw);
                same(&got, pw, "pool_rows");
            }
        }
    }

    /// The direct kernel's stage (ReLU at the tiles' store, pooling from the staging rows)
    /// equals the convolution followed by [`apply`] bit for bit, on 2 threads for one image
    /// (bands of whole windows' rows) and three (a task per image), for windows of 1 to 3
    /// rows, channel tails, strides and dropped rows and columns.
    #[test]
    fn direct_stage_equals_the_convolution_then_the_stage() {
        if !crate::simd::has_avx2() {
            return;
        }
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        let cases = [
            (3, 16, 32, 32, 1, [2, 2]),
            (4, 20, 9, 11, 1, [3, 3]),
            (5, 7, 17, 40, 2, [2, 3]),
            (2, 9, 13, 13, 1, [1, 2]),
        ];
        for (cin, cout, h, w, stride, window) in cases {
            for n in [1, 3] {
                let params = crate::op::ConvParams::conv2d([stride; 2], [1, 1], [1, 1], 1);
                let g = Geometry::new(params, &[n, cin, h, w], &[cout, cin, 3, 3]).unwrap();
                assert!(super::super::direct::applies(&g));
                let values = |len: usize, seed: usize| -> Vec<f32> {
                    (0..len)
                        .map(|i| ((i * 7919 + seed) % 61) as f32 / 30.0 - 1.0)
                        .collect()
                };
                let (x, wt) = (values(n * cin * h * w, 1), values(cout * cin * 9, 2));
                let bias = values(cout, 3);
                for relu in [true, false] {
                    let stage = ConvStage {
                        relu,
                        max_pool: Some(window),
                    };
                    let [ph, pw] = stage.plane([g.oh, g.ow]);
                    let mut conv = vec![0.0; n * cout * g.oh * g.ow];
                    let mut expected = vec![0.0; n * cout * ph * pw];
                    let mut got = vec![f32::NAN; n * cout * ph * pw];
                    pool.install(|| {
                        super::super::lowering::forward_into(
                            &g,
                            &x,
                            &wt,
                            Some(&bias),
                            0,
                            &mut conv,
                        )
                        .unwrap();
                        apply(&g, stage, &mut conv, &mut expected);
                        forward_into(&g, &x, &wt, Some(&bias), stage, 0, &mut got).unwrap();
                    });
                    let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                    assert_eq!(bits(&got), bits(&expected), "{g:?} {stage:?}");
                }
            }
        }
    }
}
