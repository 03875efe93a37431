//! Building one fused kernel from graph nodes: each tensor a member reads or writes is
//! indexed through a *frame map* from its dims to the kernel's loops, values computed in the
//! kernel are reused where their frames agree (a statistic broadcast back over the input is a
//! zero stride), other operands are loaded from their slots, and the members whose values
//! leave the fused set become the kernel's stores. Reductions ([`super::reduce`]) and GEMM
//! epilogues ([`super::gemm`]) are built this way.

use super::{Lowering, graph_error, is_elementwise};
use crate::{
    BufferId, BufferRole, Expr, IndexExpr, KernelBuilder, Result, ScalarType, SlotId, SlotSource,
    Step, ValueId, schedule::schedule,
};
use std::collections::{HashMap, HashSet};
use tessera_fx::{NodeId, NodeKind};
use tessera_tensor::layout::{Layout, broadcast_layout};
use tessera_tensor::op::view_strides;
use tessera_tensor::{Op, TensorMeta};

/// For each dim of a tensor, the kernel loop it walks (`None`: a size-1 dim of a statistic).
pub(super) type FrameMap = Vec<Option<usize>>;

/// A value of the kernel being built, with its shape and frame map (`None`: flat over the
/// output loops).
#[derive(Debug, Clone)]
pub(super) struct Local {
    pub(super) value: ValueId,
    pub(super) shape: Vec<usize>,
    pub(super) map: Option<FrameMap>,
}

/// The kernel being built and what it reads.
pub(super) struct Frame {
    pub(super) b: KernelBuilder,
    pub(super) locals: HashMap<NodeId, Vec<Local>>,
    buffers: HashMap<SlotId, BufferId>,
    inputs: Vec<SlotId>,
    /// Graph tensors of the first shape are seen in the second, one of whose dims is split in
    /// two (group norm's `[N, C, ...]` as `[N, G, C / G, ...]`): members of the graph shape are
    /// built over the frame shape, and their operands are loaded through the split.
    pub(super) regroup: Option<(Vec<usize>, Vec<usize>)>,
}

impl Frame {
    pub(super) fn new(b: KernelBuilder) -> Frame {
        Frame {
            b,
            locals: HashMap::new(),
            buffers: HashMap::new(),
            inputs: Vec::new(),
            regroup: None,
        }
    }

    /// The graph shape of tensors built over the frame shape `shape`.
    pub(super) fn graph_shape<'s>(&'s self, shape: &'s [usize]) -> &'s [usize] {
        match &self.regroup {
            Some((graph, frame)) if frame == shape => graph,
            _ => shape,
        }
    }
}

/// The index of `view` (already broadcast to the frame's shape) through `map`, over `loops`
/// loops.
pub(super) fn frame_index(view: &Layout, map: &FrameMap, loops: usize) -> IndexExpr {
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

impl Lowering<'_> {
    pub(super) fn op_of(&self, id: &NodeId) -> Result<Option<Op>> {
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

    /// The one partition every user of `target` is in, and the shape of its nodes.
    pub(super) fn users_partition(
        &self,
        target: &NodeId,
        partition_of: &HashMap<NodeId, usize>,
        partitions: &[Vec<NodeId>],
    ) -> Result<Option<(usize, Vec<usize>)>> {
        let users = self
            .graph
            .users(target)
            .map_err(|e| graph_error(self.graph, target, e))?;
        let mut parts = users.iter().map(|u| partition_of.get(u).copied());
        let Some(Some(p)) = parts.next() else {
            return Ok(None);
        };
        if !parts.all(|q| q == Some(p)) {
            return Ok(None);
        }
        let shape = partitions[p]
            .last()
            .map(|l| self.meta(l))
            .transpose()?
            .and_then(|m| m.first().map(|m| m.shape.clone()));
        Ok(shape.map(|s| (p, s)))
    }

    /// The input buffer of `slot` in `k` (one per slot).
    pub(super) fn input_buffer(k: &mut Frame, slot: SlotId, ty: ScalarType) -> BufferId {
        match k.buffers.get(&slot) {
            Some(b) => *b,
            None => {
                let b = k.b.buffer(BufferRole::Input, ty, 0);
                k.buffers.insert(slot, b);
                k.inputs.push(slot);
                b
            }
        }
    }

    /// Finishes `k`: the `members` (in order) whose values leave `fused` are stored, the
    /// kernel is scheduled, verified and becomes a step; the inner error says why the kernel
    /// IR cannot express it (nothing was emitted then).
    pub(super) fn emit_frame(
        &mut self,
        mut k: Frame,
        members: &[NodeId],
        fused: &HashSet<NodeId>,
    ) -> Result<std::result::Result<(), String>> {
        // The fused nodes whose values leave the kernel are its outputs.
        let mut outputs: Vec<(NodeId, Vec<(Local, TensorMeta)>)> = Vec::new();
        for id in members {
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
        let domain = k.b.domain().to_vec();
        let loops = k.b.loop_count();
        let mut out_buffers = Vec::new();
        for (_, stored) in &outputs {
            for (local, meta) in stored {
                let ty = ScalarType::of_buffer(meta.dtype).unwrap_or(ScalarType::F32);
                let numel: usize = meta.shape.iter().product();
                let buffer = k.b.buffer(BufferRole::Output, ty, numel);
                let index = match &local.map {
                    // Over the local's own shape: a regrouped value is packed in the frame's.
                    Some(map) => frame_index(&Layout::contiguous(&local.shape), map, loops),
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
        crate::read_back::read_back_shared_values(&mut kernel);
        for buffer in k.buffers.values() {
            let extent = kernel.buffer_reach(*buffer);
            let operand = kernel.gemm.as_ref().and_then(|g| {
                let (rows, n, _) = kernel.gemm_shape()?;
                if g.a == *buffer {
                    Some(g.a_index.reach(rows, g.k))
                } else if g.b == *buffer {
                    Some(g.b_index.reach(g.k, n))
                } else {
                    None
                }
            });
            let convolved = kernel.conv.as_ref().and_then(|c| {
                let numel = |s: &[usize]| s.iter().product::<usize>();
                if c.input == *buffer {
                    Some(numel(&c.input_shape))
                } else if c.weight == *buffer {
                    c.weight_len()
                } else if c.bias == Some(*buffer) {
                    Some(c.weight_shape[0])
                } else {
                    None
                }
            });
            kernel.buffers[buffer.index()].len =
                extent.max(operand.unwrap_or(0)).max(convolved.unwrap_or(0));
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
        let nodes = self.node_names(members)?;
        self.program.steps.push(Step::Kernel {
            kernel,
            inputs: k.inputs,
            outputs: out_slots,
            nodes,
        });
        Ok(Ok(()))
    }

    /// Finishes `k` as a step of node `id` whose results are not the node's values: each of
    /// `values` is stored packed over the output loops into a new slot of its `meta` (whose
    /// shape has as many elements); the slots, in order.
    pub(super) fn emit_values(
        &mut self,
        mut k: Frame,
        id: &NodeId,
        values: Vec<(ValueId, TensorMeta)>,
    ) -> Result<Vec<super::Val>> {
        let domain = k.b.domain().to_vec();
        let loops = k.b.loop_count();
        let mut strides = Layout::contiguous(&domain).strides;
        strides.resize(loops, 0);
        let numel: usize = domain.iter().product();
        let mut metas = Vec::with_capacity(values.len());
        for (value, meta) in values {
            let ty = k.b.ty(value);
            let buffer = k.b.buffer(BufferRole::Output, ty, numel);
            let index = IndexExpr {
                offset: 0,
                strides: strides.clone(),
            };
            k.b.store(buffer, index, value);
            metas.push(meta);
        }
        let mut kernel = k.b.finish();
        for buffer in k.buffers.values() {
            kernel.buffers[buffer.index()].len = kernel.buffer_reach(*buffer);
        }
        schedule(&mut kernel);
        kernel.verify()?;
        let mut vals = Vec::with_capacity(metas.len());
        for meta in metas {
            let layout = Layout::contiguous(&meta.shape);
            vals.push(self.slot(id, meta, SlotSource::Step, layout));
        }
        let nodes = self.node_names(std::slice::from_ref(id))?;
        self.program.steps.push(Step::Kernel {
            kernel,
            inputs: k.inputs,
            outputs: vals.iter().map(|v| v.slot).collect(),
            nodes,
        });
        Ok(vals)
    }

    /// Lowers the elementwise node `id`, of shape `shape` with frame map `map`, into `k`.
    pub(super) fn elementwise_member(
        &mut self,
        k: &mut Frame,
        id: &NodeId,
        shape: &[usize],
        map: &FrameMap,
    ) -> Result<std::result::Result<(), String>> {
        if !is_elementwise(self.graph, id) {
            return Ok(Err("a fused member is not elementwise".into()));
        }
        let outputs = self.meta(id)?;
        let Some(out) = outputs.first() else {
            return Ok(Err("the node has no value".into()));
        };
        if out.shape != k.graph_shape(shape) {
            return Ok(Err(format!("{:?} differs from {shape:?}", out.shape)));
        }
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
        match super::update::member_values(&op, &mut k.b, &operands, &outputs) {
            Ok(values) => {
                let locals = values
                    .into_iter()
                    .map(|value| Local {
                        value,
                        shape: shape.to_vec(),
                        map: Some(map.clone()),
                    })
                    .collect();
                k.locals.insert(*id, locals);
                Ok(Ok(()))
            }
            Err(why) => Ok(Err(format!("{}: {why}", op.name()))),
        }
    }

    /// The value of node `o` broadcast to `shape` with frame map `map`: a fused value whose
    /// frame agrees, or a load of its slot.
    pub(super) fn operand(
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
        self.load(k, val.slot, &val.layout, shape, map)
    }

    /// A per-channel operand (a `[C]` weight, bias or running statistic of a batch, group or
    /// instance norm) read at `shape`, whose dim 1 is the channel, with frame map `map`.
    pub(super) fn channel_operand(
        &mut self,
        k: &mut Frame,
        o: &NodeId,
        shape: &[usize],
        map: &FrameMap,
    ) -> Result<std::result::Result<ValueId, String>> {
        let val = self.value(o)?;
        let graph = k.graph_shape(shape).to_vec();
        let (&[channels], &[stride]) = (val.layout.shape.as_slice(), val.layout.strides.as_slice())
        else {
            return Ok(Err(format!(
                "a per-channel operand of shape {:?}",
                val.layout.shape
            )));
        };
        if graph.len() < 2 || graph[1] != channels {
            return Ok(Err(format!(
                "{channels} channels for an input of {graph:?}"
            )));
        }
        let mut unsqueezed = Layout {
            shape: vec![1; graph.len()],
            strides: vec![0; graph.len()],
            offset: val.layout.offset,
        };
        unsqueezed.shape[1] = channels;
        unsqueezed.strides[1] = stride;
        self.load(k, val.slot, &unsqueezed, shape, map)
    }

    /// A quantization parameter (a scale or zero point of one element, or, with `axis`, one
    /// per index of dim `axis` of `shape`) read at `shape` with frame map `map`.
    pub(super) fn parameter_operand(
        &mut self,
        k: &mut Frame,
        o: &NodeId,
        axis: Option<usize>,
        shape: &[usize],
        map: &FrameMap,
    ) -> Result<std::result::Result<ValueId, String>> {
        let val = self.value(o)?;
        let graph = k.graph_shape(shape).to_vec();
        let mut along = Layout {
            shape: vec![1; graph.len()],
            strides: vec![0; graph.len()],
            offset: val.layout.offset,
        };
        if let Some(axis) = axis {
            let channels = val.layout.shape.iter().product::<usize>();
            if graph.get(axis) != Some(&channels) || val.layout.shape.len() > 1 {
                return Ok(Err(format!(
                    "a parameter of shape {:?} along dim {axis} of {graph:?}",
                    val.layout.shape
                )));
            }
            along.shape[axis] = channels;
            along.strides[axis] = val.layout.strides.first().copied().unwrap_or(0);
        } else if val.layout.shape.iter().product::<usize>() != 1 {
            return Ok(Err(format!(
                "a per-tensor parameter of shape {:?}",
                val.layout.shape
            )));
        }
        self.load(k, val.slot, &along, shape, map)
    }

    /// A load of `slot`, seen with `layout`, broadcast to `shape` (through the frame's
    /// regrouping when `shape` is its frame shape) with frame map `map`.
    pub(super) fn load(
        &mut self,
        k: &mut Frame,
        slot: SlotId,
        layout: &Layout,
        shape: &[usize],
        map: &FrameMap,
    ) -> Result<std::result::Result<ValueId, String>> {
        let dtype = self.program.slot(slot).meta.dtype;
        let Some(ty) = ScalarType::of_buffer(dtype) else {
            return Ok(Err(format!("reading {dtype:?} tensors is not lowered")));
        };
        let graph = k.graph_shape(shape).to_vec();
        let Ok(mut view) = broadcast_layout("load", layout, &graph) else {
            return Ok(Err(format!(
                "{:?} does not broadcast to {graph:?}",
                layout.shape
            )));
        };
        if graph != shape {
            // Splitting a dim is a view of any layout.
            let Some(strides) = view_strides(&view, shape) else {
                return Ok(Err(format!("{graph:?} does not split into {shape:?}")));
            };
            view = Layout {
                shape: shape.to_vec(),
                strides,
                offset: view.offset,
            };
        }
        let loops = k.b.loop_count();
        let buffer = Self::input_buffer(k, slot, ty);
        let index = frame_index(&view, map, loops);
        Ok(Ok(k.b.push(ty, Expr::Load { buffer, index })))
    }
}
