//! Lowering of reductions (sum, mean, amax/amin, var/std, logsumexp, softmax, log-softmax,
//! layer, RMS, group and instance norm, eval-mode batch norm, global average pooling) into
//! one kernel each, with the elementwise prologue of their fusion group and an elementwise
//! epilogue that only they feed fused in. The kernel's output loops are the input's kept dims
//! and its reduction loops the reduced dims; every tensor a member reads or writes is indexed
//! through a *frame map* from its dims to those loops, so broadcasting a statistic back over
//! the input is a zero stride. Group norm's frame splits the channels into `[groups,
//! channels per group]` (one output loop, one reduction loop); an eval-mode batch norm reduces
//! nothing, but its spatial dims are reduction loops all the same, so that its per-channel
//! scale and shift are computed once per channel and image, outside them.

use super::frame::{Frame, FrameMap, Local};
use super::{Lowering, graph_error};
use crate::{Expr, KernelBuilder, Result, ScalarType, lower_reduction};
use std::collections::{HashMap, HashSet};
use tessera_fx::{NodeId, NodeKind};
use tessera_tensor::op::{NormOp, PoolOp, ReduceKind};
use tessera_tensor::{DType, Op};

/// What a reducible op reduces: the reduced dims of its input, and the frame map of each of
/// its outputs (`None` for a flat per-row statistic, packed over the output loops).
#[derive(Debug, Clone)]
pub(super) struct ReduceSpec {
    reduced: Vec<usize>,
    outputs: Vec<Option<FrameMap>>,
    /// The shape the input is seen in, when not its own (group norm's split channels);
    /// `reduced` and the maps refer to its dims.
    frame: Option<Vec<usize>>,
}

/// Whether `op` on an input of `shape` is a reduction the kernel IR expresses.
pub(super) fn reducible(op: &Op, shape: &[usize]) -> Option<ReduceSpec> {
    let nd = shape.len();
    let keep = |reduced: &[usize], keepdim: bool| -> FrameMap {
        let outer: Vec<usize> = (0..nd).filter(|d| !reduced.contains(d)).collect();
        (0..nd)
            .filter_map(|d| match outer.iter().position(|&o| o == d) {
                Some(l) => Some(Some(l)),
                None => keepdim.then_some(None),
            })
            .collect()
    };
    if nd == 0 {
        return scalar_reducible(op);
    }
    let (reduced, outputs): (Vec<usize>, Vec<Option<FrameMap>>) = match op {
        Op::Reduce(r) => {
            if r.dims.is_empty() || r.dims.iter().any(|&d| d >= nd) {
                return None;
            }
            let map = keep(&r.dims, r.keepdim);
            // `max`/`min` along a dim: the values and their positions, of one shape.
            let outputs = if matches!(
                r.kind,
                ReduceKind::MaxWithIndices | ReduceKind::MinWithIndices
            ) {
                vec![Some(map.clone()), Some(map)]
            } else {
                vec![Some(map)]
            };
            (r.dims.clone(), outputs)
        }
        Op::Softmax { dim, .. } if *dim < nd => (vec![*dim], vec![None]),
        Op::Pool(PoolOp::AdaptiveAvgPool2d {
            output_size: [1, 1],
        }) if nd >= 3 => {
            let reduced = vec![nd - 2, nd - 1];
            let map = keep(&reduced, true);
            (reduced, vec![Some(map)])
        }
        Op::Norm(
            NormOp::LayerNorm {
                normalized_ndim, ..
            }
            | NormOp::RmsNorm {
                normalized_ndim, ..
            },
        ) if *normalized_ndim >= 1 && *normalized_ndim <= nd => {
            ((nd - normalized_ndim..nd).collect(), vec![None, None, None])
        }
        // Statistics per image and channel over the spatial dims.
        Op::Norm(NormOp::InstanceNorm { .. }) if nd >= 3 => {
            ((2..nd).collect(), vec![None, None, None])
        }
        // Batch statistics per channel, over the batch and spatial dims: the channel is the
        // only output loop, the statistics are per channel.
        Op::Norm(NormOp::BatchNorm { training: true, .. }) if nd >= 2 => {
            let reduced: Vec<usize> = std::iter::once(0).chain(2..nd).collect();
            let channel: FrameMap = vec![Some(0)];
            (reduced, vec![None, Some(channel.clone()), Some(channel)])
        }
        // Running statistics per channel: nothing is reduced, the spatial dims are the
        // reduction loops; the statistics outputs are the running ones, per channel.
        Op::Norm(NormOp::BatchNorm {
            training: false, ..
        }) if nd >= 2 => {
            let channel: FrameMap = vec![Some(1)];
            (
                (2..nd).collect(),
                vec![None, Some(channel.clone()), Some(channel)],
            )
        }
        Op::Norm(NormOp::GroupNorm { num_groups, .. })
            if nd >= 2 && *num_groups > 0 && shape[1].is_multiple_of(*num_groups) =>
        {
            // `[N, C, ...]` seen as `[N, G, C / G, ...]`, reduced over all but `N, G`.
            let mut frame = vec![shape[0], *num_groups, shape[1] / num_groups];
            frame.extend(&shape[2..]);
            let input = input_map(&(2..nd + 1).collect::<Vec<_>>(), nd + 1);
            return Some(ReduceSpec {
                reduced: (2..nd + 1).collect(),
                outputs: vec![Some(input), None, None],
                frame: Some(frame),
            });
        }
        _ => return None,
    };
    // An output of `None` is the input's own frame (softmax, a norm's `y`), except for a
    // norm's statistics, which are flat.
    let norm = matches!(op, Op::Norm(_));
    let input = input_map(&reduced, nd);
    let outputs = outputs
        .into_iter()
        .enumerate()
        .map(|(i, m)| match m {
            Some(m) => Some(m),
            None if norm && i > 0 => None,
            None => Some(input.clone()),
        })
        .collect();
    Some(ReduceSpec {
        reduced,
        outputs,
        frame: None,
    })
}

/// The reductions of a 0-d input that the kernel IR expresses: one of the value reductions
/// (with no dims, reducing nothing) or a softmax, seen as a reduction over a frame `[1]`, its
/// one element, which gives the eager kernels' results (the element, its softmax 1).
fn scalar_reducible(op: &Op) -> Option<ReduceSpec> {
    let outputs = match op {
        // An index reduction of a 0-d input names its dim 0 or none; its outputs are 0-d.
        Op::Reduce(r) if crate::reduce_table::has_indices(r.kind) && r.dims.len() <= 1 => {
            let n = if matches!(r.kind, ReduceKind::ArgMax | ReduceKind::ArgMin) {
                1
            } else {
                2
            };
            vec![Some(vec![]); n]
        }
        Op::Reduce(r) if r.dims.is_empty() => vec![Some(vec![])],
        Op::Softmax { dim: 0, .. } => vec![Some(vec![Some(0)])],
        _ => return None,
    };
    Some(ReduceSpec {
        reduced: vec![0],
        outputs,
        frame: Some(vec![1]),
    })
}

/// Whether `op`'s operands after the input are per-channel `[C]` tensors.
fn per_channel(op: &Op) -> bool {
    matches!(
        op,
        Op::Norm(NormOp::BatchNorm { .. } | NormOp::GroupNorm { .. } | NormOp::InstanceNorm { .. })
    )
}

/// The frame map of the input: kept dims on the output loops, reduced dims on the reduction
/// loops, each in order.
fn input_map(reduced: &[usize], nd: usize) -> FrameMap {
    let kept: Vec<usize> = (0..nd).filter(|d| !reduced.contains(d)).collect();
    (0..nd)
        .map(|d| match kept.iter().position(|&k| k == d) {
            Some(l) => Some(l),
            None => reduced.iter().position(|&r| r == d).map(|l| kept.len() + l),
        })
        .collect()
}

/// The fused set of one reduction kernel.
pub(super) struct ReductionGroup<'a> {
    pub prologue: &'a [NodeId],
    pub reduction: NodeId,
    /// The getitem between a norm and its epilogue.
    pub bridge: Option<NodeId>,
    pub epilogue: &'a [NodeId],
}

impl Lowering<'_> {
    /// The reduction's spec and its input's shape, if the kernel IR expresses it.
    pub(super) fn reduction_spec(&self, id: &NodeId) -> Result<Option<(ReduceSpec, Vec<usize>)>> {
        let Some(op) = self.op_of(id)? else {
            return Ok(None);
        };
        let Some(input) = self.operands(id)?.first().copied() else {
            return Ok(None);
        };
        let Some(shape) = self.meta(&input)?.first().map(|m| m.shape.clone()) else {
            return Ok(None);
        };
        Ok(reducible(&op, &shape).map(|s| (s, shape)))
    }

    /// The elementwise partition that is the epilogue of reduction `id`, and the getitem
    /// between them: every user of its (first) output is in that one partition, whose shape is
    /// the reduction's input or output shape.
    pub(super) fn epilogue_of(
        &self,
        id: &NodeId,
        partition_of: &HashMap<NodeId, usize>,
        partitions: &[Vec<NodeId>],
    ) -> Result<Option<(usize, Option<NodeId>)>> {
        let Some((spec, input_shape)) = self.reduction_spec(id)? else {
            return Ok(None);
        };
        let users = self
            .graph
            .users(id)
            .map_err(|e| graph_error(self.graph, id, e))?;
        let (target, bridge) = if spec.outputs.len() > 1 {
            let [user] = users.as_slice() else {
                return Ok(None);
            };
            match self.graph.node(user).map(|n| n.kind.clone()) {
                Ok(NodeKind::GetItem { index: 0 }) => (*user, Some(*user)),
                _ => return Ok(None),
            }
        } else {
            (*id, None)
        };
        let Some((p, shape)) = self.users_partition(&target, partition_of, partitions)? else {
            return Ok(None);
        };
        // An optimizer update stays out of a reduction's kernel (a bias's gradient is a sum),
        // whose outputs are never written in place ([`crate::in_place_outputs`]).
        if partitions[p]
            .iter()
            .any(|m| super::has_outputs(self.graph, m))
        {
            return Ok(None);
        }
        let out_shape = self.meta(&target)?.first().map(|m| m.shape.clone());
        let shape = Some(shape);
        let fits = shape.is_some() && (shape == Some(input_shape) || shape == out_shape);
        Ok(fits.then_some((p, bridge)))
    }

    /// Lowers `group` into one kernel; the inner error says why the kernel IR cannot express
    /// it (nothing was emitted then).
    pub(super) fn reduction_kernel(
        &mut self,
        group: &ReductionGroup,
    ) -> Result<std::result::Result<(), String>> {
        let r = group.reduction;
        let Some((spec, input_shape)) = self.reduction_spec(&r)? else {
            return Ok(Err("the op is not a lowered reduction".into()));
        };
        let Some(op) = self.op_of(&r)? else {
            return Ok(Err("not an op".into()));
        };
        // The shape every member of the input's shape is built over.
        let frame_shape = spec.frame.clone().unwrap_or_else(|| input_shape.clone());
        let kept: Vec<usize> = (0..frame_shape.len())
            .filter(|d| !spec.reduced.contains(d))
            .collect();
        let domain: Vec<usize> = kept.iter().map(|&d| frame_shape[d]).collect();
        let reduce: Vec<usize> = spec.reduced.iter().map(|&d| frame_shape[d]).collect();
        let members = group.prologue.iter().chain(std::iter::once(&r));
        let name = self.kernel_name(members.chain(group.epilogue));
        let mut k = Frame::new(KernelBuilder::reduction(
            name,
            domain.clone(),
            reduce.clone(),
        ));
        if frame_shape != input_shape {
            k.regroup = Some((input_shape.clone(), frame_shape.clone()));
        }
        let in_map = input_map(&spec.reduced, frame_shape.len());
        let fused: HashSet<NodeId> = group
            .prologue
            .iter()
            .chain(std::iter::once(&r))
            .chain(group.bridge.iter())
            .chain(group.epilogue)
            .copied()
            .collect();
        // The prologue, over the input's frame.
        for id in group.prologue {
            if let Err(why) = self.elementwise_member(&mut k, id, &frame_shape, &in_map)? {
                return Ok(Err(why));
            }
        }
        // The reduction.
        let out_meta = self.meta(&r)?;
        // An index reduction computes in its input's type; the others in their output's; an
        // integer or bool input in i64 (exact, as the eager kernel).
        let input_dtype = self.meta(&self.operands(&r)?[0])?.first().map(|m| m.dtype);
        let computed = match &op {
            Op::Reduce(_) if input_dtype.is_some_and(|d| !d.is_float()) => Some(DType::I64),
            Op::Reduce(red) if crate::reduce_table::has_indices(red.kind) => input_dtype,
            _ => out_meta.first().map(|m| m.dtype),
        };
        let Some(ty) = computed.and_then(ScalarType::of_buffer) else {
            return Ok(Err("the reduction's dtype is not lowered".into()));
        };
        let mut operands = Vec::new();
        for (i, o) in self.operands(&r)?.iter().enumerate() {
            // A batch, group or instance norm's other operands are per channel.
            let loaded = if i > 0 && per_channel(&op) {
                self.channel_operand(&mut k, o, &frame_shape, &in_map)?
            } else {
                self.operand(&mut k, o, &frame_shape, &in_map)?
            };
            match loaded {
                Ok(v) => operands.push(v),
                Err(why) => return Ok(Err(why)),
            }
        }
        // Narrow integers convert only through i64: only integer reductions (in i64) read them.
        if ty != ScalarType::I64
            && let Some(narrow) = operands
                .iter()
                .map(|&x| k.b.ty(x))
                .find(|t| t.is_narrow_int())
        {
            return Ok(Err(format!("a reduction of {narrow} values")));
        }
        if operands.first().is_some_and(|&x| k.b.ty(x) != ty) {
            let x = operands[0];
            operands[0] = k.b.push(ty, Expr::Cast(x));
        }
        let count: usize = reduce.iter().product();
        let mut results = match lower_reduction(&op, &mut k.b, &operands, count, ty) {
            Ok(v) => v,
            Err(why) => return Ok(Err(format!("{}: {why}", op.name()))),
        };
        // Results computed in f32 for a half reduction are rounded once to their dtypes.
        for (v, m) in results.iter_mut().zip(&out_meta) {
            let Some(out_ty) = ScalarType::of_buffer(m.dtype) else {
                return Ok(Err(format!(
                    "{:?} reduction outputs are not lowered",
                    m.dtype
                )));
            };
            if k.b.ty(*v) != out_ty {
                *v = k.b.push(out_ty, Expr::Cast(*v));
            }
        }
        let locals: Vec<Local> = results
            .iter()
            .zip(&spec.outputs)
            .zip(&out_meta)
            .map(|((v, map), m)| Local {
                value: *v,
                // A value of the input's shape is built over the frame's.
                shape: if m.shape == input_shape {
                    frame_shape.clone()
                } else {
                    m.shape.clone()
                },
                map: map.clone(),
            })
            .collect();
        if let Some(g) = group.bridge
            && let Some(first) = locals.first()
        {
            k.locals.insert(g, vec![first.clone()]);
        }
        k.locals.insert(r, locals);
        // The epilogue, over the input's frame or the output's.
        if let Some(last) = group.epilogue.last() {
            let mut shape = self.meta(last)?.remove(0).shape;
            let map = if shape == input_shape {
                shape = frame_shape.clone();
                in_map.clone()
            } else {
                match spec.outputs.first().cloned().flatten() {
                    Some(m) if out_meta.first().is_some_and(|o| o.shape == shape) => m,
                    _ => return Ok(Err("the epilogue's shape has no frame".into())),
                }
            };
            for id in group.epilogue {
                if let Err(why) = self.elementwise_member(&mut k, id, &shape, &map)? {
                    return Ok(Err(why));
                }
            }
        }
        let members: Vec<NodeId> = group
            .prologue
            .iter()
            .chain(std::iter::once(&r))
            .chain(group.epilogue)
            .copied()
            .collect();
        self.emit_frame(k, &members, &fused)
    }

    /// Lowers reduction `id` with its prologue, falling back (the prologue as an elementwise
    /// kernel, the reduction through its eager kernel) when the kernel IR cannot express it.
    pub(super) fn reduction(&mut self, group: &ReductionGroup) -> Result<()> {
        match self.reduction_kernel(group)? {
            Ok(()) => Ok(()),
            Err(why) => {
                if !group.epilogue.is_empty() {
                    // Without the epilogue first; then the getitem and the epilogue alone.
                    self.reduction(&ReductionGroup {
                        prologue: group.prologue,
                        reduction: group.reduction,
                        bridge: None,
                        epilogue: &[],
                    })?;
                    if let Some(g) = group.bridge {
                        self.node(&g)?;
                    }
                    return self.partition(group.epilogue);
                }
                if !group.prologue.is_empty() {
                    self.partition(group.prologue)?;
                }
                let op = self.op_of(&group.reduction)?;
                let reason = self
                    .reduction_spec(&group.reduction)?
                    .map(|_| format!("not generated: {why}"));
                match op {
                    Some(op) => {
                        self.external(&group.reduction, crate::ExternalCall::Op(op), reason)
                    }
                    None => self.node(&group.reduction),
                }
            }
        }
    }
}
