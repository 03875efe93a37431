//! The register tile of the direct f32 convolution: `OCB` output channels by `NV` vectors of
//! one output row, accumulated over a block of input channels and every kernel tap, with the
//! vector type (AVX-512 or AVX2) chosen at run time by the caller.

use crate::simd::Lanes;

/// Where one tile reads and writes. Every pointer is valid for what the tile touches: the
/// caller sized the padded input and the staging rows for whole tiles.
pub(super) struct TileArgs {
    /// The padded input at (first channel of the block, column phase 0, the tile's first
    /// padded row, the tile's first column).
    pub x: *const f32,
    /// Floats between channels of the padded input.
    pub x_channel: usize,
    /// Floats between padded rows.
    pub x_row: usize,
    /// The tile's packed weights at the block's first channel: each kernel tap's `OCB`
    /// output channels side by side (`[taps, OCB]`), taps in the loop's order (channel, row,
    /// column), so that every weight the tile broadcasts is one base register and an
    /// immediate offset away.
    pub w: *const f32,
    pub channels: usize,
    pub kh: usize,
    /// Per kernel column, its offset in the padded input (phase and column).
    pub taps: *const usize,
    pub kw: usize,
    /// Output row of channel `o` of the tile starts at `out + o * out_channel`.
    pub out: *mut f32,
    pub out_channel: usize,
    /// Start from what `out` holds (a later channel block) instead of `init`.
    pub accumulate: bool,
    /// Starting value per output channel of the tile (the bias, or zeros).
    pub init: *const f32,
    /// Store `max(y, 0)` (the last pass over the channels of a convolution with a ReLU).
    pub relu: bool,
}

/// Accumulates one `OCB x (NV * LANES)` tile and stores it.
///
/// # Safety
/// The CPU supports `L`'s instructions; `a`'s pointers are valid as [`TileArgs`] says.
#[inline(always)]
pub(super) unsafe fn tile<L: Lanes, const NV: usize, const OCB: usize>(a: &TileArgs) {
    unsafe {
        let mut acc = [[L::splat(0.0); NV]; OCB];
        for (o, row) in acc.iter_mut().enumerate() {
            for (v, lane) in row.iter_mut().enumerate() {
                *lane = if a.accumulate {
                    L::load(a.out.add(o * a.out_channel + v * L::LANES))
                } else {
                    L::splat(*a.init.add(o))
                };
            }
        }
        let mut w = a.w;
        for c in 0..a.channels {
            for i in 0..a.kh {
                let row = a.x.add(c * a.x_channel + i * a.x_row);
                for j in 0..a.kw {
                    let src = row.add(*a.taps.add(j));
                    let mut xv = [L::splat(0.0); NV];
                    for (v, x) in xv.iter_mut().enumerate() {
                        *x = L::load(src.add(v * L::LANES));
                    }
                    for (o, row) in acc.iter_mut().enumerate() {
                        let wv = L::splat(*w.add(o));
                        for (lane, &x) in row.iter_mut().zip(&xv) {
                            *lane = L::fma(x, wv, *lane);
                        }
                    }
                    w = w.add(OCB);
                }
            }
        }
        for (o, row) in acc.iter().enumerate() {
            for (v, &lane) in row.iter().enumerate() {
                // `max` returns its second operand for NaN: `v > 0 ? v : 0`, as the eager `relu`.
                let lane = if a.relu {
                    L::max(lane, L::splat(0.0))
                } else {
                    lane
                };
                L::store(a.out.add(o * a.out_channel + v * L::LANES), lane);
            }
        }
    }
}
