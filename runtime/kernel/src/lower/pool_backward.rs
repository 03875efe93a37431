//! Lowering of the pooling backward ops whose windows tile the input (kernel equal to stride,
//! no padding, no dilation, sizes that divide): one kernel over the gradient's
//! `[.., oH, oW]` that writes each window's `kH * kW` input positions, so every input element
//! is written exactly once. Average pooling (plain and adaptive) spreads `0 + g / n` over the
//! window, as the eager kernel's accumulation into zeros does. Max pooling recomputes the
//! window's argmax from the forward's input with the eager selection (a tap replaces the best
//! so far when it is larger or NaN; the first tap when none does) and writes `0 + g` there and
//! `+0` elsewhere: the argmax indices, i64 values the kernel IR does not carry, are never
//! read, so the forward `max_pool2d_with_indices` lowers as values-only pooling when these
//! backward nodes are the indices' only users. Max pooling backward otherwise reads the saved
//! indices ([`super::max_pool_backward`]); average pooling whose windows overlap, skip input
//! or are padded sums `g / n` over the windows covering each element on the same residue grid,
//! in the eager order (ascending outputs, from zero: bit-identical), each window's `n` its own
//! ([`super::avg_divisors`]: fewer taps at the border when padding does not count, a ceil-mode
//! window cut short).

use super::{Lowering, graph_error};
use crate::table::Emit;
use crate::{
    BufferId, BufferRole, CompareFn, Expr, IndexExpr, KernelBuilder, Result, ScalarType, SlotId,
    SlotSource, Step, ValueId, schedule::schedule,
};
use std::collections::HashMap;
use tessera_fx::{Graph, NodeId, NodeKind};
use tessera_tensor::layout::Layout;
use tessera_tensor::op::{Pool2dParams, PoolOp};
use tessera_tensor::{DType, Op};

/// What a tiling backward writes over each window.
#[derive(Debug, Clone, Copy)]
enum Spread {
    /// `0 + g / taps` at every tap.
    Average,
    /// `0 + g` at the argmax of the forward's input (`x`, operand of the pool node), `+0`
    /// elsewhere.
    Max { pool: NodeId },
}

/// The window `[kH, kW]` when windows of `p` tile an input plane of `input` exactly.
fn tiling(p: &Pool2dParams, input: [usize; 2]) -> Option<[usize; 2]> {
    let tiles = (0..2).all(|a| {
        p.kernel[a] > 0
            && p.stride[a] == p.kernel[a]
            && p.padding[a] == 0
            && p.dilation[a] == 1
            && input[a].is_multiple_of(p.kernel[a])
    });
    tiles.then_some(p.kernel)
}

/// The `[H, W]` of a 3-D or 4-D shape.
fn plane(shape: &[usize]) -> Option<[usize; 2]> {
    match shape.len() {
        3 | 4 => Some([shape[shape.len() - 2], shape[shape.len() - 1]]),
        _ => None,
    }
}

/// Whether the forward max pooling `pool` (with indices) only needs its values in a compiled
/// program: its indices are read by nothing but max-pooling backward nodes that recompute
/// the argmax, which they can for its windows and dtype.
pub(super) fn indices_recomputed(graph: &Graph, pool: &NodeId) -> bool {
    let Ok(node) = graph.node(pool) else {
        return false;
    };
    let NodeKind::CallFunction {
        op: Op::Pool(PoolOp::MaxPool2d(p)),
    } = &node.kind
    else {
        return false;
    };
    let recomputable = node.meta.first().is_some_and(|m| {
        matches!(m.dtype, DType::F32 | DType::F64)
            && graph
                .operands(pool)
                .ok()
                .and_then(|o| graph.node(o.first()?).ok())
                .and_then(|x| plane(&x.meta.first()?.shape))
                .and_then(|input| tiling(p, input))
                .is_some()
    });
    let Ok(users) = graph.users(pool) else {
        return false;
    };
    recomputable
        && users.iter().all(|u| match graph.node(u).map(|n| &n.kind) {
            Ok(NodeKind::GetItem { index: 0 }) => true,
            Ok(NodeKind::GetItem { index: 1 }) => graph.users(u).is_ok_and(|backward| {
                backward.iter().all(|b| {
                    graph.node(b).is_ok_and(|n| {
                        matches!(
                            n.kind,
                            NodeKind::CallFunction {
                                op: Op::Pool(PoolOp::MaxPool2dBackward { .. })
                            }
                        )
                    }) && graph.operands(b).is_ok_and(|o| o.get(1) == Some(u))
                })
            }),
            _ => false,
        })
}

/// Whether `id` is the indices getitem of a max pooling whose indices are recomputed.
pub(super) fn is_recomputed_indices(graph: &Graph, id: &NodeId) -> bool {
    graph
        .node(id)
        .is_ok_and(|n| matches!(n.kind, NodeKind::GetItem { index: 1 }))
        && graph
            .operands(id)
            .ok()
            .and_then(|o| o.first().copied())
            .is_some_and(|pool| indices_recomputed(graph, &pool))
}

impl Lowering<'_> {
    /// Lowers pooling backward node `id`, or runs its eager kernel (reported as a fallback).
    pub(super) fn pool_backward(&mut self, id: &NodeId, op: &Op) -> Result<()> {
        match self.pool_backward_kernel(id, op)? {
            Ok(()) => Ok(()),
            Err(why) => self.not_generated(id, op, &why),
        }
    }

    fn pool_backward_kernel(
        &mut self,
        id: &NodeId,
        op: &Op,
    ) -> Result<std::result::Result<(), String>> {
        let operands = self.operands(id)?;
        let (Some(grad), Some(out)) = (operands.first(), self.meta(id)?.first().cloned()) else {
            return Ok(Err("the node has no operand or no value".into()));
        };
        let g = self.value(grad)?;
        let Some(input) = plane(&out.shape) else {
            return Ok(Err("pooling of other than 3-D or 4-D tensors".into()));
        };
        // Half gradients compute in f32 and round once, as the eager kernel on widened values.
        let Some(storage) =
            ScalarType::of_buffer(out.dtype).filter(|t| t.is_arithmetic() || t.is_half())
        else {
            return Ok(Err(format!("{:?} gradients are not lowered", out.dtype)));
        };
        let ty = storage.compute();
        let out_plane = plane(&g.layout.shape).unwrap_or([0, 0]);
        let (window, spread) = match op {
            Op::Pool(PoolOp::AvgPool2dBackward {
                params,
                count_include_pad,
                ..
            }) => match tiling(params, input) {
                Some(window) => (Some(window), Spread::Average),
                None => {
                    let Some(divisors) = super::avg_divisors::Divisors::of(
                        params,
                        *count_include_pad,
                        input,
                        out_plane,
                    ) else {
                        return Ok(Err("dilated or empty average windows".into()));
                    };
                    let taps = super::max_pool_backward::Taps::Share(&divisors);
                    if g.layout.shape[..out.shape.len() - 2] != out.shape[..out.shape.len() - 2]
                        || out.shape.contains(&0)
                        || g.layout.shape.contains(&0)
                        || self.program.slot(g.slot).meta.dtype != out.dtype
                    {
                        return Ok(Err("an empty or mismatched gradient".into()));
                    }
                    let v = self.by_residues(id, op, params, (&g, taps), &out, ty)?;
                    self.values.insert(*id, vec![v]);
                    return Ok(Ok(()));
                }
            },
            Op::Pool(PoolOp::AdaptiveAvgPool2dBackward { .. }) => {
                let divides =
                    (0..2).all(|a| out_plane[a] > 0 && input[a].is_multiple_of(out_plane[a]));
                let window = [
                    input[0] / out_plane[0].max(1),
                    input[1] / out_plane[1].max(1),
                ];
                (divides.then_some(window), Spread::Average)
            }
            Op::Pool(PoolOp::MaxPool2dBackward { .. }) => {
                let pool = operands
                    .get(1)
                    .and_then(|i| self.graph.operands(i).ok()?.first().copied())
                    .filter(|pool| indices_recomputed(self.graph, pool));
                let Some(pool) = pool else {
                    return self.max_pool_backward_from_indices(id, op);
                };
                let window = match &self
                    .graph
                    .node(&pool)
                    .map_err(|e| graph_error(self.graph, &pool, e))?
                    .kind
                {
                    NodeKind::CallFunction {
                        op: Op::Pool(PoolOp::MaxPool2d(p)),
                    } => tiling(p, input),
                    _ => None,
                };
                (window, Spread::Max { pool })
            }
            _ => return Ok(Err("not a pooling backward".into())),
        };
        let Some([kh, kw]) = window else {
            return Ok(Err("windows that overlap, skip input or pad".into()));
        };
        let nd = out.shape.len();
        if [input[0] / kh, input[1] / kw] != out_plane
            || g.layout.shape[..nd - 2] != out.shape[..nd - 2]
        {
            return Ok(Err(format!(
                "gradient {:?} does not match windows {:?} over {:?}",
                g.layout.shape,
                [kh, kw],
                out.shape
            )));
        }
        let domain = g.layout.shape.clone();
        let name = format!("k{}_{}", self.kernel_count(), op.name());
        let mut b = KernelBuilder::new(name, domain.clone());
        let mut buffers: HashMap<SlotId, BufferId> = HashMap::new();
        let mut inputs: Vec<SlotId> = Vec::new();
        let mut buffer_of = |b: &mut KernelBuilder, slot: SlotId| {
            *buffers.entry(slot).or_insert_with(|| {
                inputs.push(slot);
                b.buffer(BufferRole::Input, storage, 0)
            })
        };
        if self.program.slot(g.slot).meta.dtype != out.dtype {
            return Ok(Err("the gradient's dtype differs from the result's".into()));
        }
        let gb = buffer_of(&mut b, g.slot);
        let grad_value = b.push(
            storage,
            Expr::Load {
                buffer: gb,
                index: IndexExpr {
                    offset: g.layout.offset,
                    strides: g.layout.strides.clone(),
                },
            },
        );
        let grad_value = Emit { b: &mut b }.cast(grad_value, ty);
        let zero = b.push(ty, Expr::Const(0.0));
        // The value stored at each tap, row-major over the window.
        let per_tap: Vec<ValueId> = match spread {
            Spread::Average => {
                let taps = b.push(ty, Expr::Const((kh * kw) as f64));
                let share = b.push(ty, Expr::Binary(crate::BinaryFn::Div, grad_value, taps));
                let spread = b.push(ty, Expr::Binary(crate::BinaryFn::Add, zero, share));
                vec![spread; kh * kw]
            }
            Spread::Max { pool } => {
                let Some(x_node) = self.operands(&pool)?.first().copied() else {
                    return Ok(Err("the max pooling has no input".into()));
                };
                let x = self.value(&x_node)?;
                if self.program.slot(x.slot).meta.dtype != out.dtype || x.layout.shape != out.shape
                {
                    return Ok(Err("the pooled input differs from the result".into()));
                }
                let xb = buffer_of(&mut b, x.slot);
                let s = &x.layout.strides;
                let mut strides = s[..nd - 2].to_vec();
                strides.extend([kh * s[nd - 2], kw * s[nd - 1]]);
                let mut best = b.push(ty, Expr::Const(f64::NEG_INFINITY));
                let mut at = zero;
                for t in 0..kh * kw {
                    let v = b.push(
                        storage,
                        Expr::Load {
                            buffer: xb,
                            index: IndexExpr {
                                offset: x.layout.offset
                                    + (t / kw) * s[nd - 2]
                                    + (t % kw) * s[nd - 1],
                                strides: strides.clone(),
                            },
                        },
                    );
                    let v = Emit { b: &mut b }.cast(v, ty);
                    // The tap replaces the best so far when it is NaN or larger, as the eager
                    // selection (two float selects: no select of predicates, which not every
                    // backend has).
                    let nan = b.push(ScalarType::Bool, Expr::Compare(CompareFn::Ne, v, v));
                    let larger = b.push(ScalarType::Bool, Expr::Compare(CompareFn::Gt, v, best));
                    let here = b.push(ty, Expr::Const(t as f64));
                    let pick = |b: &mut KernelBuilder, tap: ValueId, so_far: ValueId| {
                        let if_larger = b.push(
                            ty,
                            Expr::Select {
                                cond: larger,
                                a: tap,
                                b: so_far,
                            },
                        );
                        b.push(
                            ty,
                            Expr::Select {
                                cond: nan,
                                a: tap,
                                b: if_larger,
                            },
                        )
                    };
                    best = pick(&mut b, v, best);
                    at = pick(&mut b, here, at);
                }
                let routed = b.push(ty, Expr::Binary(crate::BinaryFn::Add, zero, grad_value));
                (0..kh * kw)
                    .map(|t| {
                        let here = b.push(ty, Expr::Const(t as f64));
                        let hit = b.push(ScalarType::Bool, Expr::Compare(CompareFn::Eq, at, here));
                        b.push(
                            ty,
                            Expr::Select {
                                cond: hit,
                                a: routed,
                                b: zero,
                            },
                        )
                    })
                    .collect()
            }
        };
        let packed = Layout::contiguous(&out.shape).strides;
        let numel: usize = out.shape.iter().product();
        let ob = b.buffer(BufferRole::Output, storage, numel);
        let mut strides = packed[..nd - 2].to_vec();
        strides.extend([kh * packed[nd - 2], kw]);
        for (t, value) in per_tap.into_iter().enumerate() {
            let index = IndexExpr {
                offset: (t / kw) * packed[nd - 2] + t % kw,
                strides: strides.clone(),
            };
            let value = Emit { b: &mut b }.cast(value, storage);
            b.store(ob, index, value);
        }
        let mut kernel = b.finish();
        for buffer in buffers.values() {
            let extent = kernel
                .accesses()
                .filter(|(b, _)| b == buffer)
                .map(|(_, ix)| ix.extent(&kernel.domain))
                .max()
                .unwrap_or(0);
            kernel.buffers[buffer.index()].len = extent;
        }
        schedule(&mut kernel);
        kernel.verify()?;
        let layout = Layout::contiguous(&out.shape);
        let v = self.slot(id, out, SlotSource::Step, layout);
        let nodes = self.node_names(std::slice::from_ref(id))?;
        self.program.steps.push(Step::Kernel {
            kernel,
            inputs,
            outputs: vec![v.slot],
            nodes,
        });
        self.values.insert(*id, vec![v]);
        Ok(Ok(()))
    }
}
