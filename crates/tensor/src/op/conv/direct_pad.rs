//! The zero-padded input of the direct convolution: per input channel, one plane per column
//! phase (a strided convolution's columns split by phase, so that every tap reads contiguous
//! lanes), each `rows x cols`, zero outside the image. A thread keeps its padded image between
//! images and calls ([`PadBuffer`]): the zero border is written once per layout, and each
//! image only copies its pixels (the small CNN's stride-2 convolution copies rows of 8 floats
//! per phase; zeroing the border of each row took more calls than the copies).

use super::Geometry;

/// The padded input's sizes for one image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Padded {
    /// Rows (padded input rows the output reads).
    pub(super) rows: usize,
    /// Columns per phase.
    pub(super) cols: usize,
    /// Column phases (the column stride).
    pub(super) phases: usize,
}

impl Padded {
    /// The layout for `g`'s output rows computed in tiles of `width` columns.
    pub(super) fn new(g: &Geometry, width: usize) -> Padded {
        let (sh, sw) = (g.params.stride[0], g.params.stride[1]);
        let tiles = g.ow.div_ceil(width);
        Padded {
            rows: (g.oh - 1) * sh + g.kh,
            cols: tiles * width + (g.kw - 1) / sw,
            phases: sw,
        }
    }

    /// Floats per input channel.
    pub(super) fn channel(&self) -> usize {
        self.phases * self.rows * self.cols
    }
}

/// Where a padded image's pixels go: the layout, the image's sizes and its padding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct PadLayout {
    padded: Padded,
    channels: usize,
    h: usize,
    w: usize,
    padding: [usize; 2],
}

impl PadLayout {
    fn of(g: &Geometry, padded: Padded) -> PadLayout {
        PadLayout {
            padded,
            channels: g.c_in,
            h: g.h,
            w: g.w,
            padding: g.params.padding,
        }
    }
}

/// A padded image buffer and the layout whose zero border it holds.
#[derive(Default)]
pub(super) struct PadBuffer {
    data: Vec<f32>,
    layout: Option<PadLayout>,
}

impl PadBuffer {
    /// The padded image `x` (`[C, H, W]`) for `g` in `padded`'s layout: the border zeroed
    /// when the layout differs from the last image's, the pixels copied; `OutOfMemory` when
    /// the buffer cannot grow.
    pub(super) fn fill(
        &mut self,
        g: &Geometry,
        padded: Padded,
        x: &[f32],
    ) -> crate::Result<&[f32]> {
        let layout = PadLayout::of(g, padded);
        if self.layout != Some(layout) {
            self.layout = None;
            self.data.clear();
            grow(&mut self.data, g.c_in * padded.channel())?;
            self.layout = Some(layout);
        }
        copy_pixels(g, padded, x, &mut self.data);
        Ok(&self.data)
    }
}

/// `buffer` resized to `len` floats (new ones zero), or `OutOfMemory` for the convolution.
pub(super) fn grow(buffer: &mut Vec<f32>, len: usize) -> crate::Result<()> {
    if let Some(more) = len.checked_sub(buffer.len()) {
        buffer
            .try_reserve_exact(more)
            .map_err(|_| crate::buffer_cache::out_of_memory("conv2d", len, crate::DType::F32))?;
    }
    buffer.resize(len, 0.0);
    Ok(())
}

/// Copies image `x[C, H, W]` into `dst[C][phase][row][col]`, zero outside the image.
pub(super) fn pad_image(g: &Geometry, p: Padded, x: &[f32], dst: &mut [f32]) {
    dst.fill(0.0);
    copy_pixels(g, p, x, dst);
}

/// The pixels of [`pad_image`], leaving every other float of `dst` as it is.
fn copy_pixels(g: &Geometry, p: Padded, x: &[f32], dst: &mut [f32]) {
    let (pad_h, pad_w) = (g.params.padding[0], g.params.padding[1]);
    // The padded rows holding image rows: `pad_h..pad_h + H`, cut at the rows the output reads.
    let image_rows = pad_h.min(p.rows)..(pad_h + g.h).min(p.rows);
    for (c, plane) in dst.chunks_exact_mut(p.channel()).enumerate() {
        let src = &x[c * g.h * g.w..][..g.h * g.w];
        for (phase, rows) in plane.chunks_exact_mut(p.rows * p.cols).enumerate() {
            // Column `col` holds input column `col * phases + phase - pad_w`: the ones inside
            // the image are `lo..hi`, starting at input column `first`.
            let lo = pad_w.saturating_sub(phase).div_ceil(p.phases).min(p.cols);
            let hi = (pad_w + g.w)
                .saturating_sub(phase)
                .div_ceil(p.phases)
                .clamp(lo, p.cols);
            if lo >= hi {
                continue;
            }
            let first = (lo * p.phases + phase).saturating_sub(pad_w);
            for r in image_rows.clone() {
                let src_row = &src[(r - pad_h) * g.w..][..g.w][first..];
                let inside = &mut rows[r * p.cols..][lo..hi];
                match p.phases {
                    1 => inside.copy_from_slice(&src_row[..inside.len()]),
                    2 => every_second(src_row, inside),
                    _ => {
                        for (d, &v) in inside.iter_mut().zip(src_row.iter().step_by(p.phases)) {
                            *d = v;
                        }
                    }
                }
            }
        }
    }
}

/// `dst[i] = src[2 * i]` (a stride-2 convolution's column phase; `src` holds at least
/// `2 * dst.len() - 1` floats): AVX-512 masked gathers, or AVX2 shuffles for each group of 8
/// whose 16 source floats lie in `src` and [`every_nth`] for the rest.
fn every_second(src: &[f32], dst: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    {
        if crate::simd::has_avx512() {
            // SAFETY: the CPU has AVX-512 F.
            unsafe { every_second_avx512(src, dst) };
            return;
        }
        if crate::simd::has_avx2() {
            // SAFETY: the CPU has AVX2.
            let done = unsafe { every_second_avx2(src, dst) };
            every_nth::<2>(&src[(2 * done).min(src.len())..], &mut dst[done..]);
            return;
        }
    }
    every_nth::<2>(src, dst);
}

/// [`every_second`] 16 floats at a time, the last group's loads and store masked.
///
/// # Safety
/// The CPU has AVX-512 F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn every_second_avx512(src: &[f32], dst: &mut [f32]) {
    use std::arch::x86_64::*;
    let even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
    let mask = |n: usize| if n >= 16 { 0xFFFF } else { (1u16 << n) - 1 };
    let n = dst.len().min(src.len().div_ceil(2));
    let mut i = 0;
    while i < n {
        let left = src.len() - 2 * i;
        // SAFETY: the masks cover `src[2 i .. 2 i + 32]` and `dst[i .. i + 16]` only where they
        // lie in the slices (masked-off lanes are neither read nor written, and the pointers
        // are formed with `wrapping_add`, never dereferenced beyond them).
        unsafe {
            let at = src.as_ptr().wrapping_add(2 * i);
            let a = _mm512_maskz_loadu_ps(mask(left), at);
            let b = _mm512_maskz_loadu_ps(mask(left.saturating_sub(16)), at.wrapping_add(16));
            let v = _mm512_permutex2var_ps(a, even, b);
            _mm512_mask_storeu_ps(dst.as_mut_ptr().wrapping_add(i), mask(n - i), v);
        }
        i += 16;
    }
}

/// The whole groups of 8 of [`every_second`]; returns how many elements of `dst` it wrote.
///
/// # Safety
/// The CPU has AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn every_second_avx2(src: &[f32], dst: &mut [f32]) -> usize {
    use std::arch::x86_64::*;
    let groups = (dst.len() / 8).min(src.len() / 16);
    for g in 0..groups {
        // SAFETY: `16 g + 16 <= src.len()` and `8 g + 8 <= dst.len()` (the bound on `groups`).
        unsafe {
            let a = _mm256_loadu_ps(src.as_ptr().add(16 * g));
            let b = _mm256_loadu_ps(src.as_ptr().add(16 * g + 8));
            // Per 128-bit lane `a0 a2 b0 b2 | a4 a6 b4 b6`; then the 64-bit pairs reordered.
            let even = _mm256_shuffle_ps::<0x88>(a, b);
            let ordered = _mm256_permute4x64_pd::<0xD8>(_mm256_castps_pd(even));
            _mm256_storeu_ps(dst.as_mut_ptr().add(8 * g), _mm256_castpd_ps(ordered));
        }
    }
    groups * 8
}

/// `dst[i] = src[i * N]`, with the stride known to the compiler (so that it vectorises).
fn every_nth<const N: usize>(src: &[f32], dst: &mut [f32]) {
    let Some(last) = dst.len().checked_sub(1) else {
        return;
    };
    let src = &src[..last * N + 1];
    for (i, d) in dst.iter_mut().enumerate() {
        *d = src[i * N];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The stride-2 gather equals `step_by(2)` for every length, whole groups of 8 and 16 and
    /// tails, with the source ending right after the last element read.
    #[test]
    fn every_second_takes_the_even_elements() {
        for len in 0..40 {
            for extra in 0..3 {
                let src: Vec<f32> = (0..(2 * len + extra).max(1)).map(|i| i as f32).collect();
                let n = src.len().div_ceil(2).min(len);
                let mut dst = vec![f32::NAN; n + 1];
                every_second(&src, &mut dst[..n]);
                let expected: Vec<f32> = src.iter().step_by(2).take(n).copied().collect();
                assert_eq!(dst[..n], expected, "len {len} extra {extra}");
                assert!(
                    dst[n].is_nan(),
                    "len {len} extra {extra}: wrote past the end"
                );
            }
        }
    }

    /// The AVX2 gather, which AVX-512 machines never take, equals `step_by(2)` too.
    #[test]
    fn avx2_every_second_takes_the_even_elements() {
        #[cfg(target_arch = "x86_64")]
        if crate::simd::has_avx2() {
            for len in 0..40 {
                let src: Vec<f32> = (0..2 * len + 1).map(|i| i as f32).collect();
                let mut dst = vec![f32::NAN; len];
                // SAFETY: the CPU has AVX2.
                let done = unsafe { every_second_avx2(&src, &mut dst) };
                assert_eq!(done, len / 8 * 8);
                let expected: Vec<f32> = src.iter().step_by(2).take(done).copied().collect();
                assert_eq!(dst[..done], expected, "len {len}");
            }
        }
    }

    /// A buffer filled for one layout and then another, and back, equals a fresh padding of
    /// each image (the border is rewritten when the layout changes).
    #[test]
    fn pad_buffer_equals_a_fresh_padding_across_layouts() {
        let geometry = |h: usize, w: usize, stride: usize, pad: usize| {
            let params = crate::op::ConvParams::conv2d([stride; 2], [pad; 2], [1, 1], 1);
            Geometry::new(params, &[1, 3, h, w], &[4, 3, 3, 3]).unwrap()
        };
        let mut buffer = PadBuffer::default();
        for (i, (h, w, stride, pad)) in [(9, 13, 2, 1), (7, 7, 1, 2), (9, 13, 2, 1), (9, 13, 2, 0)]
            .into_iter()
            .enumerate()
        {
            let g = geometry(h, w, stride, pad);
            let padded = Padded::new(&g, 8);
            let x: Vec<f32> = (0..3 * h * w).map(|v| (v + i) as f32 + 1.0).collect();
            let mut fresh = vec![f32::NAN; 3 * padded.channel()];
            pad_image(&g, padded, &x, &mut fresh);
            assert!(fresh.iter().all(|v| !v.is_nan()));
            assert_eq!(
                buffer.fill(&g, padded, &x).unwrap(),
                &fresh[..],
                "layout {i}"
            );
        }
    }
}
