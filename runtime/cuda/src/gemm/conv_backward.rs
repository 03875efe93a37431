//! The two gradients of a 2-D convolution as standalone implicit GEMMs, one per group, read
//! from packed NCHW tensors by the gathering sources of `source`, nothing materialised:
//! - the input gradient: rows are the group's input channels, columns the input pixels, k the
//!   group's output channels times the kernel taps; A is the weight transposed per group
//!   (given as a strided matrix), B the output gradient gathered per input pixel
//!   ([`Source::Col2im`]: zero in the padding and where a stride skips the pixel);
//! - the weight gradient: rows are the group's output channels, columns its input channels
//!   times the taps, k the output pixels of every image; A is the output gradient per group
//!   (a strided matrix), B the input as im2col transposed ([`Source::Im2colTransposed`]).
//!
//! Each accumulates in the element type's accumulator (f32 for f16/bf16) and stores once: no
//! atomics, so the result does not depend on the launch.

use super::config::GemmOptions;
use super::epilogue::{OutputIndex, StoreEpilogue};
use super::module_text::{global_bases, module_text};
use super::source::{ConvGeometry, Operand, Source, StridedMatrix};
use super::standalone::{
    GemmParam, GemmParamRole, RenderedGemm, StridedOperand, choose, width_for,
};
use super::tile_kernel::TileKernel;
use crate::emit::Emitter;
use crate::render::entry_name;
use crate::{CudaError, PtxTarget, Result};
use tessera_tensor::DType;
use tessera_tensor::op::ConvParams;

/// Which gradient of `conv2d(input, weight)` a [`ConvBackwardSpec`] computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ConvGradient {
    /// `grad_input [n, c_in, h, w]` from the weight (A) and the packed output gradient (B).
    Input,
    /// `grad_weight [c_out, c_in / groups, kh, kw]` from the output gradient (A) and the packed
    /// input (B).
    Weight,
}

/// One gradient of the 2-D convolution of an `input_shape` input by a `weight_shape` weight.
#[derive(Debug, Clone, PartialEq)]
pub struct ConvBackwardSpec {
    pub name: String,
    pub dtype: DType,
    pub gradient: ConvGradient,
    pub input_shape: [usize; 4],
    pub weight_shape: [usize; 4],
    pub params: ConvParams,
    /// Where A's element `(group, row, k)` is. [`ConvGradient::Input`]: the weight transposed,
    /// `w[group * group_out + k / taps, row, tap = k % taps]` (rows: the group's input
    /// channels). [`ConvGradient::Weight`]: the output gradient, `grad_out[image, group *
    /// group_out + row, pixel]` with `k = image * oh * ow + pixel`. [`weight_transposed`] and
    /// [`grad_out_matrix`] give them for packed tensors when they are one strided matrix.
    pub a: StridedOperand,
    pub options: GemmOptions,
}

fn unsupported(spec: &ConvBackwardSpec, what: String) -> CudaError {
    CudaError::Unsupported {
        kernel: spec.name.clone(),
        what,
    }
}

/// The geometry of `spec`'s convolution, or why its shapes do not fit together.
fn geometry(spec: &ConvBackwardSpec) -> Result<ConvGeometry> {
    ConvGeometry::new(spec.input_shape, spec.weight_shape, spec.params)
        .map_err(|what| unsupported(spec, what))
}

/// A's extents: the rows, and the reduced dimension, per group.
fn a_extents(gradient: ConvGradient, g: &ConvGeometry) -> (usize, usize) {
    let taps = g.kh * g.kw;
    match gradient {
        ConvGradient::Input => (g.group_in(), g.group_out() * taps),
        ConvGradient::Weight => (g.group_out(), g.pixels()),
    }
}

/// The packed weight's transpose per group as A of the input gradient, when it is one strided
/// matrix: with one tap (a 1x1 kernel) or one output channel per group; `None` otherwise (pack
/// the weight as `[groups, group_in, group_out, kh, kw]` first, then
/// [`StridedOperand::row_major`] holds).
pub fn weight_transposed(weight_shape: [usize; 4], groups: usize) -> Option<StridedOperand> {
    let [c_out, group_in, kh, kw] = weight_shape;
    let (taps, group_out) = (kh * kw, c_out / groups.max(1));
    (taps == 1 || group_out == 1).then_some(StridedOperand {
        offset: 0,
        batch_stride: group_out * group_in * taps,
        row_stride: taps,
        // k = (channel, tap): the channel's stride when there is one tap, else the tap's.
        col_stride: if taps == 1 { group_in } else { 1 },
    })
}

/// The packed output gradient `[n, c_out, oh, ow]` as A of the weight gradient, when it is one
/// strided matrix (one image); `None` otherwise (pack it as `[groups, group_out, n, oh, ow]`
/// first, then [`StridedOperand::row_major`] holds).
pub fn grad_out_matrix(grad_out_shape: [usize; 4], groups: usize) -> Option<StridedOperand> {
    let [n, c_out, oh, ow] = grad_out_shape;
    let pixels = oh * ow;
    (n == 1).then_some(StridedOperand {
        offset: 0,
        batch_stride: c_out / groups.max(1) * pixels,
        row_stride: pixels,
        col_stride: 1,
    })
}

/// Renders the gradient `spec` asks for, for `target`. Parameters: A, B, C (the gradient,
/// packed), each a `.u64` pointer.
pub fn render_conv_backward(spec: &ConvBackwardSpec, target: &PtxTarget) -> Result<RenderedGemm> {
    let what = format!(
        "the {:?} gradient of a convolution of {:?} by {:?}",
        spec.gradient, spec.input_shape, spec.weight_shape
    );
    let (element, path) = choose(&spec.name, &what, spec.dtype, spec.options)?;
    let g = geometry(spec)?;
    let taps = g.kh * g.kw;
    let (rows, k) = a_extents(spec.gradient, &g);
    let (columns, b_source, b_len, c_len) = match spec.gradient {
        ConvGradient::Input => (
            g.n * g.h * g.w,
            Source::Col2im(g),
            g.n * g.c_out * g.oh * g.ow,
            g.n * g.c_in * g.h * g.w,
        ),
        ConvGradient::Weight => (
            g.group_in() * taps,
            Source::Im2colTransposed(g),
            g.n * g.c_in * g.h * g.w,
            g.c_out * g.group_in() * taps,
        ),
    };
    let a_len = spec.a.reach(g.groups, rows, k);
    let width = width_for(&[
        a_len,
        b_len,
        c_len,
        rows + 64,
        columns + 64,
        k + 64,
        (g.h + g.padding[0]) * g.stride[0] + g.oh * g.stride[0] + 64,
        (g.w + g.padding[1]) * g.stride[1] + g.ow * g.stride[1] + 64,
    ]);
    let mut e = Emitter::default();
    let bases = global_bases(&mut e, 3);
    let tile = TileKernel {
        path,
        width,
        batch: g.groups,
        m: rows,
        n: columns,
        k,
        a: Operand {
            source: Source::Matrix(StridedMatrix {
                offset: spec.a.offset,
                batch_stride: spec.a.batch_stride,
                outer_stride: spec.a.row_stride,
                k_stride: spec.a.col_stride,
            }),
            base: bases[0],
            element,
            outer_len: rows,
            k_len: k,
        },
        b: Operand {
            source: b_source,
            base: bases[1],
            element,
            outer_len: columns,
            k_len: k,
        },
    };
    let index = match spec.gradient {
        ConvGradient::Input => OutputIndex::Conv {
            group_out: g.group_in(),
            channels: g.c_in,
            pixels: g.h * g.w,
        },
        ConvGradient::Weight => OutputIndex::Strided {
            offset: 0,
            batch_stride: g.group_out() * columns,
            row_stride: columns,
            col_stride: 1,
        },
    };
    let mut epilogue = StoreEpilogue {
        out: bases[2],
        index,
        element,
        bias: None,
        width,
    };
    let emitted = tile.emit(&mut e, &mut epilogue);
    let name = entry_name(&spec.name);
    let about = vec![
        format!(
            "Generated by tessera-cuda: the {:?} gradient of a convolution as an implicit GEMM.",
            spec.gradient
        ),
        format!(
            "{:?} * {:?}, {:?}, {:?} on {path:?}",
            spec.input_shape, spec.weight_shape, spec.params, spec.dtype
        ),
    ];
    let ptx = module_text(&name, target, &about, 3, emitted.shared_bytes, e);
    let param = |role, len| GemmParam {
        role,
        dtype: spec.dtype,
        len,
    };
    Ok(RenderedGemm {
        name,
        ptx,
        block: emitted.block,
        blocks_needed: u32::try_from(emitted.tiles).unwrap_or(u32::MAX),
        params: vec![
            param(GemmParamRole::A, a_len),
            param(GemmParamRole::B, b_len),
            param(GemmParamRole::C, c_len),
        ],
        path,
    })
}
