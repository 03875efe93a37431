//! Lowering of reductions (sum, mean, amax/amin, var/std, logsumexp, softmax, log-softmax,
//! layer and RMS norm, global average pooling) into one kernel each, with the elementwise
//! prologue of their fusion group and an elementwise epilogue that only they feed fused in.
//! The kernel's output loops are the input's kept dims and its reduction loops the reduced
//! dims; every tensor a member reads or writes is indexed through a *frame map* from its
//! dims to those loops, so broadcasting a statistic back over the input is a zero stride.

use super::{Lowering, graph_error, is_elementwise};
use crate::{
    BufferId, BufferRole, Expr, IndexExpr, KernelBuilder, Result, ScalarType, SlotId, SlotSource,
    Step, ValueId, lower_elementwise, lower_reduction, schedule::schedule,
};
use std::collections::{HashMap, HashSet};
use tessera_fx::{NodeId, NodeKind};
use tessera_tensor::layout::{Layout, broadcast_layout};
use tessera_tensor::op::{NormOp, PoolOp, ReduceKind};
use tessera_tensor::{Op, TensorMeta};

/// For each dim of a tensor, the kernel loop it walks (`None`: a size-1 dim of a statistic).
type FrameMap = Vec<Option<usize>>;

/// What a reducible op reduces: the reduced dims of its input, and the frame map of each of
/// its outputs (`None` for a flat per-row statistic, packed over the output loops).
#[derive(Debug, Clone)]
pub(super) struct ReduceSpec {
    reduced: Vec<usize>,
    outputs: Vec<Option<FrameMap>>,
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
    let (reduced, outputs): (Vec<usize>, Vec<Option<FrameMap>>) = match op {
        Op::Reduce(r) => {
            let lowered = matches!(
                r.kind,
                ReduceKind::Sum
                    | ReduceKind::Mean
                    | ReduceKind::Amax
                    | ReduceKind::Amin
                    | ReduceKind::Var { .. }
                    | ReduceKind::Std { .. }
                    | ReduceKind::LogSumExp
            );
            if !lowered || nd == 0 || r.dims.is_empty() || r.dims.iter().any(|&d| d >= nd) {
                return None;
            }
            (r.dims.clone(), vec![Some(keep(&r.dims, r.keepdim))])
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
    Some(ReduceSpec { reduced, outputs })
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

/// A value of the kernel being built, with its shape and frame map (`None`: flat over the
/// output loops).
#[derive(Debug, Clone)]
struct Local {
    value: ValueId,
    shape: Vec<usize>,
    map: Option<FrameMap>,
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
    fn op_of(&self, id: &NodeId) -> Result<Option<Op>> {
        Ok(
            match &self
                .graph
                .node(id)
                .map_err(|e| graph_error(self.graph, id, e))?
                .kind
            {
                NodeKind::CallFunction { op } => Some(op.clone()),
                _ => None,
            },
        )
    }

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
        let users = self
            .graph
            .users(&target)
            .map_err(|e| graph_error(self.graph, &target, e))?;
        let mut parts = users.iter().map(|u| partition_of.get(u).copied());
        let Some(Some(p)) = parts.next() else {
            return Ok(None);
        };
        if !parts.all(|q| q == Some(p)) {
            return Ok(None);
        }
        let out_shape = self.meta(&target)?.first().map(|m| m.shape.clone());
        let shape = partitions[p]
            .last()
            .map(|l| self.meta(l))
            .transpose()?
            .and_then(|m| m.first().map(|m| m.shape.clone()));
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
        let kept: Vec<usize> = (0..input_shape.len())
            .filter(|d| !spec.reduced.contains(d))
            .collect();
        let domain: Vec<usize> = kept.iter().map(|&d| input_shape[d]).collect();
        let reduce: Vec<usize> = spec.reduced.iter().map(|&d| input_shape[d]).collect();
        let names: Vec<String> = group
            .prologue
            .iter()
            .chain(std::iter::once(&r))
            .chain(group.epilogue)
            .take(4)
            .filter_map(|m| self.op_of(m).ok().flatten().map(|o| o.name()))
            .collect();
        let name = format!("k{}_{}", self.kernel_count(), names.join("_"));
        let mut k = Frame {
            b: KernelBuilder::reduction(name, domain.clone(), reduce.clone()),
            locals: HashMap::new(),
            buffers: HashMap::new(),
            inputs: Vec::new(),
        };
        let in_map = input_map(&spec.reduced, input_shape.len());
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
            if let Err(why) = self.elementwise_member(&mut k, id, &input_shape, &in_map)? {
                return Ok(Err(why));
            }
        }
        // The reduction.
        let out_meta = self.meta(&r)?;
        let Some(ty) = out_meta
            .first()
            .and_then(|m| ScalarType::of_buffer(m.dtype))
        else {
            return Ok(Err("the reduction's dtype is not lowered".into()));
        };
        let mut operands = Vec::new();
        for o in self.operands(&r)? {
            match self.operand(&mut k, &o, &input_shape, &in_map)? {
                Ok(v) => operands.push(v),
                Err(why) => return Ok(Err(why)),
            }
        }
        if operands.first().is_some_and(|&x| k.b.ty(x) != ty) {
            let x = operands[0];
            operands[0] = k.b.push(ty, Expr::Cast(x));
        }
        let count: usize = reduce.iter().product();
        let results = match lower_reduction(&op, &mut k.b, &operands, count, ty) {
            Ok(v) => v,
            Err(why) => return Ok(Err(format!("{}: {why}", op.name()))),
        };
        let locals: Vec<Local> = results
            .iter()
            .zip(&spec.outputs)
            .zip(&out_meta)
            .map(|((v, map), m)| Local {
                value: *v,
                shape: m.shape.clone(),
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
            let shape = self.meta(last)?.remove(0).shape;
            let map = if shape == input_shape {
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
        // The fused nodes whose values leave the kernel are its outputs.
        let mut outputs: Vec<(NodeId, Vec<(Local, TensorMeta)>)> = Vec::new();
        for id in group
            .prologue
            .iter()
            .chain(std::iter::once(&r))
            .chain(group.epilogue)
        {
            let users = self
                .graph
                .users(id)
                .map_err(|e| graph_error(self.graph, id, e))?;
            if users.iter().all(|u| fused.contains(u)) {
                continue;
            }
            let mut stored = Vec::new();
            for (local, meta) in k.locals[id].iter().zip(self.meta(id)?) {
                if ScalarType::of_buffer(meta.dtype).is_none() {
                    return Ok(Err(format!(
                        "writing {:?} tensors is not lowered",
                        meta.dtype
                    )));
                }
                stored.push((local.clone(), meta));
            }
            outputs.push((*id, stored));
        }
        let loops = domain.len() + reduce.len();
        let mut out_buffers = Vec::new();
        for (_, stored) in &outputs {
            for (local, meta) in stored {
                let ty = ScalarType::of_buffer(meta.dtype).unwrap_or(ScalarType::F32);
                let numel: usize = meta.shape.iter().product();
                let buffer = k.b.buffer(BufferRole::Output, ty, numel);
                let index = match &local.map {
                    Some(map) => frame_index(&Layout::contiguous(&meta.shape), map, loops),
                    None if numel != domain.iter().product::<usize>() => {
                        // A norm over no elements has no statistics, however many rows.
                        return Ok(Err(format!(
                            "{:?} statistics for {domain:?} rows",
                            meta.shape
                        )));
                    }
                    None => {
                        let mut strides = Layout::contiguous(&domain).strides;
                        strides.resize(loops, 0);
                        IndexExpr { offset: 0, strides }
                    }
                };
                k.b.store(buffer, index, local.value);
                out_buffers.push(buffer);
            }
        }
        let mut kernel = k.b.finish();
        for buffer in k.buffers.values() {
            let extent = kernel
                .accesses()
                .filter(|(b, _)| b == buffer)
                .map(|(_, ix)| kernel.reach(ix))
                .max()
                .unwrap_or(0);
            kernel.buffers[buffer.index()].len = extent;
        }
        schedule(&mut kernel);
        kernel.verify()?;
        let mut out_slots = Vec::new();
        for (id, stored) in outputs {
            let mut vals = Vec::new();
            for (_, meta) in stored {
                let layout = Layout::contiguous(&meta.shape);
                let v = self.slot(&id, meta, SlotSource::Step, layout);
                out_slots.push(v.slot);
                vals.push(v);
            }
            self.values.insert(id, vals);
        }
        self.program.steps.push(Step::Kernel {
            kernel,
            inputs: k.inputs,
            outputs: out_slots,
        });
        Ok(Ok(()))
    }

    /// Lowers the elementwise node `id`, of shape `shape` with frame map `map`, into `k`.
    fn elementwise_member(
        &mut self,
        k: &mut Frame,
        id: &NodeId,
        shape: &[usize],
        map: &FrameMap,
    ) -> Result<std::result::Result<(), String>> {
        if !is_elementwise(self.graph, id) {
            return Ok(Err("a fused member is not elementwise".into()));
        }
        let Some(out) = self.meta(id)?.first().cloned() else {
            return Ok(Err("the node has no value".into()));
        };
        if out.shape != shape {
            return Ok(Err(format!("{:?} differs from {shape:?}", out.shape)));
        }
        let Some(out_ty) = ScalarType::of_value(out.dtype) else {
            return Ok(Err(format!("{:?} values are not lowered", out.dtype)));
        };
        let mut operands = Vec::new();
        for o in self.operands(id)? {
            match self.operand(k, &o, shape, map)? {
                Ok(v) => operands.push(v),
                Err(why) => return Ok(Err(why)),
            }
        }
        let Some(op) = self.op_of(id)? else {
            return Ok(Err("not an op".into()));
        };
        match lower_elementwise(&op, &mut k.b, &operands, out_ty) {
            Ok(v) => {
                k.locals.insert(
                    *id,
                    vec![Local {
                        value: v,
                        shape: shape.to_vec(),
                        map: Some(map.clone()),
                    }],
                );
                Ok(Ok(()))
            }
            Err(why) => Ok(Err(format!("{}: {why}", op.name()))),
        }
    }

    /// The value of node `o` broadcast to `shape` with frame map `map`: a fused value whose
    /// frame agrees, or a load of its slot.
    fn operand(
        &mut self,
        k: &mut Frame,
        o: &NodeId,
        shape: &[usize],
        map: &FrameMap,
    ) -> Result<std::result::Result<ValueId, String>> {
        if let Some(local) = k.locals.get(o).and_then(|l| l.first()) {
            let lead = shape.len().checked_sub(local.shape.len());
            let agrees = match (&local.map, lead) {
                (Some(m), Some(lead)) => (0..local.shape.len())
                    .all(|d| local.shape[d] == 1 || (m[d].is_some() && m[d] == map[lead + d])),
                _ => false,
            };
            return Ok(if agrees {
                Ok(local.value)
            } else {
                Err(format!(
                    "a fused value of shape {:?} is read at shape {shape:?}",
                    local.shape
                ))
            });
        }
        let val = self.value(o)?;
        let dtype = self.program.slot(val.slot).meta.dtype;
        let Some(ty) = ScalarType::of_buffer(dtype) else {
            return Ok(Err(format!("reading {dtype:?} tensors is not lowered")));
        };
        let Ok(view) = broadcast_layout("load", &val.layout, shape) else {
            return Ok(Err(format!(
                "{:?} does not broadcast to {shape:?}",
                val.layout.shape
            )));
        };
        let loops = k.b.loop_count();
        let buffer = match k.buffers.get(&val.slot) {
            Some(b) => *b,
            None => {
                let b = k.b.buffer(BufferRole::Input, ty, 0);
                k.buffers.insert(val.slot, b);
                k.inputs.push(val.slot);
                b
            }
        };
        let index = frame_index(&view, map, loops);
        Ok(Ok(k.b.push(ty, Expr::Load { buffer, index })))
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
                let reason = match self.reduction_spec(&group.reduction)? {
                    Some(_) => Some(format!("not generated: {why}")),
                    None => None,
                };
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

/// The kernel being built and what it reads.
struct Frame {
    b: KernelBuilder,
    locals: HashMap<NodeId, Vec<Local>>,
    buffers: HashMap<SlotId, BufferId>,
    inputs: Vec<SlotId>,
}

/// The index of `view` (already broadcast to the frame's shape) through `map`, over `loops`
/// loops.
fn frame_index(view: &Layout, map: &FrameMap, loops: usize) -> IndexExpr {
    let mut strides = vec![0usize; loops];
    for (d, l) in map.iter().enumerate() {
        if let Some(l) = l {
            strides[*l] += view.strides[d];
        }
    }
    IndexExpr {
        offset: view.offset,
        strides,
    }
}
