//! Kernels of the kernel IR that start with an external GEMM ([`tessera_kernel::GemmCall`])
//! or convolution ([`tessera_kernel::ConvCall`]) call, rendered as one tile kernel whose
//! epilogue is the kernel's own DAG: the product is never written to the scratch buffer (which
//! stays a parameter, unused, so the launch is the same as for any kernel); every load of the
//! scratch at the output point reads the accumulator instead.

use super::config::{GemmOptions, MathPath};
use super::element::Element;
use super::epilogue::{KernelEpilogue, PointMap};
use super::module_text::module_text;
use super::source::{ConvGeometry, Operand, Source, StridedMatrix};
use super::tile_kernel::TileKernel;
use crate::body::Body;
use crate::index::IntWidth;
use crate::render::entry_name;
use crate::{CudaError, PtxTarget, RenderedKernel, Result};
use tessera_kernel::{BufferId, Expr, Kernel, ValueId};

/// Renders `kernel`, which has a GEMM or convolution call.
pub(crate) fn render_call(
    kernel: &Kernel,
    target: &PtxTarget,
    options: GemmOptions,
) -> Result<RenderedKernel> {
    let unsupported = |what: String| CudaError::Unsupported {
        kernel: kernel.name.clone(),
        what,
    };
    let name = entry_name(&kernel.name);
    let width = IntWidth::of(kernel);
    let body = Body::new(kernel, width);
    let (mut e, bases) = (body.e, body.bases);
    let (scratch, tile, map, about) = if let Some(g) = &kernel.gemm {
        let ty = kernel.buffer(g.out).ty;
        let element = Element::of_scalar(ty)
            .ok_or_else(|| unsupported(format!("a GEMM of {ty} elements")))?;
        let (rows, n, _) = kernel.gemm_shape().unwrap_or((0, 0, 1));
        let path = MathPath::choose(element.dtype(), options)
            .ok_or_else(|| unsupported(format!("a GEMM of {ty} elements")))?;
        let (ai, bi) = (g.a_index, g.b_index);
        let tile = TileKernel {
            path,
            width,
            batch: 1,
            m: rows,
            n,
            k: g.k,
            a: Operand {
                source: Source::Matrix(StridedMatrix {
                    offset: ai.offset,
                    batch_stride: 0,
                    outer_stride: ai.row_stride,
                    k_stride: ai.col_stride,
                }),
                base: bases[g.a.index()],
                element,
                outer_len: rows,
                k_len: g.k,
            },
            b: Operand {
                source: Source::Matrix(StridedMatrix {
                    offset: bi.offset,
                    batch_stride: 0,
                    outer_stride: bi.col_stride,
                    k_stride: bi.row_stride,
                }),
                base: bases[g.b.index()],
                element,
                outer_len: n,
                k_len: g.k,
            },
        };
        let about = format!("GEMM {rows}x{n}x{} on {path:?}, fused epilogue", g.k);
        (g.out, tile, PointMap::Gemm { n }, about)
    } else if let Some(c) = &kernel.conv {
        if c.bias.is_some() || !c.stage.is_identity() {
            return Err(unsupported(format!(
                "a convolution call that adds its bias or applies {:?} (lower with \
                 `LowerOptions::plain_conv_calls`)",
                c.stage
            )));
        }
        let ty = kernel.buffer(c.out).ty;
        let element = Element::of_scalar(ty)
            .ok_or_else(|| unsupported(format!("a convolution of {ty} elements")))?;
        let path = MathPath::choose(element.dtype(), options)
            .ok_or_else(|| unsupported(format!("a convolution of {ty} elements")))?;
        let geometry = conv_geometry(kernel, c).map_err(unsupported)?;
        let tile = TileKernel {
            path,
            width,
            batch: geometry.groups,
            m: geometry.group_out(),
            n: geometry.pixels(),
            k: geometry.k(),
            a: Operand {
                source: Source::Matrix(geometry.weight_matrix()),
                base: bases[c.weight.index()],
                element,
                outer_len: geometry.group_out(),
                k_len: geometry.k(),
            },
            b: Operand {
                source: Source::Im2col(geometry),
                base: bases[c.input.index()],
                element,
                outer_len: geometry.pixels(),
                k_len: geometry.k(),
            },
        };
        let map = PointMap::Conv {
            group_out: geometry.group_out(),
            oh: geometry.oh,
            ow: geometry.ow,
        };
        let about = format!(
            "implicit-GEMM convolution {:?} * {:?} ({} groups) on {path:?}, fused epilogue",
            c.input_shape, c.weight_shape, geometry.groups
        );
        (c.out, tile, map, about)
    } else {
        return Err(unsupported("a kernel without an external call".into()));
    };
    let scratch_values = scratch_loads(kernel, scratch).map_err(unsupported)?;
    let mut epilogue = KernelEpilogue {
        kernel,
        bases,
        width,
        scratch_values,
        map,
    };
    let emitted = tile.emit(&mut e, &mut epilogue);
    let about = vec![
        format!("Generated by tessera-cuda from kernel {}.", kernel.name),
        about,
        format!("domain {:?}", kernel.domain),
    ];
    let ptx = module_text(
        &name,
        target,
        &about,
        kernel.buffers.len(),
        emitted.shared_bytes,
        e,
    );
    Ok(RenderedKernel {
        name,
        ptx,
        block: emitted.block,
        blocks_needed: u32::try_from(emitted.tiles).unwrap_or(u32::MAX),
        buffers: kernel.buffers.clone(),
        vector_width: 1,
    })
}

/// The values that load the scratch `out` at the output point (its packed row-major index),
/// which the accumulator replaces; any other access of it cannot be fused.
fn scratch_loads(kernel: &Kernel, out: BufferId) -> std::result::Result<Vec<ValueId>, String> {
    let mut packed = vec![0; kernel.domain.len()];
    let mut stride = 1;
    for (s, n) in packed.iter_mut().zip(&kernel.domain).rev() {
        *s = stride;
        stride *= n;
    }
    let mut found = Vec::new();
    for (i, v) in kernel.values.iter().enumerate() {
        match &v.expr {
            Expr::Load { buffer, index } if *buffer == out => {
                if index.offset != 0 || index.strides != packed {
                    return Err(format!(
                        "a read of the external call's result at another point ({index:?})"
                    ));
                }
                found.push(ValueId::from_index(i));
            }
            Expr::LoadIf { buffer, .. } if *buffer == out => {
                return Err("a guarded read of the external call's result".into());
            }
            _ => {}
        }
    }
    Ok(found)
}

/// The convolution's shapes as a GEMM per group, checked against the kernel's
/// `[images, channels, oh, ow]` domain (the verifier checked the buffers hold the shapes).
fn conv_geometry(
    kernel: &Kernel,
    c: &tessera_kernel::ConvCall,
) -> std::result::Result<ConvGeometry, String> {
    let geometry = ConvGeometry::new(c.input_shape, c.weight_shape, c.params)?;
    if kernel.domain.as_slice() != geometry.output_shape() {
        return Err(format!(
            "a convolution into {:?}, whose output is {:?}",
            kernel.domain,
            geometry.output_shape()
        ));
    }
    Ok(geometry)
}
