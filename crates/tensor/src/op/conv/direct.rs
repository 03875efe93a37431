//! Direct f32 convolution of packed NCHW images, vectorised along output rows: each image is
//! copied once into a zero-padded input (a strided convolution's columns split by phase, so
//! that every tap reads contiguous lanes), and register tiles of output channels by output
//! columns accumulate `x * w` over channels and taps with no patch matrix. Used instead of
//! im2col + GEMM where an x86 vector unit with FMA is found at run time.

use super::Geometry;
use super::direct_pad::{PadBuffer, Padded, grow, pad_image};
use super::direct_tile::{TileArgs, tile};
use super::stage::{ConvStage, pool_rows};
use crate::buffer_cache::{recycle, try_uninit_buffer};
use crate::simd::{Isa, Lanes, isa};
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
    /// The last pass stores `max(y, 0)`.
    relu: bool,
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
                            relu: self.relu && c0 + channels == self.channels,
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
    use crate::simd::{Ymm, Zmm};
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
    /// What the call does to its rows before it writes them.
    stage: ConvStage,
    /// The written planes' size (the output's, or the pooled output's).
    plane: [usize; 2],
    out: Shared,
}

thread_local! {
    /// A thread's padded image, kept between images and calls.
    static PADDED: std::cell::RefCell<PadBuffer> = std::cell::RefCell::new(PadBuffer::default());
    /// A thread's staging area of whole tiles, kept between calls.
    static STAGING: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

impl Call<'_> {
    /// Output rows `rows` of block `block` of image `image` (of the call's output), from the
    /// image's padded input `xp`; with a max pool, `rows` are whole windows' rows.
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
        // Whole tiles of a whole block go straight to the output; others through a stage, as
        // do rows to pool.
        let direct = tiles * c.width() == g.ow
            && first_channel + c.ocb <= g.c_out
            && self.stage.max_pool.is_none();
        if direct {
            let at = ((image * g.c_out + first_channel) * g.oh + rows.start) * g.ow;
            // SAFETY: `at` lies in the output (image < images, the band's first row < oH).
            let out = unsafe { self.out.get().add(at) };
            self.sweep(xp, first_channel, rows, out, g.ow, g.oh * g.ow);
            return Ok(());
        }
        STAGING.with_borrow_mut(|stage| {
            let row = tiles * c.width();
            let channel = rows.len() * row;
            grow(stage, c.ocb * channel)?;
            self.sweep(
                xp,
                first_channel,
                rows.clone(),
                stage.as_mut_ptr(),
                row,
                channel,
            );
            let [ph, pw] = self.plane;
            for o in 0..c.ocb.min(g.c_out - first_channel) {
                let src = &stage[o * channel..][..channel];
                let plane = (image * g.c_out + first_channel + o) * ph * pw;
                if let Some(window) = self.stage.max_pool {
                    let (first, count) = (rows.start / window[0], rows.len() / window[0]);
                    // SAFETY: pooled rows `first..first + count` of this channel of this image
                    // lie in the output; only this task writes them.
                    let dst = unsafe {
                        std::slice::from_raw_parts_mut(
                            self.out.get().add(plane + first * pw),
                            count * pw,
                        )
                    };
                    pool_rows(src, row, window, dst, pw);
                    continue;
                }
                for (r, oy) in rows.clone().enumerate() {
                    // SAFETY: row `oy < oH` of this channel of this image lies in the output;
                    // only this task writes it.
                    unsafe {
                        std::ptr::copy_nonoverlapping(
                            src[r * row..].as_ptr(),
                            self.out.get().add(plane + oy * g.ow),
                            g.ow,
                        );
                    }
                }
            }
            Ok(())
        })
    }

    /// Sweeps rows `rows` of the block of output channels from `first_channel` into `out`:
    /// channel `o`, row `r` of the band at `out + o * out_channel + r * out_row`.
    fn sweep(
        &self,
        xp: &[f32],
        first_channel: usize,
        rows: std::ops::Range<usize>,
        out: *mut f32,
        out_row: usize,
        out_channel: usize,
    ) {
        let (g, c) = (self.g, self.c);
        let k_taps = g.kh * g.kw;
        let s = Sweep {
            x: xp.as_ptr(),
            padded: self.padded,
            w: self.w[first_channel * g.c_in * k_taps..].as_ptr(),
            taps: self.taps,
            init: self.init[first_channel..].as_ptr(),
            channels: g.c_in,
            channel_block: self.channel_block,
            relu: self.stage.relu,
            kh: g.kh,
            kw: g.kw,
            stride: g.params.stride,
            rows,
            tiles: g.ow.div_ceil(c.width()),
            width: c.width(),
            stage: out,
            stage_row: out_row,
            stage_channel: out_channel,
        };
        // SAFETY: `c` was chosen for this CPU; `xp` holds the image's padded input, every row
        // and column of whole tiles (`Padded::new`); the weights hold every channel of the
        // block's `ocb` output channels (the last block padded); `out` is a staging area of
        // whole tiles, or, for whole tiles of a whole block, the output: this task's channels
        // and rows, which no other task writes.
        unsafe { sweep(c, &s) };
    }
}

/// The images `first..` of `y = stage(conv(x, w) + bias)` into `out` (a whole number of packed
/// staged images), as `lowering::forward_into`; the caller checked [`applies`].
pub(super) fn forward_into(
    g: &Geometry,
    x: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    stage: ConvStage,
    first: usize,
    out: &mut [f32],
) -> crate::Result<()> {
    let Some(c) = choose(g, isa()) else {
        return Err(crate::TensorError::invalid(
            "conv2d",
            "the direct convolution needs AVX2 and FMA",
        ));
    };
    let [ph, pw] = stage.plane([g.oh, g.ow]);
    let in_image = g.c_in * g.h * g.w;
    let images = out.len().checked_div(g.c_out * ph * pw).unwrap_or(0);
    if images == 0 {
        return Ok(());
    }
    // The rows computed: every row, or those of whole pooling windows.
    let (rows, window_rows) = match stage.max_pool {
        Some([kh, _]) => (ph * kh, kh),
        None => (g.oh, 1),
    };
    let padded = Padded::new(g, c.width());
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
        stage,
        plane: [ph, pw],
        out: Shared(out.as_mut_ptr()),
    };
    let image_len = g.c_in * padded.channel();
    let threads = rayon::current_num_threads();
    if images >= threads {
        // One task per image: its padded input is made in the thread's own buffer, in cache
        // for every block of output channels.
        return (0..images).into_par_iter().try_for_each(|image| {
            PADDED.with_borrow_mut(|pad| {
                let xp = pad.fill(g, padded, &x[(first + image) * in_image..][..in_image])?;
                (0..blocks).try_for_each(|block| call.task(xp, image, block, 0..rows))
            })
        });
    }
    // Few images: padded once, shared by tasks of bands of rows (of whole windows) of every
    // block.
    let mut xp = try_uninit_buffer::<f32>("conv2d", images * image_len)?;
    xp.par_chunks_mut(padded.channel())
        .enumerate()
        .for_each(|(i, dst)| {
            let (image, channel) = (i / g.c_in, i % g.c_in);
            let plane = g.h * g.w;
            let src = &x[(first + image) * in_image + channel * plane..][..plane];
            pad_image(g, padded, src, dst);
        });
    let windows = rows / window_rows;
    let bands = (4 * threads).div_ceil(images * blocks).clamp(1, windows);
    let band = windows.div_ceil(bands);
    let bands = windows.div_ceil(band);
    (0..images * blocks * bands)
        .into_par_iter()
        .try_for_each(|task| {
            let (image, rest) = (task / (blocks * bands), task % (blocks * bands));
            let (block, b) = (rest / bands, rest % bands);
            let band_rows = b * band * window_rows..((b + 1) * band).min(windows) * window_rows;
            call.task(
                &xp[image * image_len..][..image_len],
                image,
                block,
                band_rows,
            )
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
                forward_into(&geo, &x, &wt, b, ConvStage::default(), 1, &mut got).unwrap();
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
