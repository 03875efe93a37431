//! Winograd convolution F(m x m, 3 x 3) of packed NCHW images, for 3x3 kernels with stride 1,
//! dilation 1 and one group (Lavin and Gray, 2015): each `m x m` output tile is
//! `A^T [U ⊙ (B^T d B)] A` for its `(m+2) x (m+2)` input tile `d`, where `U = G g G^T` is the
//! kernel `g` transformed once ([`winograd_weights_into`]). The sum over input channels of the
//! elementwise products is one matrix product per transform point (`(m+2)^2` GEMMs of
//! `[C_out, C_in] x [C_in, tiles]` through the `gemm` crate, by blocks of 64 output channels),
//! so a tile costs `(m+2)^2` multiplies per channel pair instead of `9 m^2`: 2.25x fewer for
//! F(2x2), 4x for F(4x4). Transforms run over bands of consecutive tile rows, vectorised across
//! the band's tiles.
//!
//! The transformed weights are stored by blocks of [`CHANNEL_BLOCK`] output channels, each
//! block a packed `[C_in, 64]` matrix: read whole by the GEMM, a block is one contiguous
//! stream. When a call has few tiles (up to [`NARROW_COLUMNS`], the deep layers of a network at
//! batch 1, whose weights are streamed from memory once per call and multiply only a few
//! tiles each), each block's product is computed transposed, `[tiles, 64]`, so that the GEMM's
//! register tile runs along the 64 channels instead of the few tiles: 1.1-1.3x faster on
//! ResNet-18's 14x14 and 7x7 layers (BENCHMARKS.md). The output transform reads those products
//! with a stride between tiles.
//!
//! Accuracy: the transforms' constants (G holds 1/6, 1/12, 1/24 for F(4x4)) make the f32
//! result differ from a direct convolution by more than rounding alone; the tests bound it.

mod tiles;

use super::{ConvParams, Geometry};
use crate::buffer_cache::{recycle, try_uninit_buffer};
use crate::op::matmul::{MatrixRef, gemm_into};
use crate::{Float, Result, Tensor, TensorError};
use rayon::prelude::*;
use tiles::{F2, F4, Transform, input_tiles, output_tiles};

/// The output tile of a Winograd convolution.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WinogradTile {
    /// F(2x2, 3x3): 4x4 input tiles, 16 transform points.
    F2x2,
    /// F(4x4, 3x3): 6x6 input tiles, 36 transform points.
    F4x4,
}

impl WinogradTile {
    /// Output rows (and columns) per tile, `m`.
    pub fn output(self) -> usize {
        match self {
            WinogradTile::F2x2 => 2,
            WinogradTile::F4x4 => 4,
        }
    }

    /// Input rows (and columns) per tile, `m + 2`.
    pub fn input(self) -> usize {
        self.output() + 2
    }

    /// Transform points per tile, `(m + 2)^2`: the GEMMs of one convolution.
    pub fn points(self) -> usize {
        self.input() * self.input()
    }

    /// Tiles covering an `oh x ow` output.
    pub fn tiles(self, oh: usize, ow: usize) -> usize {
        oh.div_ceil(self.output()) * ow.div_ceil(self.output())
    }

    /// `F(2x2,3x3)` or `F(4x4,3x3)`.
    pub fn name(self) -> &'static str {
        match self {
            WinogradTile::F2x2 => "F(2x2,3x3)",
            WinogradTile::F4x4 => "F(4x4,3x3)",
        }
    }
}

impl std::fmt::Display for WinogradTile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Whether a Winograd convolution computes `params` with a weight of shape `w_shape`: 2-D,
/// a 3x3 kernel, stride 1, dilation 1, one group.
pub fn winograd_applies(params: &ConvParams, w_shape: &[usize]) -> bool {
    params.spatial_dims == 2
        && w_shape.len() == 4
        && w_shape[2] == 3
        && w_shape[3] == 3
        && params.stride == [1, 1]
        && params.dilation == [1, 1]
        && params.groups == 1
}

/// Output channels per block of the transformed weights.
pub const CHANNEL_BLOCK: usize = 64;

/// Tiles a call holds at most (images times tiles per image) for its products to be computed
/// transposed, along the output channels (module documentation).
const NARROW_COLUMNS: usize = 32;

/// The shape of the transformed weights of a `[C_out, C_in, 3, 3]` weight: `[points, blocks,
/// C_in, 64]`: per transform point, the transposed `C_in x C_out` matrix in blocks of
/// [`CHANNEL_BLOCK`] output channels (`blocks = ceil(C_out / 64)`), each block packed and the
/// last one padded with zeros.
pub fn winograd_weight_shape(tile: WinogradTile, w_shape: &[usize]) -> [usize; 4] {
    let (co, ci) = (
        w_shape.first().copied().unwrap_or(0),
        w_shape.get(1).copied().unwrap_or(0),
    );
    [tile.points(), co.div_ceil(CHANNEL_BLOCK), ci, CHANNEL_BLOCK]
}

/// The kernel transform `G g G^T` for one 3x3 kernel `g` (computed in f64), point `i * (m+2)
/// + k` at index `i * (m+2) + k`.
fn transform_kernel(tile: WinogradTile, g: [f64; 9], u: &mut [f64; 36]) {
    const G2: [[f64; 3]; 4] = [
        [1.0, 0.0, 0.0],
        [0.5, 0.5, 0.5],
        [0.5, -0.5, 0.5],
        [0.0, 0.0, 1.0],
    ];
    const G4: [[f64; 3]; 6] = [
        [1.0 / 4.0, 0.0, 0.0],
        [-1.0 / 6.0, -1.0 / 6.0, -1.0 / 6.0],
        [-1.0 / 6.0, 1.0 / 6.0, -1.0 / 6.0],
        [1.0 / 24.0, 1.0 / 12.0, 1.0 / 6.0],
        [1.0 / 24.0, -1.0 / 12.0, 1.0 / 6.0],
        [0.0, 0.0, 1.0],
    ];
    let gm: &[[f64; 3]] = match tile {
        WinogradTile::F2x2 => &G2,
        WinogradTile::F4x4 => &G4,
    };
    let a = gm.len();
    // (G g) is a x 3, then (G g) G^T is a x a.
    let mut gg = [[0.0f64; 3]; 6];
    for (i, row) in gm.iter().enumerate() {
        for c in 0..3 {
            gg[i][c] = (0..3).map(|r| row[r] * g[r * 3 + c]).sum();
        }
    }
    for i in 0..a {
        for (k, row) in gm.iter().enumerate() {
            u[i * a + k] = (0..3).map(|c| gg[i][c] * row[c]).sum();
        }
    }
}

/// `u[points, blocks, C_in, 64]` = the transform of every 3x3 kernel of `w[C_out, C_in, 3,
/// 3]`, output channel `o` at column `o % 64` of block `o / 64` ([`winograd_weight_shape`]).
pub fn winograd_weights_into<T: Float>(
    tile: WinogradTile,
    w_shape: &[usize],
    w: &[T],
    u: &mut [T],
) -> Result<()> {
    let [points, blocks, ci, block] = winograd_weight_shape(tile, w_shape);
    let co = w_shape.first().copied().unwrap_or(0);
    let pairs = co.checked_mul(ci);
    let u_len = [points, blocks, ci, block]
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d));
    let fits = w_shape.len() == 4
        && w_shape[2..] == [3, 3]
        && pairs.and_then(|p| p.checked_mul(9)) == Some(w.len())
        && u_len == Some(u.len());
    if !fits {
        return Err(TensorError::invalid(
            "winograd_weights",
            format!(
                "a weight of shape {w_shape:?} ({} elements) does not transform into {} \
                 elements for {tile}",
                w.len(),
                u.len()
            ),
        ));
    }
    let plane = blocks * ci * block;
    // The padding of the last block multiplies to zeros.
    u.fill(T::zero());
    let mut kernel = [0.0f64; 9];
    let mut out = [0.0f64; 36];
    for (pair, g) in w.chunks_exact(9).enumerate() {
        let (o, c) = (pair / ci.max(1), pair % ci.max(1));
        for (k, &v) in kernel.iter_mut().zip(g) {
            *k = v.to_f64().unwrap_or(f64::NAN);
        }
        transform_kernel(tile, kernel, &mut out);
        let at = ((o / block) * ci + c) * block + o % block;
        for (p, &v) in out[..points].iter().enumerate() {
            u[p * plane + at] = T::from(v).unwrap_or_else(T::nan);
        }
    }
    Ok(())
}

/// The transformed weights of `w` (`[C_out, C_in, 3, 3]`, f32 or f64) as a packed tensor of
/// [`winograd_weight_shape`].
pub fn winograd_weights(tile: WinogradTile, w: &Tensor) -> Result<Tensor> {
    let shape = w.shape();
    let out_shape = winograd_weight_shape(tile, &shape);
    let len = out_shape.iter().product();
    let t = crate::cpu::float_dispatch!(w.dtype(), "winograd_weights", T => {
        let mut u = try_uninit_buffer::<T>("winograd_weights", len)?;
        w.with_slice(|s: &[T]| winograd_weights_into(tile, &shape, s, &mut u))??;
        Tensor::from_vec(u, &out_shape)?
    });
    Ok(t)
}

/// The sizes of one call.
#[derive(Debug, Clone, Copy)]
pub(super) struct Plan {
    pub(super) g: Geometry,
    /// Tile rows and columns per image.
    pub(super) tiles_y: usize,
    pub(super) tiles_x: usize,
    /// Tiles (GEMM columns) of the whole block of images.
    pub(super) columns: usize,
    /// Whether the products are computed transposed, per point and block of output channels
    /// `[columns, block width]`, rather than `[C_out, columns]` (at most [`NARROW_COLUMNS`]
    /// columns).
    pub(super) narrow: bool,
}

impl Plan {
    pub(super) fn tiles(&self) -> usize {
        self.tiles_y * self.tiles_x
    }

    /// Output channel blocks of the transformed weights.
    fn blocks(&self) -> usize {
        self.g.c_out.div_ceil(CHANNEL_BLOCK)
    }

    /// Output channels of block `b`: 64 but in the last block.
    fn block_width(&self, b: usize) -> usize {
        CHANNEL_BLOCK.min(self.g.c_out - b * CHANNEL_BLOCK)
    }

    /// Elements of one transform point's products (both layouts hold `C_out x columns`).
    pub(super) fn point_len(&self) -> usize {
        self.g.c_out * self.columns
    }

    /// Where point 0's product of output channel `o` and column `column` lies.
    pub(super) fn product_at(&self, o: usize, column: usize) -> usize {
        if self.narrow {
            let b = o / CHANNEL_BLOCK;
            b * CHANNEL_BLOCK * self.columns + column * self.block_width(b) + o % CHANNEL_BLOCK
        } else {
            o * self.columns + column
        }
    }

    /// The distance between the products of output channel `o` at consecutive columns.
    pub(super) fn column_step(&self, o: usize) -> usize {
        if self.narrow {
            self.block_width(o / CHANNEL_BLOCK)
        } else {
            1
        }
    }
}

/// A raw pointer the tasks share; each task writes a region no other task touches.
#[derive(Clone, Copy)]
pub(super) struct Shared<T>(*mut T);
// SAFETY: the tasks that receive it write disjoint regions (see each use).
unsafe impl<T> Send for Shared<T> {}
unsafe impl<T> Sync for Shared<T> {}

impl<T> Shared<T> {
    /// The pointer (a method, so that closures capture the `Send` wrapper, not its field).
    pub(super) fn get(&self) -> *mut T {
        self.0
    }
}

/// The images `images` of `conv2d(x, w)` (no bias) for `x` `[N, C_in, H, W]` packed and `u`
/// the transformed weights of `w` ([`winograd_weights_into`]), written packed into `out`
/// (exactly those images' outputs).
#[allow(clippy::too_many_arguments)] // the call's shapes, operands and images, as given
pub fn conv2d_winograd_images_into<T: Float>(
    tile: WinogradTile,
    params: ConvParams,
    x_shape: &[usize],
    w_shape: &[usize],
    x: &[T],
    u: &[T],
    images: std::ops::Range<usize>,
    out: &mut [T],
) -> Result<()> {
    let g = Geometry::new(params, x_shape, w_shape)?;
    let image_len = g.c_out * g.oh * g.ow;
    let u_len = winograd_weight_shape(tile, w_shape)
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d));
    let fits = winograd_applies(&params, w_shape)
        && x.len() >= crate::size::saturating_numel(x_shape)
        && Some(u.len()) == u_len
        && images.start <= images.end
        && images.end <= g.n
        && out.len() == images.len().saturating_mul(image_len);
    if !fits {
        return Err(TensorError::invalid(
            "conv2d_winograd",
            format!(
                "images {images:?} of input {x_shape:?} and weight {w_shape:?} ({tile}, \
                 params {params:?}) do not fit buffers of {}, {} and {} elements",
                x.len(),
                u.len(),
                out.len()
            ),
        ));
    }
    if image_len == 0 || images.is_empty() {
        return Ok(());
    }
    let tiles = tile.tiles(g.oh, g.ow);
    let plan = Plan {
        g,
        tiles_y: g.oh.div_ceil(tile.output()),
        tiles_x: g.ow.div_ceil(tile.output()),
        columns: images.len() * tiles,
        narrow: images.len() * tiles <= NARROW_COLUMNS,
    };
    debug_assert_eq!(plan.tiles(), tiles);
    match tile {
        WinogradTile::F2x2 => convolve::<F2, T>(&plan, x, u, images.start, out),
        WinogradTile::F4x4 => convolve::<F4, T>(&plan, x, u, images.start, out),
    }
}

/// Whether the transforms can run compiled for AVX2 and FMA (wider vectors than the baseline's).
fn has_avx2() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// [`input_tiles`] compiled for AVX2 and FMA.
///
/// # Safety
/// The CPU has them; as [`input_tiles`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn input_tiles_avx2<F: Transform, T: Float>(
    p: &Plan,
    x: &[T],
    c: usize,
    first: usize,
    v: Shared<T>,
) {
    // SAFETY: forwarded from the caller.
    unsafe { input_tiles::<F, T>(p, x, c, first, v) }
}

/// [`output_tiles`] compiled for AVX2 and FMA.
///
/// # Safety
/// The CPU has them.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn output_tiles_avx2<F: Transform, T: Float>(
    p: &Plan,
    mm: &[T],
    o: usize,
    first: usize,
    y: &mut [T],
) {
    output_tiles::<F, T>(p, mm, o, first, y)
}

/// Input transform, one GEMM per point, output transform, each phase shared out across
/// the thread pool.
fn convolve<F: Transform, T: Float>(
    p: &Plan,
    x: &[T],
    u: &[T],
    first_image: usize,
    out: &mut [T],
) -> Result<()> {
    let g = &p.g;
    let points = F::A * F::A;
    let images = p.columns / p.tiles();
    let mut v = try_uninit_buffer::<T>("conv2d_winograd", points * g.c_in * p.columns)?;
    let mut mm = try_uninit_buffer::<T>("conv2d_winograd", points * p.point_len())?;
    let plane = g.h * g.w;
    let avx2 = has_avx2();
    let vs = Shared(v.as_mut_ptr());
    (0..images * g.c_in).into_par_iter().for_each(|task| {
        let (image, c) = (task / g.c_in, task % g.c_in);
        let xc = &x[((first_image + image) * g.c_in + c) * plane..][..plane];
        // SAFETY: `v` holds points * C_in * columns elements; this task alone writes channel
        // `c`'s columns of image `image`; `has_avx2` found the instructions the AVX2 entry
        // needs.
        unsafe {
            #[cfg(target_arch = "x86_64")]
            if avx2 {
                return input_tiles_avx2::<F, T>(p, xc, c, image * p.tiles(), vs);
            }
            input_tiles::<F, T>(p, xc, c, image * p.tiles(), vs)
        };
    });
    let (ci, n, block) = (g.c_in, p.columns, CHANNEL_BLOCK);
    mm.par_chunks_mut(p.point_len())
        .enumerate()
        .for_each(|(point, dst)| {
            let columns = MatrixRef {
                offset: point * ci * n,
                row_stride: n,
                col_stride: 1,
            };
            for b in 0..p.blocks() {
                // Block b of the point's weights: `[C_in, 64]`, packed.
                let weights = MatrixRef {
                    offset: (point * p.blocks() + b) * ci * block,
                    row_stride: block,
                    col_stride: 1,
                };
                // The block's channels (the last block's padding is never multiplied).
                let width = p.block_width(b);
                let out = &mut dst[b * block * n..][..width * n];
                if p.narrow {
                    // `[columns, width] = V^T [columns, C_in] @ U_b [C_in, width]`.
                    let transposed = MatrixRef {
                        row_stride: 1,
                        col_stride: n,
                        ..columns
                    };
                    let dims = (n, width, ci);
                    gemm_into(out, &v, transposed, u, weights, dims, false, false);
                } else {
                    // Rows `64 b..` of `[C_out, columns] = U_b^T [C_out, C_in] @ V`.
                    let transposed = MatrixRef {
                        row_stride: 1,
                        col_stride: block,
                        ..weights
                    };
                    gemm_into(
                        out,
                        u,
                        transposed,
                        &v,
                        columns,
                        (width, n, ci),
                        false,
                        false,
                    );
                }
            }
        });
    let out_plane = g.oh * g.ow;
    out.par_chunks_mut(out_plane)
        .enumerate()
        .for_each(|(task, y)| {
            let (image, o) = (task / g.c_out, task % g.c_out);
            #[cfg(target_arch = "x86_64")]
            if avx2 {
                // SAFETY: `has_avx2` found the instructions.
                return unsafe { output_tiles_avx2::<F, T>(p, &mm, o, image * p.tiles(), y) };
            }
            output_tiles::<F, T>(p, &mm, o, image * p.tiles(), y);
        });
    recycle(v);
    recycle(mm);
    Ok(())
}
