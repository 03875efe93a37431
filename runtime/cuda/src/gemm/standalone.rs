//! The pure entry points the CUDA backend calls for eager matmuls and convolutions, with no
//! kernel IR around them: [`render_gemm`] for a batched strided product (any transposes, as
//! strides) and [`render_conv`] for an NCHW 2-D convolution (groups, stride, padding,
//! dilation), each with an optional bias, in f16, bf16, f32 or f64. The result says how to
//! launch it: `block` threads (1-D), any grid (the kernel loops over tiles;
//! [`RenderedGemm::grid_for`]), one `.u64` device pointer per entry of `params`, in order.

use super::config::{GemmOptions, MathPath};
use super::element::Element;
use super::epilogue::{OutputIndex, StoreEpilogue};
use super::module_text::{global_bases, module_text};
use super::source::{ConvGeometry, Operand, Source, StridedMatrix};
use super::tile_kernel::TileKernel;
use crate::emit::Emitter;
use crate::index::IntWidth;
use crate::render::entry_name;
use crate::{BLOCKS_PER_MULTIPROCESSOR, CudaError, PtxTarget, Result};
use tessera_tensor::DType;
use tessera_tensor::op::ConvParams;

/// A strided operand: element `(batch, row, col)` at `offset + batch * batch_stride +
/// row * row_stride + col * col_stride` (in elements). A transposed matrix is its strides
/// swapped; a batch broadcast has `batch_stride` 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct StridedOperand {
    pub offset: usize,
    pub batch_stride: usize,
    pub row_stride: usize,
    pub col_stride: usize,
}

impl StridedOperand {
    /// A packed row-major `[batch, rows, cols]` operand.
    pub fn row_major(rows: usize, cols: usize) -> StridedOperand {
        StridedOperand {
            offset: 0,
            batch_stride: rows * cols,
            row_stride: cols,
            col_stride: 1,
        }
    }

    /// One past the largest element index of a `[batch, rows, cols]` view (0 when empty).
    pub fn reach(&self, batch: usize, rows: usize, cols: usize) -> usize {
        if batch == 0 || rows == 0 || cols == 0 {
            return 0;
        }
        self.offset
            + (batch - 1) * self.batch_stride
            + (rows - 1) * self.row_stride
            + (cols - 1) * self.col_stride
            + 1
    }
}

/// `c[b] = a[b] @ b[b] (+ bias)` for `b < batch`, `a[b]` being `m x k` and `b[b]` `k x n`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct GemmSpec {
    /// The entry's name (made a PTX identifier).
    pub name: String,
    pub dtype: DType,
    pub batch: usize,
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub a: StridedOperand,
    pub b: StridedOperand,
    pub c: StridedOperand,
    /// `bias[offset + stride * col]` added to every row.
    pub bias: Option<(usize, usize)>,
    pub options: GemmOptions,
}

/// `out = conv2d(input, weight) (+ bias per output channel)`, all packed NCHW.
#[derive(Debug, Clone, PartialEq)]
pub struct ConvSpec {
    pub name: String,
    pub dtype: DType,
    pub input_shape: [usize; 4],
    pub weight_shape: [usize; 4],
    pub params: ConvParams,
    pub bias: bool,
    pub options: GemmOptions,
}

/// What a standalone kernel's pointer parameter points at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GemmParamRole {
    A,
    B,
    /// The output (written).
    C,
    Bias,
}

/// One `.u64` pointer parameter: its role, element type and the elements it must hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GemmParam {
    pub role: GemmParamRole,
    pub dtype: DType,
    pub len: usize,
}

/// A standalone GEMM or convolution kernel and how to launch it.
#[derive(Debug, Clone, PartialEq)]
pub struct RenderedGemm {
    pub name: String,
    pub ptx: String,
    /// Threads per block (x only).
    pub block: u32,
    /// Output tiles: blocks beyond this many idle.
    pub blocks_needed: u32,
    /// The parameters, in the `.entry`'s order (`buf0`, `buf1`, ...).
    pub params: Vec<GemmParam>,
    pub path: MathPath,
}

impl RenderedGemm {
    /// The grid for a device of `multiprocessors` SMs, as [`crate::RenderedKernel::grid_for`].
    pub fn grid_for(&self, multiprocessors: u32) -> u32 {
        let cap = multiprocessors
            .max(1)
            .saturating_mul(BLOCKS_PER_MULTIPROCESSOR);
        self.blocks_needed.min(cap).max(1)
    }
}

pub(super) fn width_for(counts: &[usize]) -> IntWidth {
    if counts.iter().all(|&c| c < (1 << 31)) {
        IntWidth::U32
    } else {
        IntWidth::U64
    }
}

/// The element type and math path of a standalone `what` (named for errors) in `dtype`.
pub(super) fn choose(
    name: &str,
    what: &str,
    dtype: DType,
    options: GemmOptions,
) -> Result<(Element, MathPath)> {
    let fail = || CudaError::Unsupported {
        kernel: name.to_string(),
        what: format!("{what} of {dtype:?} elements (f16, bf16, f32 and f64 are generated)"),
    };
    let element = Element::of_dtype(dtype).ok_or_else(fail)?;
    let path = MathPath::choose(dtype, options).ok_or_else(fail)?;
    Ok((element, path))
}

/// Renders the batched GEMM `spec` for `target`.
pub fn render_gemm(spec: &GemmSpec, target: &PtxTarget) -> Result<RenderedGemm> {
    let what = format!(
        "a {} x ({}x{} @ {}x{}) GEMM",
        spec.batch, spec.m, spec.k, spec.k, spec.n
    );
    let (element, path) = choose(&spec.name, &what, spec.dtype, spec.options)?;
    let (batch, m, n, k) = (spec.batch, spec.m, spec.n, spec.k);
    let lens = [
        spec.a.reach(batch, m, k),
        spec.b.reach(batch, k, n),
        spec.c.reach(batch, m, n),
        spec.bias
            .map_or(0, |(o, s)| if n == 0 { 0 } else { o + (n - 1) * s + 1 }),
    ];
    let width = width_for(&[
        lens[0],
        lens[1],
        lens[2],
        lens[3],
        batch * m * n,
        m + 64,
        n + 64,
        k + 64,
    ]);
    let mut e = Emitter::default();
    let buffers = 3 + usize::from(spec.bias.is_some());
    let bases = global_bases(&mut e, buffers);
    let tile = TileKernel {
        path,
        width,
        batch,
        m,
        n,
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
            outer_len: m,
            k_len: k,
        },
        b: Operand {
            source: Source::Matrix(StridedMatrix {
                offset: spec.b.offset,
                batch_stride: spec.b.batch_stride,
                outer_stride: spec.b.col_stride,
                k_stride: spec.b.row_stride,
            }),
            base: bases[1],
            element,
            outer_len: n,
            k_len: k,
        },
    };
    let mut epilogue = StoreEpilogue {
        out: bases[2],
        index: OutputIndex::Strided {
            offset: spec.c.offset,
            batch_stride: spec.c.batch_stride,
            row_stride: spec.c.row_stride,
            col_stride: spec.c.col_stride,
        },
        element,
        bias: spec.bias.map(|(o, s)| (bases[3], o, s)),
        width,
    };
    let emitted = tile.emit(&mut e, &mut epilogue);
    let name = entry_name(&spec.name);
    let about = vec![
        "Generated by tessera-cuda: a standalone GEMM.".to_string(),
        format!("{batch} x ({m}x{k} @ {k}x{n}) {:?} on {path:?}", spec.dtype),
    ];
    let ptx = module_text(&name, target, &about, buffers, emitted.shared_bytes, e);
    let mut params = vec![
        GemmParam {
            role: GemmParamRole::A,
            dtype: spec.dtype,
            len: lens[0],
        },
        GemmParam {
            role: GemmParamRole::B,
            dtype: spec.dtype,
            len: lens[1],
        },
        GemmParam {
            role: GemmParamRole::C,
            dtype: spec.dtype,
            len: lens[2],
        },
    ];
    if spec.bias.is_some() {
        params.push(GemmParam {
            role: GemmParamRole::Bias,
            dtype: spec.dtype,
            len: lens[3],
        });
    }
    Ok(RenderedGemm {
        name,
        ptx,
        block: emitted.block,
        blocks_needed: u32::try_from(emitted.tiles).unwrap_or(u32::MAX),
        params,
        path,
    })
}

/// The output shape `[n, c_out, oh, ow]` of `spec`, or why its shapes do not fit together.
pub fn conv_output_shape(spec: &ConvSpec) -> std::result::Result<[usize; 4], String> {
    ConvGeometry::new(spec.input_shape, spec.weight_shape, spec.params).map(|g| g.output_shape())
}

/// Renders the implicit-GEMM convolution `spec` for `target`: per group, the weights
/// (`[c_out / groups, c_in / groups * kh * kw]`) times the input gathered on the fly.
/// Parameters: input, weight, output (packed NCHW), then the bias if any.
pub fn render_conv(spec: &ConvSpec, target: &PtxTarget) -> Result<RenderedGemm> {
    let what = format!(
        "a convolution of {:?} by {:?}",
        spec.input_shape, spec.weight_shape
    );
    let (element, path) = choose(&spec.name, &what, spec.dtype, spec.options)?;
    let geometry =
        ConvGeometry::new(spec.input_shape, spec.weight_shape, spec.params).map_err(|what| {
            CudaError::Unsupported {
                kernel: spec.name.clone(),
                what,
            }
        })?;
    let [n, c_out, oh, ow] = geometry.output_shape();
    let p = spec.params;
    let numel = |s: &[usize]| s.iter().product::<usize>();
    let lens = [
        numel(&spec.input_shape),
        numel(&spec.weight_shape),
        n * c_out * oh * ow,
        c_out,
    ];
    let width = width_for(&[
        lens[0],
        lens[1],
        lens[2],
        geometry.pixels() + 64,
        geometry.k() + 64,
    ]);
    let mut e = Emitter::default();
    let buffers = 3 + usize::from(spec.bias);
    let bases = global_bases(&mut e, buffers);
    let tile = TileKernel {
        path,
        width,
        batch: p.groups,
        m: geometry.group_out(),
        n: geometry.pixels(),
        k: geometry.k(),
        a: Operand {
            source: Source::Matrix(geometry.weight_matrix()),
            base: bases[1],
            element,
            outer_len: geometry.group_out(),
            k_len: geometry.k(),
        },
        b: Operand {
            source: Source::Im2col(geometry),
            base: bases[0],
            element,
            outer_len: geometry.pixels(),
            k_len: geometry.k(),
        },
    };
    let mut epilogue = StoreEpilogue {
        out: bases[2],
        index: OutputIndex::Conv {
            group_out: geometry.group_out(),
            channels: c_out,
            pixels: oh * ow,
        },
        element,
        bias: spec.bias.then(|| (bases[3], 0, 1)),
        width,
    };
    let emitted = tile.emit(&mut e, &mut epilogue);
    let name = entry_name(&spec.name);
    let about = vec![
        "Generated by tessera-cuda: a standalone implicit-GEMM convolution.".to_string(),
        format!(
            "{:?} * {:?}, {p:?}, {:?} on {path:?}",
            spec.input_shape, spec.weight_shape, spec.dtype
        ),
    ];
    let ptx = module_text(&name, target, &about, buffers, emitted.shared_bytes, e);
    let mut params = vec![
        GemmParam {
            role: GemmParamRole::B,
            dtype: spec.dtype,
            len: lens[0],
        },
        GemmParam {
            role: GemmParamRole::A,
            dtype: spec.dtype,
            len: lens[1],
        },
        GemmParam {
            role: GemmParamRole::C,
            dtype: spec.dtype,
            len: lens[2],
        },
    ];
    if spec.bias {
        params.push(GemmParam {
            role: GemmParamRole::Bias,
            dtype: spec.dtype,
            len: lens[3],
        });
    }
    Ok(RenderedGemm {
        name,
        ptx,
        block: emitted.block,
        blocks_needed: u32::try_from(emitted.tiles).unwrap_or(u32::MAX),
        params,
        path,
    })
}
