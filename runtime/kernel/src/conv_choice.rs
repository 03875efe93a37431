//! Which algorithm a convolution call runs, chosen per convolution when a program is lowered:
//! a Winograd convolution (F(4x4,3x3) or F(2x2,3x3)) for 3x3 stride-1 convolutions where the
//! cost rule below estimates it faster than the eager kernel (direct or im2col + GEMM), else
//! the eager kernel. The rule depends on one image's sizes only, never the batch, so that a
//! program lowered for another batch chooses alike (the dynamic batch).
//!
//! The rule, in multiply-adds of a large GEMM per image: the eager kernel costs its `9 C_in
//! C_out oH oW` multiply-adds; Winograd costs its `points C_in C_out tiles` multiply-adds,
//! plus its input and output transforms (`points (C_in + C_out) tiles` values written and read
//! again, [`TRANSFORM_COST`] each), plus streaming the transformed weights, `points C_in
//! C_out` values read once per image ([`WEIGHT_COST`] each: at batch 1 they come from memory,
//! 4x the weight of the 3x3 kernel for F(4x4)), plus a narrow GEMM's lost throughput when an
//! image has fewer than [`FULL_TILES`] tiles. Winograd is chosen when its estimate is below
//! [`MARGIN`] times the eager one, and only with [`MIN_CHANNELS`] input and output channels
//! or more: with fewer, the per-point GEMMs are too thin and the eager kernel is the direct
//! convolution, faster than any GEMM. The constants were measured on this project's 2-core
//! AVX2 machine (BENCHMARKS.md, "Winograd convolutions").

use crate::ConvAlgorithm;
use std::fmt;
use tessera_tensor::op::{ConvParams, WinogradTile, winograd_applies};

/// Whether the lowering may run convolutions as Winograd convolutions.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum WinogradPolicy {
    /// Never: every convolution call runs the eager kernel. The default of
    /// [`crate::LowerOptions`], for a device backend renders the call itself.
    #[default]
    Off,
    /// Where the cost rule estimates it faster (what `CompileOptions` asks for on the CPU).
    Auto,
    /// With this tile wherever it applies (3x3, stride 1, dilation 1, one group).
    Always(WinogradTile),
}

/// The algorithm chosen for the convolution of graph node `node`, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct ConvChoice {
    pub node: String,
    pub algorithm: ConvAlgorithm,
    pub reason: String,
}

impl fmt::Display for ConvChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "%{}: {} ({})", self.node, self.algorithm, self.reason)
    }
}

/// What one transformed value costs, written by one transform and read by the next step, in
/// multiply-adds of a large GEMM.
pub const TRANSFORM_COST: f64 = 2.0;
/// What streaming one transformed weight from memory costs, in multiply-adds.
pub const WEIGHT_COST: f64 = 4.0;
/// Tiles per image from which the per-point GEMMs run at full rate; fewer columns leave
/// the GEMM's register tile partly empty.
pub const FULL_TILES: f64 = 16.0;
/// Input and output channels a Winograd convolution needs at least (measured: 32 channels
/// on 16x16 images ran 1.4x slower than the direct kernel, 64 channels 1.3x faster).
pub const MIN_CHANNELS: usize = 48;
/// Winograd must be estimated below this fraction of the eager kernel's cost.
pub const MARGIN: f64 = 0.8;

/// One image's sizes of a convolution: `[C_in, H, W]` in, `[C_out, oH, oW]` out.
#[derive(Debug, Clone, Copy)]
pub struct ImageSizes {
    pub c_in: usize,
    pub c_out: usize,
    pub oh: usize,
    pub ow: usize,
}

/// The eager kernel's estimated cost for one image.
pub fn eager_cost(s: ImageSizes) -> f64 {
    9.0 * (s.c_in * s.c_out * s.oh * s.ow) as f64
}

/// Winograd's estimated cost with `tile` for one image.
pub fn winograd_cost(tile: WinogradTile, s: ImageSizes) -> f64 {
    let points = tile.points() as f64;
    let tiles = tile.tiles(s.oh, s.ow) as f64;
    let (ci, co) = (s.c_in as f64, s.c_out as f64);
    let narrow = (FULL_TILES / tiles).max(1.0);
    points * ci * co * tiles * narrow
        + points * (ci + co) * tiles * TRANSFORM_COST
        + points * ci * co * WEIGHT_COST
}

/// Chooses the algorithm for the convolution of `node` with `params`, weight shape `w_shape`,
/// per-image `sizes`, under `policy`.
pub fn choose(
    node: &str,
    policy: WinogradPolicy,
    params: &ConvParams,
    w_shape: &[usize],
    sizes: ImageSizes,
) -> ConvChoice {
    let choice = |algorithm, reason: String| ConvChoice {
        node: node.to_string(),
        algorithm,
        reason,
    };
    if !winograd_applies(params, w_shape) {
        return choice(
            ConvAlgorithm::Gemm,
            "Winograd takes 3x3 kernels with stride 1, dilation 1 and one group".into(),
        );
    }
    let tile = match policy {
        WinogradPolicy::Off => return choice(ConvAlgorithm::Gemm, "Winograd is off".into()),
        WinogradPolicy::Always(tile) => {
            return choice(ConvAlgorithm::Winograd(tile), "asked for".into());
        }
        WinogradPolicy::Auto => {
            let f4 = winograd_cost(WinogradTile::F4x4, sizes);
            let f2 = winograd_cost(WinogradTile::F2x2, sizes);
            if f4 <= f2 {
                (WinogradTile::F4x4, f4)
            } else {
                (WinogradTile::F2x2, f2)
            }
        }
    };
    if sizes.c_in < MIN_CHANNELS || sizes.c_out < MIN_CHANNELS {
        return choice(
            ConvAlgorithm::Gemm,
            format!(
                "{} input and {} output channels: Winograd needs {MIN_CHANNELS} of each",
                sizes.c_in, sizes.c_out
            ),
        );
    }
    let eager = eager_cost(sizes);
    let mega = |c: f64| c / 1e6;
    let estimate = format!(
        "estimated {:.2}M multiply-adds per image against {:.2}M for the eager kernel",
        mega(tile.1),
        mega(eager)
    );
    if tile.1 < MARGIN * eager {
        choice(ConvAlgorithm::Winograd(tile.0), estimate)
    } else {
        choice(
            ConvAlgorithm::Gemm,
            format!("Winograd {} {estimate}", tile.0),
        )
    }
}
