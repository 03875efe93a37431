//! Lowering of `max_pool2d_backward` from its saved i64 indices, in gather form: each input
//! element sums the upstream gradients of the output positions whose index names it, so no
//! two points write one element (no atomics, any launch order) and the sum adds them in the
//! output's row-major order from zero, as the eager kernel's `grad_in[idx] += g` does.
//!
//! With the forward's windows known (the indices come from a `max_pool2d` node of the graph),
//! only the output positions whose window covers an element are read. Along each axis, input
//! coordinate `h = s*q + r` (stride `s`, residue `r` in `0..s`) is tap `kh` of output row
//! `oh` iff `oh*s - pad + kh*dil == h`, i.e. iff `s` divides `r + pad - kh*dil`, which the
//! lowering knows per `(r, kh)`; then `oh = q + (r + pad - kh*dil) / s`, affine in `q`. So one
//! kernel over the `[.., qH, qW]` grid stores, for every residue pair, the sum over its
//! candidate taps (in ascending `(oh, ow)`) of `idx[oh, ow] == h*W + w ? g[oh, ow] : 0`, read
//! by guarded loads that skip an `oh` or `ow` outside the gradient. Any stride, padding,
//! dilation and ceil mode; the work is the window's taps per element. Where the sizes are not
//! multiples of the strides the grid overhangs the input: the kernel writes a padded buffer
//! and a copy kernel packs its `[H, W]` corner.
//! Average pooling's backward shares the grid ([`Taps::Share`]: each candidate tap adds
//! `g / n`, `n` its window's divisor).
//!
//! The op carries the forward's windows when autograd made it (`MaxPool2dBackward::window`),
//! so an eager op on a device, whose indices are an input of its one-op graph, takes the grid
//! too. Without windows (adaptive max pooling, an op built by hand), each element sums over
//! every output position of its plane, a reduction over `[oH, oW]`: the work is `H*W*oH*oW`
//! per plane, cheap for small planes only.
//!
//! An index outside the plane matches no element, so nothing is written out of bounds (the
//! eager kernel fails the op); with the windows known, an index inside the plane but outside
//! its window (which max pooling never saves) is ignored too. f32, f64, f16 and bf16 gradients
//! (halves summed in f32, rounded once, as the eager kernel on widened values) of 3-D and 4-D
//! tensors; other dtypes and empty tensors run the eager kernel.

use super::avg_divisors::Divisors;
use super::gather::IndexKernel;
use super::{Lowering, Val, graph_error};
use crate::schedule::schedule;
use crate::table::Emit;
use crate::{
    BinaryFn, Bound, BufferRole, CompareFn, Expr, IndexExpr, KernelBuilder, LoopId, ReduceFn,
    Result, ScalarType, SlotSource, Step, ValueId,
};
use tessera_fx::{NodeId, NodeKind};
use tessera_tensor::layout::Layout;
use tessera_tensor::op::{Pool2dParams, PoolOp, ViewOp};
use tessera_tensor::{DType, Op, TensorMeta};

/// The output rows (or columns) one input coordinate of residue `r` reads, in ascending
/// order: for each tap whose offset `(r + pad - tap*dil) / s` is exact, that offset.
fn candidate_offsets(r: usize, stride: usize, pad: usize, dil: usize, taps: usize) -> Vec<i64> {
    let s = stride as i64;
    (0..taps)
        .rev()
        .filter_map(|t| {
            let shift = (r + pad) as i64 - (t * dil) as i64;
            (shift.rem_euclid(s) == 0).then_some(shift.div_euclid(s))
        })
        .collect()
}

/// The bound of an output coordinate `q + offset` (loop `q`) inside `0..len`, moving an
/// address by `stride` per unit.
fn offset_bound(q: usize, loops: usize, offset: i64, len: usize, stride: usize) -> Bound {
    let pad = (-offset).max(0) as usize;
    let mut strides = vec![0; loops];
    strides[q] = 1;
    Bound {
        coord: IndexExpr {
            offset: (offset + pad as i64) as usize,
            strides,
        },
        pad,
        len,
        stride,
    }
}

/// What a candidate tap of the residue grid adds to an input element.
#[derive(Debug, Clone, Copy)]
pub(super) enum Taps<'a> {
    /// The gradient where these saved indices name the element (max pooling).
    Argmax(&'a Val),
    /// The gradient divided by its window's divisor (average pooling).
    Share(&'a Divisors),
}

/// [`Taps`] with the buffer of the saved indices the kernel reads.
#[derive(Clone, Copy)]
enum Pick<'a> {
    Argmax(&'a Val, crate::BufferId),
    Share(&'a Divisors),
}

impl Lowering<'_> {
    /// The windows of the `max_pool2d` whose indices node `indices` is (its getitem 1), when
    /// it pooled an input of the result's shape.
    fn saved_windows(&self, indices: &NodeId, out: &[usize]) -> Result<Option<Pool2dParams>> {
        let node = self
            .graph
            .node(indices)
            .map_err(|e| graph_error(self.graph, indices, e))?;
        if !matches!(node.kind, NodeKind::GetItem { index: 1 }) {
            return Ok(None);
        }
        let Some(pool) = self.operands(indices)?.first().copied() else {
            return Ok(None);
        };
        let pool_node = self
            .graph
            .node(&pool)
            .map_err(|e| graph_error(self.graph, &pool, e))?;
        let NodeKind::CallFunction {
            op: Op::Pool(PoolOp::MaxPool2d(p)),
        } = &pool_node.kind
        else {
            return Ok(None);
        };
        let pooled = match self.operands(&pool)?.first() {
            Some(x) => self.meta(x)?.first().map(|m| m.shape.clone()),
            None => None,
        };
        Ok((pooled.as_deref() == Some(out)).then_some(*p))
    }

    /// Lowers `max_pool2d_backward` node `id` reading its saved indices, or says why not.
    pub(super) fn max_pool_backward_from_indices(
        &mut self,
        id: &NodeId,
        op: &Op,
    ) -> Result<std::result::Result<(), String>> {
        let operands = self.operands(id)?;
        let (Some(grad), Some(indices), Some(out)) = (
            operands.first(),
            operands.get(1),
            self.meta(id)?.first().cloned(),
        ) else {
            return Ok(Err("the node has no gradient, indices or value".into()));
        };
        let (g, ix) = (self.value(grad)?, self.value(indices)?);
        let nd = out.shape.len();
        if !(3..=4).contains(&nd)
            || g.layout.shape.len() != nd
            || ix.layout.shape != g.layout.shape
            || g.layout.shape[..nd - 2] != out.shape[..nd - 2]
        {
            return Ok(Err(format!(
                "gradient {:?} and indices {:?} for a result of {:?}",
                g.layout.shape, ix.layout.shape, out.shape
            )));
        }
        // Half gradients sum in f32 and round once, as the eager kernel on widened values.
        let ty = match out.dtype {
            DType::F32 | DType::F16 | DType::BF16 => ScalarType::F32,
            DType::F64 => ScalarType::F64,
            other => return Ok(Err(format!("{other:?} gradients are not lowered"))),
        };
        if self.program.slot(g.slot).meta.dtype != out.dtype
            || self.program.slot(ix.slot).meta.dtype != DType::I64
        {
            return Ok(Err(
                "a gradient of another dtype or indices other than i64".into()
            ));
        }
        if out.shape.contains(&0) || g.layout.shape.contains(&0) {
            return Ok(Err("an empty gradient or result".into()));
        }
        // The windows of the forward in the graph, else those the op carries (autograd's, for
        // an eager op on a device, whose indices are an input of its one-op graph).
        let carried = match op {
            Op::Pool(PoolOp::MaxPool2dBackward { window, .. }) => *window,
            _ => None,
        };
        let v = match self.saved_windows(indices, &out.shape)?.or(carried) {
            Some(p) => self.by_residues(id, op, &p, (&g, Taps::Argmax(&ix)), &out, ty)?,
            None => self.over_plane(id, op, (&g, &ix), &out, ty)?,
        };
        self.values.insert(*id, vec![v]);
        Ok(Ok(()))
    }

    /// The kernel over the residue grid for windows `p`, and the copy packing its result
    /// when the grid overhangs the input; what each candidate tap adds is `taps`'.
    pub(super) fn by_residues(
        &mut self,
        id: &NodeId,
        op: &Op,
        p: &Pool2dParams,
        (g, taps): (&Val, Taps),
        out: &TensorMeta,
        ty: ScalarType,
    ) -> Result<Val> {
        let nd = out.shape.len();
        let (h, w) = (nd - 2, nd - 1);
        let plane = [out.shape[h], out.shape[w]];
        let out_plane = [g.layout.shape[h], g.layout.shape[w]];
        let s = p.stride.map(|s| s.max(1));
        let grid = [plane[0].div_ceil(s[0]), plane[1].div_ceil(s[1])];
        let mut domain = out.shape[..h].to_vec();
        domain.extend(grid);
        let mut padded = out.shape[..h].to_vec();
        padded.extend([grid[0] * s[0], grid[1] * s[1]]);
        let name = format!("k{}_{}", self.kernel_count(), op.name());
        let mut b = KernelBuilder::new(name, domain);
        let loops = nd;
        // The gradient's and the result's element type; sums are in `ty` (f32 for halves).
        let storage = ScalarType::of_buffer(out.dtype).unwrap_or(ty);
        let gb = b.buffer(BufferRole::Input, storage, 0);
        // The saved indices' buffer, read by argmax taps.
        let pick = match taps {
            Taps::Argmax(ix) => Pick::Argmax(ix, b.buffer(BufferRole::Input, ScalarType::I64, 0)),
            Taps::Share(divisors) => Pick::Share(divisors),
        };
        let ib = match pick {
            Pick::Argmax(_, ib) => Some(ib),
            Pick::Share(_) => None,
        };
        let numel: usize = padded.iter().product();
        let ob = b.buffer(BufferRole::Output, storage, numel);
        // The batch and channel dims walk their loops; the plane dims are the bounds'.
        let lead = |l: &Layout| {
            let mut strides = l.strides[..h].to_vec();
            strides.extend([0, 0]);
            IndexExpr {
                offset: l.offset,
                strides,
            }
        };
        let zero = b.push(ty, Expr::Const(0.0));
        let qh = b.push(ScalarType::I64, Expr::LoopIndex(LoopId::from_index(h)));
        let qw = b.push(ScalarType::I64, Expr::LoopIndex(LoopId::from_index(w)));
        let row_step = b.push(ScalarType::I64, Expr::Const((s[0] * plane[1]) as f64));
        let col_step = b.push(ScalarType::I64, Expr::Const(s[1] as f64));
        let rows = b.push(ScalarType::I64, Expr::Binary(BinaryFn::Mul, qh, row_step));
        let cols = b.push(ScalarType::I64, Expr::Binary(BinaryFn::Mul, qw, col_step));
        // `q_h*s_h*W + q_w*s_w`: the flat position of the residue (0, 0) element.
        let corner = b.push(ScalarType::I64, Expr::Binary(BinaryFn::Add, rows, cols));
        let packed = Layout::contiguous(&padded).strides;
        for rh in 0..s[0] {
            let offsets_h = candidate_offsets(rh, s[0], p.padding[0], p.dilation[0], p.kernel[0]);
            for rw in 0..s[1] {
                let offsets_w =
                    candidate_offsets(rw, s[1], p.padding[1], p.dilation[1], p.kernel[1]);
                let shift = b.push(ScalarType::I64, Expr::Const((rh * plane[1] + rw) as f64));
                let target = b.push(ScalarType::I64, Expr::Binary(BinaryFn::Add, corner, shift));
                let mut sum = zero;
                for &oh in &offsets_h {
                    for &ow in &offsets_w {
                        let bounds = |l: &Layout| {
                            vec![
                                offset_bound(h, loops, oh, out_plane[0], l.strides[h]),
                                offset_bound(w, loops, ow, out_plane[1], l.strides[w]),
                            ]
                        };
                        let grad = b.push(
                            storage,
                            Expr::LoadIf {
                                buffer: gb,
                                index: lead(&g.layout),
                                bounds: bounds(&g.layout),
                                fill: 0.0,
                            },
                        );
                        let grad = Emit { b: &mut b }.cast(grad, ty);
                        let picked = match pick {
                            Pick::Argmax(ix, ib) => {
                                let saved = b.push(
                                    ScalarType::I64,
                                    Expr::LoadIf {
                                        buffer: ib,
                                        index: lead(&ix.layout),
                                        bounds: bounds(&ix.layout),
                                        fill: -1.0,
                                    },
                                );
                                let hit = b.push(
                                    ScalarType::Bool,
                                    Expr::Compare(CompareFn::Eq, saved, target),
                                );
                                b.push(
                                    ty,
                                    Expr::Select {
                                        cond: hit,
                                        a: grad,
                                        b: zero,
                                    },
                                )
                            }
                            // `g / n`; a tap outside the gradient reads 0 and adds +0, which
                            // changes no sum from +0 (the sum is never -0).
                            Pick::Share(divisors) => {
                                let n = divisors.at(&mut b, ty, &[qh, qw], &[oh, ow]);
                                b.push(ty, Expr::Binary(BinaryFn::Div, grad, n))
                            }
                        };
                        sum = b.push(ty, Expr::Binary(BinaryFn::Add, sum, picked));
                    }
                }
                let mut strides = packed[..h].to_vec();
                strides.extend([s[0] * packed[h], s[1] * packed[w]]);
                let index = IndexExpr {
                    offset: rh * packed[h] + rw * packed[w],
                    strides,
                };
                let sum = Emit { b: &mut b }.cast(sum, storage);
                b.store(ob, index, sum);
            }
        }
        let mut kernel = b.finish();
        for buffer in std::iter::once(gb).chain(ib) {
            kernel.buffers[buffer.index()].len = kernel.buffer_reach(buffer);
        }
        schedule(&mut kernel);
        kernel.verify()?;
        let nodes = self.node_names(std::slice::from_ref(id))?;
        let meta = TensorMeta::new(padded.clone(), out.dtype);
        let result = self.slot(id, meta, SlotSource::Step, Layout::contiguous(&padded));
        self.program.steps.push(Step::Kernel {
            kernel,
            inputs: match taps {
                Taps::Argmax(ix) => vec![g.slot, ix.slot],
                Taps::Share(_) => vec![g.slot],
            },
            outputs: vec![result.slot],
            nodes,
        });
        if padded == out.shape {
            return Ok(result);
        }
        // The `[H, W]` corner of the padded result, packed.
        let mut corner = result;
        for (dim, len) in [(h, plane[0]), (w, plane[1])] {
            corner.views.push(ViewOp::Narrow { dim, start: 0, len });
            corner.layout.shape[dim] = len;
        }
        match self.copy(id, &corner, out)? {
            Some(packed) => Ok(packed),
            None => Err(crate::KernelError::Invalid {
                kernel: op.name(),
                message: format!("no copy kernel for {:?} values", out.dtype),
            }),
        }
    }

    /// The reduction over every output position of each element's plane.
    fn over_plane(
        &mut self,
        id: &NodeId,
        op: &Op,
        (g, ix): (&Val, &Val),
        out: &TensorMeta,
        ty: ScalarType,
    ) -> Result<Val> {
        let nd = out.shape.len();
        let (h, w) = (nd - 2, nd - 1);
        let name = format!("k{}_{}", self.kernel_count(), op.name());
        let out_plane = g.layout.shape[h..].to_vec();
        let mut k = IndexKernel::new(KernelBuilder::reduction(name, out.shape.clone(), out_plane));
        // Lead dims walk their output loops, the gradient's plane the reduction loops.
        let mut map: Vec<Option<usize>> = (0..h).map(Some).collect();
        map.extend([Some(nd), Some(nd + 1)]);
        let saved = k.load(ix, ScalarType::I64, &map);
        let storage = ScalarType::of_buffer(out.dtype).unwrap_or(ty);
        let grad = k.load(g, storage, &map);
        let grad = Emit { b: &mut k.b }.cast(grad, ty);
        let row =
            k.b.push(ScalarType::I64, Expr::LoopIndex(LoopId::from_index(h)));
        let col =
            k.b.push(ScalarType::I64, Expr::LoopIndex(LoopId::from_index(w)));
        let width = k.constant(ScalarType::I64, out.shape[w] as f64);
        let rows =
            k.b.push(ScalarType::I64, Expr::Binary(BinaryFn::Mul, row, width));
        let at =
            k.b.push(ScalarType::I64, Expr::Binary(BinaryFn::Add, rows, col));
        let hit =
            k.b.push(ScalarType::Bool, Expr::Compare(CompareFn::Eq, saved, at));
        let zero = k.constant(ty, 0.0);
        let picked: ValueId = k.b.push(
            ty,
            Expr::Select {
                cond: hit,
                a: grad,
                b: zero,
            },
        );
        let sum = k.b.push(ty, Expr::Reduce(ReduceFn::Sum, picked));
        let sum = Emit { b: &mut k.b }.cast(sum, storage);
        self.finish_index_kernel(id, k, sum, out.clone())
    }
}
