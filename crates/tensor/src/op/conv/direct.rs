//! Direct f32 convolution of packed NCHW images, vectorised along output rows: each image is
//! copied once into a zero-padded input (a strided convolution's columns split by phase, so
//! that every tap reads contiguous lanes), and register tiles of output channels by output
//! columns accumulate `x * w` over channels and taps with no patch matrix. Used instead of
//! im2col + GEMM where an x86 vector unit with FMA is found at run time.

use super::Geometry;
use super::direct_tile::{Lanes, TileArgs, tile};
use crate::buffer_cache::{recycle, try_uninit_buffer};
use rayon::prelude::*;

/// The widest kernel the direct convolution takes.
const MAX_KW: usize = 11;

/// A register tile shape and the instructions it runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Choice {
    /// 16 (zmm, AVX-512) or 8 (ymm) lanes per vector.
    lanes: usize,
    /// Vectors per output row of the tile.
    nv: usize,
    /// Output channels of the tile.
    ocb: usize,
    /// 32 vector registers (AVX-512) rather than 16 (AVX2).
    avx512: bool,
}

impl Choice {
    /// Output columns of one tile.
    fn width(&self) -> usize {
        self.lanes * self.nv
    }
}

/// Which vector instructions this CPU has, detected once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Isa {
    Avx512,
    Avx2,
    None,
}

fn isa() -> Isa {
    static ISA: std::sync::OnceLock<Isa> = std::sync::OnceLock::new();
    *ISA.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            let fma = is_x86_feature_detected!("fma") && is_x86_feature_detected!("avx2");
            if fma && is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx512vl") {
                return Isa::Avx512;
            }
            if fma {
                return Isa::Avx2;
            }
        }
        Isa::None
    })
}

/// The tile for `g` on this CPU: vectors as wide as the output rows allow, and as many output
/// channels as the registers hold, wasting the fewest padded channels.
fn choose(g: &Geometry, isa: Isa) -> Option<Choice> {
    let (lanes, nv, ocbs): (usize, usize, &[usize]) = match isa {
        Isa::Avx512 if g.ow <= 8 => (8, 1, &[24, 16, 8]),
        // One vector per row where two would compute more padded columns (a 112-wide row is
        // 7 tiles of 16 but 4 of 32, an eighth of them wasted): 24 channels fit the registers.
        Isa::Avx512 if g.ow.div_ceil(16) * 16 < g.ow.div_ceil(32) * 32 => (16, 1, &[24, 16, 8]),
        Isa::Avx512 => (16, 2, &[12, 8]),
        Isa::Avx2 if g.ow <= 8 => (8, 1, &[12, 8]),
        Isa::Avx2 => (8, 2, &[6, 4]),
        Isa::None => return None,
    };
    let padded = |ocb: usize| g.c_out.div_ceil(ocb) * ocb;
    let ocb = ocbs.iter().copied().min_by_key(|&o| padded(o))?;
    Some(Choice {
        lanes,
        nv,
        ocb,
        avx512: isa == Isa::Avx512,
    })
}

/// Patch lengths (`C_in * kH * kW`) up to which the direct kernel beats im2col + GEMM. Short
/// patches leave the GEMM little to amortise its packing over (first layers: 27 to 147);
/// measured on ResNet-18, whose 3x3 layers (576 and up) ran 15% slower direct.
const MAX_DIRECT_PATCH: usize = 320;

/// Whether the direct kernel computes `g`: one group, no dilation, a short patch, a CPU with
/// FMA. 1x1 convolutions stay GEMMs: their patches are the input itself, or every
/// `stride`-th pixel of it (ResNet-18's first 1x1 stride-2 downsampling with its ReLU: 0.31
/// ms direct, 0.22 ms as a GEMM, BENCHMARKS.md).
pub(super) fn applies(g: &Geometry) -> bool {
    let p = &g.params;
    g.patch_len() <= MAX_DIRECT_PATCH
        && p.groups == 1
        && p.dilation == [1, 1]
        && (g.kh, g.kw) != (1, 1)
        && p.stride[1] <= 4
        && g.kw <= MAX_KW
        && choose(g, isa()).is_some()
}

/// The padded input's sizes for one image.
#[derive(Debug, Clone, Copy)]
struct Padded {
    /// Rows (padded input rows the output reads).
    rows: usize,
    /// Columns per phase.
    cols: usize,
    /// Column phases (the column stride).
    phases: usize,
}

impl Padded {
    fn new(g: &Geometry, c: Choice) -> Padded {
        let (sh, sw) = (g.params.stride[0], g.params.stride[1]);
        let tiles = g.ow.div_ceil(c.width());
        Padded {
            rows: (g.oh - 1) * sh + g.kh,
            cols: tiles * c.width() + (g.kw - 1) / sw,
            phases: sw,
        }
    }

    fn channel(&self) -> usize {
        self.phases * self.rows * self.cols
    }
}

/// Copies image `x[C, H, W]` into `dst[C][phase][row][col]`, zero outside the image.
fn pad_image(g: &Geometry, p: Padded, x: &[f32], dst: &mut [f32]) {
    let (pad_h, pad_w) = (g.params.padding[0], g.params.padding[1]);
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
            let first = (lo * p.phases + phase).saturating_sub(pad_w);
            for (r, row) in rows.chunks_exact_mut(p.cols).enumerate() {
                if r < pad_h || r - pad_h >= g.h || lo >= hi {
                    row.fill(0.0);
                    continue;
                }
                let src_row = &src[(r - pad_h) * g.w + first..];
                row[..lo].fill(0.0);
                row[hi..].fill(0.0);
                let inside = &mut row[lo..hi];
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

/// `dst[i] = src[2 * i]` (a stride-2 convolution's column phase): AVX2 shuffles for each
/// group of 8 whose 16 source floats lie in `src`, then [`every_nth`] for the rest.
fn every_second(src: &[f32], dst: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if isa() != Isa::None {
        // SAFETY: `isa` found AVX2 on this CPU.
        let done = unsafe { every_second_avx2(src, dst) };
        every_nth::<2>(&src[(2 * done).min(src.len())..], &mut dst[done..]);
        return;
    }
    every_nth::<2>(src, dst);
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

/// The weights `w[C_out, K]` (`K = C_in kH kW`) packed for the tiles: per block of `ocb`
/// output channels, per tap `k`, the block's `ocb` weights side by side (`[blocks, K, ocb]`),
/// the last block padded with zeros. Before, each of a tile's channels read its own row of
/// `w`: 16 to 24 base pointers, more than the registers hold, reloaded from the stack on
/// every tap (the bench's small CNN's second convolution, 16 to 32 channels with stride 2 at
/// batch 64: 0.37 -> 0.29 ms, BENCHMARKS.md).
fn pack_weights(g: &Geometry, ocb: usize, w: &[f32]) -> crate::Result<Vec<f32>> {
    let k = g.c_in * g.kh * g.kw;
    let blocks = g.c_out.div_ceil(ocb);
    let mut packed = try_uninit_buffer::<f32>("conv2d", blocks * k * ocb)?;
    for (block, dst) in packed.chunks_exact_mut(k * ocb).enumerate() {
        for o in 0..ocb {
            let channel = block * ocb + o;
            match w.get(channel * k..(channel + 1) * k) {
                Some(row) => {
                    for (tap, &v) in row.iter().enumerate() {
                        dst[tap * ocb + o] = v;
                    }
                }
                _ => (0..k).for_each(|tap| dst[tap * ocb + o] = 0.0),
            }
        }
    }
    Ok(packed)
}

/// One task's sweep: output rows `rows` of one image and block of output channels, into a
/// staging area of whole tiles.
struct Sweep {
    /// The image's padded input.
    x: *const f32,
    padded: Padded,
    /// The block's packed weights ([`pack_weights`]).
    w: *const f32,
    /// Offset of each kernel column in the padded input.
    taps: [usize; MAX_KW],
    /// Starting value per channel of the block.
    init: *const f32,
    channels: usize,
    /// Channels per pass, so that a pass's weights stay in the L1 cache.
    channel_block: usize,
    kh: usize,
    kw: usize,
    stride: [usize; 2],
    rows: std::ops::Range<usize>,
    tiles: usize,
    width: usize,
    /// Where the tiles go: channel `o`, row `r` of the band at `stage + o * stage_channel + r *
    /// stage_row` (the output itself, or a staging area of whole tiles).
    stage: *mut f32,
    stage_row: usize,
    stage_channel: usize,
}

impl Sweep {
    /// # Safety
    /// The CPU has `L`'s instructions; the pointers cover what the sweep reads and writes.
    #[inline(always)]
    unsafe fn run<L: Lanes, const NV: usize, const OCB: usize>(&self) {
        let p = self.padded;
        let (stage_row, stage_channel) = (self.stage_row, self.stage_channel);
        let mut c0 = 0;
        while c0 < self.channels {
            let channels = self.channel_block.min(self.channels - c0);
            for (r, oy) in self.rows.clone().enumerate() {
                for t in 0..self.tiles {
                    // SAFETY: the padded input has every row and column a whole tile reads,
                    // the weights every channel, the stage every tile of these rows.
                    unsafe {
                        let args = TileArgs {
                            x: self.x.add(
                                c0 * p.channel() + oy * self.stride[0] * p.cols + t * self.width,
                            ),
                            x_channel: p.channel(),
                            x_row: p.cols,
                            w: self.w.add(c0 * self.kh * self.kw * OCB),
                            channels,
                            kh: self.kh,
                            taps: self.taps.as_ptr(),
                            kw: self.kw,
                            out: self.stage.add(r * stage_row + t * self.width),
                            out_channel: stage_channel,
                            accumulate: c0 > 0,
                            init: self.init,
                        };
                        tile::<L, NV, OCB>(&args);
                    }
                }
            }
            c0 += channels;
        }
    }
}

macro_rules! entry {
    ($name:ident, $features:literal) => {
        /// [`Sweep::run`] compiled for the named instructions.
        ///
        /// # Safety
        /// The CPU has them; as [`Sweep::run`].
        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = $features)]
        unsafe fn $name<L: Lanes, const NV: usize, const OCB: usize>(s: &Sweep) {
            unsafe { s.run::<L, NV, OCB>() }
        }
    };
}
entry!(sweep_avx512, "avx512f,avx512vl,avx2,fma");
entry!(sweep_avx2, "avx2,fma");

/// Runs `s` with the tile `c` names.
///
/// # Safety
/// `c` came from [`choose`] on this CPU; as [`Sweep::run`].
#[cfg(target_arch = "x86_64")]
unsafe fn sweep(c: Choice, s: &Sweep) {
    use super::direct_tile::{Ymm, Zmm};
    unsafe {
        match (c.avx512, c.lanes, c.nv, c.ocb) {
            (true, 16, 2, 12) => sweep_avx512::<Zmm, 2, 12>(s),
            (true, 16, 2, 8) => sweep_avx512::<Zmm, 2, 8>(s),
            (true, 16, 1, 24) => sweep_avx512::<Zmm, 1, 24>(s),
            (true, 16, 1, 16) => sweep_avx512::<Zmm, 1, 16>(s),
            (true, 16, 1, 8) => sweep_avx512::<Zmm, 1, 8>(s),
            (true, 8, 1, 24) => sweep_avx512::<Ymm, 1, 24>(s),
            (true, 8, 1, 16) => sweep_avx512::<Ymm, 1, 16>(s),
            (true, 8, 1, 8) => sweep_avx512::<Ymm, 1, 8>(s),
            (false, 8, 2, 6) => sweep_avx2::<Ymm, 2, 6>(s),
            (false, 8, 2, 4) => sweep_avx2::<Ymm, 2, 4>(s),
            (false, 8, 1, 12) => sweep_avx2::<Ymm, 1, 12>(s),
            (false, 8, 1, 8) => sweep_avx2::<Ymm, 1, 8>(s),
            other => unreachable!("choose never picks the tile {other:?}"),
        }
    }
}

#[cfg(not(target_arch = "x86_64"))]
unsafe fn sweep(_: Choice, _: &Sweep) {
    unreachable!("choose picks no tile off x86-64")
}

/// A raw pointer the tasks share; each task writes a region no other task touches.
#[derive(Clone, Copy)]
struct Shared(*mut f32);
// SAFETY: the tasks that receive it write disjoint regions (their own channels and rows).
unsafe impl Send for Shared {}
unsafe impl Sync for Shared {}

impl Shared {
    /// The pointer (a method, so that closures capture the `Send` wrapper, not its field).
    fn get(&self) -> *mut f32 {
        self.0
    }
}

/// What every task of one call shares.
struct Call<'a> {
    g: &'a Geometry,
    c: Choice,
    padded: Padded,
    /// The weights packed for the tiles ([`pack_weights`]).
    w: Vec<f32>,
    taps: [usize; MAX_KW],
    /// Starting value per (padded) output channel.
    init: Vec<f32>,
    channel_block: usize,
    out: Shared,
}

impl Call<'_> {
    /// Output rows `rows` of block `block` of image `image` (of the call's output), from the
    /// image's padded input `xp`.
    fn task(
        &self,
        xp: &[f32],
        image: usize,
        block: usize,
        rows: std::ops::Range<usize>,
    ) -> crate::Result<()> {
        let (g, c) = (self.g, self.c);
        let tiles = g.ow.div_ceil(c.width());
        let first_channel = block * c.ocb;
        // Whole tiles of a whole block go straight to the output; others through a stage.
        let direct = tiles * c.width() == g.ow && first_channel + c.ocb <= g.c_out;
        let mut stage = if direct {
            Vec::new()
        } else {
            try_uninit_buffer::<f32>("conv2d", c.ocb * rows.len() * tiles * c.width())?
        };
        let (stage_ptr, stage_row, stage_channel) = if direct {
            let at = ((image * g.c_out + first_channel) * g.oh + rows.start) * g.ow;
            // SAFETY: `at` lies in the output (image < images, the band's first row < oH).
            (unsafe { self.out.get().add(at) }, g.ow, g.oh * g.ow)
        } else {
            let row = tiles * c.width();
            (stage.as_mut_ptr(), row, rows.len() * row)
        };
        let k_taps = g.kh * g.kw;
        let s = Sweep {
            x: xp.as_ptr(),
            padded: self.padded,
            w: self.w[first_channel * g.c_in * k_taps..].as_ptr(),
            taps: self.taps,
            init: self.init[first_channel..].as_ptr(),
            channels: g.c_in,
            channel_block: self.channel_block,
            kh: g.kh,
            kw: g.kw,
            stride: g.params.stride,
            rows: rows.clone(),
            tiles,
            width: c.width(),
            stage: stage_ptr,
            stage_row,
            stage_channel,
        };
        // SAFETY: `c` was chosen for this CPU; `xp` holds the image's padded input, every row
        // and column of whole tiles (`Padded::new`); the weights (or the tail copy) hold every
        // channel of the block's `ocb` output channels; the stage (or, for whole tiles of a
        // whole block, the output: this task's channels and rows, which no other task writes)
        // holds every tile.
        unsafe { sweep(c, &s) };
        if !direct {
            for o in 0..c.ocb.min(g.c_out - first_channel) {
                let oc = first_channel + o;
                for (r, oy) in rows.clone().enumerate() {
                    let src = &stage[o * stage_channel + r * stage_row..][..g.ow];
                    let at = ((image * g.c_out + oc) * g.oh + oy) * g.ow;
                    // SAFETY: `at..at + ow` lies in the output (image < images, oc < C_out,
                    // oy < oH); only this task writes this channel's rows of this image.
                    unsafe {
                        std::ptr::copy_nonoverlapping(src.as_ptr(), self.out.get().add(at), g.ow);
                    }
                }
            }
            recycle(stage);
        }
        Ok(())
    }
}

thread_local! {
    /// A thread's padded image, kept between calls.
    static PADDED: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// The images `first..` of `y = conv(x, w) + bias` into `out` (a whole number of packed output
/// images), as `lowering::forward_into`; the caller checked [`applies`].
pub(super) fn forward_into(
    g: &Geometry,
    x: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    first: usize,
    out: &mut [f32],
) -> crate::Result<()> {
    let Some(c) = choose(g, isa()) else {
        return Err(crate::TensorError::invalid(
            "conv2d",
            "the direct convolution needs AVX2 and FMA",
        ));
    };
    let (out_plane, in_image) = (g.oh * g.ow, g.c_in * g.h * g.w);
    let images = out.len().checked_div(g.c_out * out_plane).unwrap_or(0);
    if images == 0 || out_plane == 0 {
        return Ok(());
    }
    let padded = Padded::new(g, c);
    let blocks = g.c_out.div_ceil(c.ocb);
    let (sw, x_phase) = (g.params.stride[1], padded.rows * padded.cols);
    let mut taps = [0; MAX_KW];
    for (j, t) in taps.iter_mut().enumerate().take(g.kw) {
        *t = (j % sw) * x_phase + j / sw;
    }
    let mut init = vec![0.0f32; blocks * c.ocb];
    if let Some(b) = bias {
        init[..g.c_out].copy_from_slice(&b[..g.c_out]);
    }
    let call = Call {
        g,
        c,
        padded,
        w: pack_weights(g, c.ocb, w)?,
        taps,
        init,
        channel_block: ((16 << 10) / (g.kh * g.kw * c.ocb * 4)).max(1),
        out: Shared(out.as_mut_ptr()),
    };
    let image_len = g.c_in * padded.channel();
    let threads = rayon::current_num_threads();
    if images >= threads {
        // One task per image: its padded input is made in the thread's own buffer, in cache
        // for every block of output channels.
        return (0..images).into_par_iter().try_for_each(|image| {
            PADDED.with_borrow_mut(|xp| {
                xp.resize(image_len, 0.0);
                let src = &x[(first + image) * in_image..][..in_image];
                pad_image(g, padded, src, xp);
                (0..blocks).try_for_each(|block| call.task(xp, image, block, 0..g.oh))
            })
        });
    }
    // Few images: padded once, shared by tasks of bands of rows of every block.
    let mut xp = try_uninit_buffer::<f32>("conv2d", images * image_len)?;
    xp.par_chunks_mut(padded.channel())
        .enumerate()
        .for_each(|(i, dst)| {
            let (image, channel) = (i / g.c_in, i % g.c_in);
            let plane = g.h * g.w;
            let src = &x[(first + image) * in_image + channel * plane..][..plane];
            pad_image(g, padded, src, dst);
        });
    let bands = (4 * threads).div_ceil(images * blocks).clamp(1, g.oh);
    let band = g.oh.div_ceil(bands);
    let bands = g.oh.div_ceil(band);
    (0..images * blocks * bands)
        .into_par_iter()
        .try_for_each(|task| {
            let (image, rest) = (task / (blocks * bands), task % (blocks * bands));
            let (block, b) = (rest / bands, rest % bands);
            let rows = b * band..((b + 1) * band).min(g.oh);
            call.task(&xp[image * image_len..][..image_len], image, block, rows)
        })?;
    recycle(xp);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::op::ConvParams;

    /// `(C_in, C_out, H, W, kH, kW, stride, padding)`.
    type Case = (
        usize,
        usize,
        usize,
        usize,
        usize,
        usize,
        [usize; 2],
        [usize; 2],
    );

    /// `(C_in, C_out, H, W, kH, kW, stride, padding)` cases: row tails and whole tiles, output
    /// channel tails, several channel passes, strides 1 to 3, padding wider than the kernel's
    /// reach, non-square kernels.
    const CASES: [Case; 14] = [
        (3, 16, 32, 32, 3, 3, [1, 1], [1, 1]),
        (16, 32, 16, 16, 3, 3, [2, 2], [1, 1]),
        (1, 7, 9, 5, 3, 3, [1, 1], [2, 2]),
        (35, 13, 11, 17, 3, 3, [1, 1], [1, 1]),
        (5, 25, 12, 33, 5, 5, [2, 2], [2, 2]),
        (3, 9, 23, 23, 7, 7, [2, 2], [3, 3]),
        (4, 8, 10, 19, 2, 2, [2, 2], [0, 0]),
        (6, 12, 8, 40, 1, 3, [1, 3], [0, 1]),
        (2, 30, 7, 7, 3, 3, [1, 1], [1, 1]),
        (32, 20, 14, 14, 3, 3, [1, 1], [1, 1]),
        (2, 3, 4, 60, 3, 5, [3, 2], [1, 2]),
        (8, 24, 3, 3, 3, 3, [1, 1], [0, 0]),
        (3, 20, 9, 40, 3, 3, [1, 1], [1, 1]),
        (3, 16, 12, 90, 7, 7, [2, 2], [3, 3]),
    ];

    /// The direct kernel against the im2col + GEMM path in f64, images `1..3` of 3, with and
    /// without a bias.
    #[test]
    fn direct_convolution_matches_im2col_gemm() {
        if !applies_anywhere() {
            eprintln!("skipped: no AVX2 + FMA on this CPU");
            return;
        }
        let mut g = crate::Generator::new(7);
        for (cin, cout, h, w, kh, kw, stride, padding) in CASES {
            let params = ConvParams::conv2d(stride, padding, [1, 1], 1);
            let n = 3;
            let geo = Geometry::new(params, &[n, cin, h, w], &[cout, cin, kh, kw]).unwrap();
            assert!(applies(&geo), "{geo:?}");
            let x: Vec<f32> = (0..n * cin * h * w)
                .map(|_| g.uniform() as f32 - 0.5)
                .collect();
            let wt: Vec<f32> = (0..cout * cin * kh * kw)
                .map(|_| g.uniform() as f32 - 0.5)
                .collect();
            let bias: Vec<f32> = (0..cout).map(|i| i as f32 * 0.25 - 1.0).collect();
            let wide = |v: &[f32]| v.iter().map(|&a| a as f64).collect::<Vec<f64>>();
            let image = cout * geo.oh * geo.ow;
            for with_bias in [false, true] {
                let b = with_bias.then_some(&bias[..]);
                let mut expected = vec![0.0f64; 2 * image];
                super::super::lowering::forward_into(
                    &geo,
                    &wide(&x),
                    &wide(&wt),
                    b.map(wide).as_deref(),
                    1,
                    &mut expected,
                )
                .unwrap();
                let mut got = vec![f32::NAN; 2 * image];
                forward_into(&geo, &x, &wt, b, 1, &mut got).unwrap();
                let tolerance = 1e-5 * (cin * kh * kw) as f64;
                for (i, (&a, &e)) in got.iter().zip(&expected).enumerate() {
                    assert!(
                        (a as f64 - e).abs() <= tolerance,
                        "{geo:?} bias {with_bias}: element {i} is {a}, expected {e}"
                    );
                }
            }
        }
    }

    /// The stride-2 gather equals `step_by(2)` for every length, whole groups of 8 and tails.
    #[test]
    fn every_second_takes_the_even_elements() {
        for len in 0..40 {
            for extra in 0..3 {
                let src: Vec<f32> = (0..(2 * len + extra).max(1)).map(|i| i as f32).collect();
                let n = src.len().div_ceil(2).min(len);
                let mut dst = vec![f32::NAN; n];
                every_second(&src, &mut dst);
                let expected: Vec<f32> = src.iter().step_by(2).take(n).copied().collect();
                assert_eq!(dst, expected, "len {len} extra {extra}");
            }
        }
    }

    fn applies_anywhere() -> bool {
        isa() != Isa::None
    }

    /// The tile is chosen to waste the fewest padded output channels.
    #[test]
    fn tiles_fit_output_channels() {
        let geo = |cout: usize, w: usize| {
            let params = ConvParams::conv2d([1, 1], [1, 1], [1, 1], 1);
            Geometry::new(params, &[1, 3, w, w], &[cout, 3, 3, 3]).unwrap()
        };
        let c = choose(&geo(16, 32), Isa::Avx512).unwrap();
        assert_eq!((c.lanes, c.nv, c.ocb), (16, 2, 8));
        let c = choose(&geo(32, 8), Isa::Avx512).unwrap();
        assert_eq!((c.lanes, c.nv, c.ocb), (8, 1, 16));
        let c = choose(&geo(48, 14), Isa::Avx512).unwrap();
        assert_eq!((c.lanes, c.nv, c.ocb), (16, 1, 24));
        // ResNet's stem: 112 output columns are 7 vectors, not 4 pairs wasting 16 columns.
        let c = choose(&geo(64, 112), Isa::Avx512).unwrap();
        assert_eq!((c.lanes, c.nv, c.ocb), (16, 1, 16));
        let c = choose(&geo(64, 56), Isa::Avx2).unwrap();
        assert_eq!((c.lanes, c.nv, c.ocb), (8, 2, 4));
        assert_eq!(choose(&geo(64, 56), Isa::None), None);
    }
}
