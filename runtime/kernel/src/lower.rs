//! Lowering: an op-level graph (module calls inlined) and its fusion groups become a
//! [`Program`]. The elementwise members of each fusion group become one kernel whose loads
//! read their operands through the views before them (folded into index arithmetic); a
//! reduction becomes one kernel with its group's prologue and its epilogue partition
//! ([`reduce`]); max and average pooling without padding become window reductions
//! ([`pool`]); pooling backward whose windows tile the input writes each window once
//! ([`pool_backward`]), max pooling backward otherwise sums the gradients whose saved indices
//! name each input element ([`max_pool_backward`]); adaptive pooling and its average's backward,
//! whatever the bins, become one kernel over the bins' periodic blocks ([`adaptive_pool`]); the elementwise losses become one kernel each, reduced or not
//! ([`loss`]); `cat` becomes one kernel of guarded loads ([`cat`]); batch norm's running-statistics update becomes a batch-count kernel
//! and a per-channel blend ([`batch_norm_update`]); the elementwise quantized ops one kernel each ([`quant`]), the u8 average pools pooling kernels ([`quant_pool`]), the int8 linears and conv2d reduction kernels when product kernels are requested ([`quant_linear`], [`quant_conv`]); embedding, `index_select`, `gather`
//! ([`gather`]) and the negative log-likelihood with its gradient ([`nll`]) read through
//! checked data-dependent loads; views become layouts, never steps; every
//! other node runs its eager kernel as an external step and is reported as a fallback with
//! the reason.

mod adaptive_pool;
mod avg_divisors;
mod batch_norm_update;
mod cat;
mod conv;
mod conv_stage;
mod dynamic_quant;
mod fake_quant;
mod fake_quant_gradients;
mod frame;
mod gather;
mod gemm;
mod gemm_weight;
mod index_check;
mod loss;
mod max_pool_backward;
mod nll;
mod one_hot;
mod pool;
mod pool_backward;
mod quant;
mod quant_conv;
mod quant_linear;
mod quant_pool;
mod reduce;
mod scatter;
mod update;

use crate::schedule::schedule;
use crate::table::lower_elementwise;
use crate::{
    BufferId, BufferRole, ExternalCall, Fallback, IndexExpr, KernelBuilder, KernelError, Program,
    Result, ScalarType, Slot, SlotId, SlotSource, SlotView, Step, ValueId,
};
use reduce::ReductionGroup;
use std::collections::{HashMap, HashSet};
use tessera_fx::{Graph, NodeId, NodeKind};
use tessera_passes::fusion_groups;
use tessera_tensor::layout::{Layout, broadcast_layout};
use tessera_tensor::op::{
    FusionRole, IndexOp, LossOp, OpKind, PoolOp, QuantOp, ViewOp, view_strides,
};
use tessera_tensor::{Op, TensorMeta};

/// A graph value during lowering: a slot seen through views, and the layout those views give.
#[derive(Debug, Clone)]
struct Val {
    slot: SlotId,
    views: Vec<ViewOp>,
    layout: Layout,
}

impl Val {
    fn slot_view(&self) -> SlotView {
        SlotView {
            slot: self.slot,
            views: self.views.clone(),
        }
    }
}

/// What a backend asks of the lowering besides the graph and its inputs' layouts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct LowerOptions {
    /// A GEMM or convolution with no elementwise epilogue to fuse becomes a kernel of its own
    /// (the call and its bias) instead of an external step running its eager kernel. Off for
    /// the CPU, whose eager kernel is the same call without a kernel around it; on for a
    /// device, where an external step would run on the host.
    pub product_kernels: bool,
    /// Whether 3x3 stride-1 convolutions may run as Winograd convolutions
    /// ([`crate::conv_choice`]); off by default.
    pub winograd: crate::WinogradPolicy,
    /// GEMMs read linear weights as stored instead of from a packed transposed copy derived
    /// once per weight ([`gemm_weight`]); on for a device, whose GEMM reads either layout.
    pub weights_as_stored: bool,
    /// Convolution calls compute the convolution only: a max pool after one (with its bias
    /// and ReLU) is never folded into the call ([`crate::ConvCall::stage`]). On for a device,
    /// whose rendered convolution has no such stage.
    pub plain_conv_calls: bool,
}

/// Lowers `graph`, whose inputs have the layouts `input_layouts` (packed where not given),
/// with the default [`LowerOptions`] (the CPU's).
pub fn lower(graph: &Graph, input_layouts: &[Layout]) -> Result<Program> {
    lower_with(graph, input_layouts, LowerOptions::default())
}

/// [`lower`] with `options`.
pub fn lower_with(
    graph: &Graph,
    input_layouts: &[Layout],
    options: LowerOptions,
) -> Result<Program> {
    let grouping = fusion_groups(graph).map_err(|e| KernelError::Grouping {
        source: Box::new(e),
    })?;
    let mut partition_of: HashMap<NodeId, usize> = HashMap::new();
    let mut partitions: Vec<Vec<NodeId>> = Vec::new();
    // The elementwise prologue of each group that ends in a reduction, lowered with it.
    let mut prologue_of: HashMap<NodeId, Vec<NodeId>> = HashMap::new();
    for g in &grouping.groups {
        let members: Vec<NodeId> = g
            .nodes
            .iter()
            .copied()
            .filter(|n| is_elementwise(graph, n))
            .collect();
        if let Some(last) = g
            .nodes
            .last()
            .filter(|l| g.reduction && !is_elementwise(graph, l))
        {
            prologue_of.insert(*last, members);
            continue;
        }
        // A group feeding only the input of a softmax or norm (which grouping leaves alone)
        // is its prologue too, unless it is the epilogue of a GEMM, which fuses it.
        if let Some(r) = members
            .last()
            .filter(|_| g.producer != Some(tessera_tensor::op::Producer::Gemm))
            .and_then(|l| sole_reduction_user(graph, l))
        {
            prologue_of.insert(r, members);
            continue;
        }
        for n in &members {
            partition_of.insert(*n, partitions.len());
        }
        partitions.push(members);
    }
    let mut in_prologue: HashSet<NodeId> = prologue_of.values().flatten().copied().collect();
    // The reduction whose prologue each prologue member is.
    let mut prologue_owner: HashMap<NodeId, NodeId> = prologue_of
        .iter()
        .flat_map(|(r, members)| members.iter().map(move |m| (*m, *r)))
        .collect();
    let mut lowering = Lowering {
        graph,
        program: Program {
            slots: Vec::new(),
            steps: Vec::new(),
            outputs: Vec::new(),
            fallbacks: Vec::new(),
            convolutions: Vec::new(),
            launch_groups: Vec::new(),
        },
        values: HashMap::new(),
        inputs: 0,
        input_layouts,
        options,
        absorbed: HashSet::new(),
    };
    // Reductions (and the getitem after a norm) waiting for their epilogue partition.
    let mut epilogue_for: HashMap<usize, (NodeId, Option<NodeId>)> = HashMap::new();
    let mut deferred: HashSet<NodeId> = HashSet::new();
    // GEMMs waiting for their epilogue partition.
    let mut gemm_for: HashMap<usize, NodeId> = HashMap::new();
    let no_prologue: Vec<NodeId> = Vec::new();
    // How many members of each partition are lowered already, and each member's place.
    let mut lowered = vec![0usize; partitions.len()];
    let place: HashMap<NodeId, usize> = partitions
        .iter()
        .flat_map(|members| members.iter().enumerate().map(|(i, id)| (*id, i)))
        .collect();
    for id in graph.nodes().collect::<Vec<_>>() {
        if in_prologue.contains(&id) || deferred.contains(&id) || lowering.absorbed.contains(&id) {
            continue;
        }
        // A node outside a partition that reads one of its members before the partition's
        // last member (a residual branch reading a ReLU whose group ends at a later add) needs
        // that value now: the members up to it become a kernel of their own, after the GEMM
        // or reduction waiting to fuse them, which then runs unfused.
        let own = partition_of.get(&id).copied();
        for o in graph
            .operands(&id)
            .map_err(|e| graph_error(graph, &id, e))?
        {
            // Likewise a prologue member read by a node other than its reduction (a ReLU that
            // feeds a convolution and, through a residual add, a global average pool): the
            // prologue up to it becomes a kernel now, the reduction reads its value.
            if let Some(&r) = prologue_owner.get(&o)
                && r != id
                && prologue_owner.get(&id) != Some(&r)
                && let Some(members) = prologue_of.get_mut(&r)
                && let Some(at) = members.iter().position(|m| *m == o)
            {
                let head: Vec<NodeId> = members.drain(..=at).collect();
                for m in &head {
                    in_prologue.remove(m);
                    prologue_owner.remove(m);
                }
                lowering.partition(&head)?;
            }
            if let (Some(&p), Some(&at)) = (partition_of.get(&o), place.get(&o))
                && own != Some(p)
                && at >= lowered[p]
            {
                if let Some(g) = gemm_for.remove(&p) {
                    lowering.lone_product(&g)?;
                }
                if let Some((r, bridge)) = epilogue_for.remove(&p) {
                    lowering.reduction(&ReductionGroup {
                        prologue: prologue_of.get(&r).unwrap_or(&no_prologue),
                        reduction: r,
                        bridge: None,
                        epilogue: &[],
                    })?;
                    if let Some(g) = bridge {
                        lowering.node(&g)?;
                    }
                }
                lowering.partition(&partitions[p][lowered[p]..=at])?;
                lowered[p] = at + 1;
            }
        }
        let node = graph.node(&id).map_err(|e| graph_error(graph, &id, e))?;
        match &node.kind {
            NodeKind::CallFunction { .. } if is_elementwise(graph, &id) => match own {
                Some(p) => {
                    if partitions[p].last() == Some(&id) && lowered[p] < partitions[p].len() {
                        let members = &partitions[p][lowered[p]..];
                        if let Some(g) = gemm_for.remove(&p) {
                            lowering.gemm(&g, members)?;
                        } else if let Some((r, bridge)) = epilogue_for.remove(&p) {
                            lowering.reduction(&ReductionGroup {
                                prologue: prologue_of.get(&r).unwrap_or(&no_prologue),
                                reduction: r,
                                bridge,
                                epilogue: members,
                            })?;
                        } else {
                            lowering.partition(members)?;
                        }
                        lowered[p] = partitions[p].len();
                    }
                }
                None => lowering.partition(&[id])?,
            },
            NodeKind::CallFunction { op } if gemm::is_gemm(op) || conv::is_conv(op) => {
                match lowering.gemm_epilogue(&id, &partition_of, &partitions)? {
                    Some(p)
                        if lowered[p] == 0
                            && !gemm_for.contains_key(&p)
                            && !epilogue_for.contains_key(&p) =>
                    {
                        gemm_for.insert(p, id);
                    }
                    _ => lowering.lone_product(&id)?,
                }
            }
            NodeKind::CallFunction { .. }
                if prologue_of.contains_key(&id) || lowering.reduction_spec(&id)?.is_some() =>
            {
                if let Some((p, bridge)) = lowering.epilogue_of(&id, &partition_of, &partitions)?
                    && lowered[p] == 0
                    && !epilogue_for.contains_key(&p)
                    && !gemm_for.contains_key(&p)
                {
                    epilogue_for.insert(p, (id, bridge));
                    deferred.extend(bridge);
                    continue;
                }
                lowering.reduction(&ReductionGroup {
                    prologue: prologue_of.get(&id).unwrap_or(&no_prologue),
                    reduction: id,
                    bridge: None,
                    epilogue: &[],
                })?;
            }
            _ => lowering.node(&id)?,
        }
    }
    let mut program = lowering.program;
    crate::launch_group::group_launches(&mut program);
    Ok(program)
}

/// The reduction the kernel IR expresses that is the only user of `id`, reading it as its
/// input (operand 0) only.
fn sole_reduction_user(graph: &Graph, id: &NodeId) -> Option<NodeId> {
    let users = graph.users(id).ok()?;
    let [user] = users.as_slice() else {
        return None;
    };
    let operands = graph.operands(user).ok()?;
    if operands.first() != Some(id) || operands[1..].contains(id) {
        return None;
    }
    let shape = &graph.node(id).ok()?.meta.first()?.shape;
    match &graph.node(user).ok()?.kind {
        NodeKind::CallFunction { op } => reduce::reducible(op, shape).map(|_| *user),
        _ => None,
    }
}

/// Whether `id` is an elementwise call_function node: one output, or several of one shape
/// (an optimizer update, which fusion grouping lets end a group: see [`has_outputs`]).
fn is_elementwise(graph: &Graph, id: &NodeId) -> bool {
    graph.node(id).is_ok_and(|n| match &n.kind {
        NodeKind::CallFunction { op } => {
            !n.meta.is_empty()
                && n.meta.windows(2).all(|w| w[0].shape == w[1].shape)
                && op.fusion_role() == FusionRole::Elementwise
        }
        _ => false,
    })
}

/// Whether node `id` has more than one output (a multi-output elementwise member is lowered
/// through a frame, [`Lowering::frame_partition`], and is no reduction's epilogue).
fn has_outputs(graph: &Graph, id: &NodeId) -> bool {
    graph.node(id).is_ok_and(|n| n.meta.len() > 1)
}

fn graph_error(graph: &Graph, id: &NodeId, e: tessera_fx::FxError) -> KernelError {
    KernelError::Graph {
        node: graph.display(id),
        source: Box::new(e),
    }
}

/// Why an op of `kind` is not generated yet.
fn fallback_reason(op: &Op) -> String {
    match op.kind() {
        OpKind::Reduction => "reductions are not lowered yet".into(),
        OpKind::Normalization => "normalizations (softmax, norms) are not lowered yet".into(),
        OpKind::Gemm => "a GEMM with no elementwise epilogue to fuse runs its eager kernel".into(),
        OpKind::Convolution => {
            "a convolution with no elementwise epilogue to fuse runs its eager kernel".into()
        }
        OpKind::Pooling => "pooling is not lowered yet".into(),
        OpKind::Indexing => "indexing ops are not lowered yet".into(),
        OpKind::Loss => "losses are not lowered yet".into(),
        OpKind::Quantized if quant_linear::is_int8_product(op) => {
            "an int8 linear or conv2d runs its eager GEMM unless product kernels are requested"
                .into()
        }
        OpKind::Quantized => "this quantized op is not lowered yet".into(),
        OpKind::Opaque => "a user-defined op runs its own kernel".into(),
        kind => format!("{kind:?} ops are not lowered yet"),
    }
}

struct Lowering<'g> {
    graph: &'g Graph,
    program: Program,
    values: HashMap<NodeId, Vec<Val>>,
    inputs: usize,
    input_layouts: &'g [Layout],
    options: LowerOptions,
    /// Nodes a kernel computed along with another: a max pool a convolution call applied.
    absorbed: HashSet<NodeId>,
}

/// `shape`, or `[1]` for a 0-d one: the loops of a kernel over a value that may be 0-d (a
/// reduction over one sample or one source row, a 0-d operand seen as one element of one dim).
fn at_least_one_dim(shape: &[usize]) -> Vec<usize> {
    if shape.is_empty() {
        vec![1]
    } else {
        shape.to_vec()
    }
}

impl Lowering<'_> {
    fn meta(&self, id: &NodeId) -> Result<Vec<TensorMeta>> {
        Ok(self
            .graph
            .node(id)
            .map_err(|e| graph_error(self.graph, id, e))?
            .meta
            .clone())
    }

    fn slot(&mut self, id: &NodeId, meta: TensorMeta, source: SlotSource, layout: Layout) -> Val {
        let name = self.graph.name(id).unwrap_or("?").to_string();
        self.program.slots.push(Slot {
            name,
            meta,
            source,
            layout: layout.clone(),
        });
        Val {
            slot: SlotId::from_index(self.program.slots.len() - 1),
            views: Vec::new(),
            layout,
        }
    }

    /// A new packed slot named `name` of shape `shape` (and the source's dtype) that the
    /// program derives from slot `from` ([`crate::derived`]).
    fn derived_slot(
        &mut self,
        from: SlotId,
        derivation: crate::Derivation,
        name: String,
        shape: Vec<usize>,
    ) -> SlotId {
        let meta = TensorMeta::new(shape.clone(), self.program.slot(from).meta.dtype);
        self.program.slots.push(Slot {
            name,
            meta,
            source: SlotSource::Derived { from, derivation },
            layout: Layout::contiguous(&shape),
        });
        SlotId::from_index(self.program.slots.len() - 1)
    }

    fn value(&self, id: &NodeId) -> Result<Val> {
        self.values
            .get(id)
            .and_then(|v| v.first().cloned())
            .ok_or_else(|| KernelError::Undefined {
                node: self.graph.display(id),
            })
    }

    fn operands(&self, id: &NodeId) -> Result<Vec<NodeId>> {
        self.graph
            .operands(id)
            .map_err(|e| graph_error(self.graph, id, e))
    }

    /// Every node but the elementwise ones.
    fn node(&mut self, id: &NodeId) -> Result<()> {
        let node = self
            .graph
            .node(id)
            .map_err(|e| graph_error(self.graph, id, e))?;
        let meta = node.meta.clone();
        let first = || {
            meta.first().cloned().ok_or_else(|| KernelError::Undefined {
                node: self.graph.display(id),
            })
        };
        let vals = match &node.kind {
            NodeKind::Placeholder { .. } => {
                let m = first()?;
                let layout = self
                    .input_layouts
                    .get(self.inputs)
                    .filter(|l| l.shape == m.shape)
                    .cloned()
                    .unwrap_or_else(|| Layout::contiguous(&m.shape));
                let source = SlotSource::Input(self.inputs);
                self.inputs += 1;
                vec![self.slot(id, m, source, layout)]
            }
            NodeKind::GetAttr { target } => {
                let m = first()?;
                let layout = Layout::contiguous(&m.shape);
                vec![self.slot(id, m, SlotSource::Attribute(target.clone()), layout)]
            }
            // The argmax indices of a max pooling lowered values-only: their only users, the
            // backward nodes, recompute them.
            NodeKind::GetItem { .. } if pool_backward::is_recomputed_indices(self.graph, id) => {
                return Ok(());
            }
            NodeKind::GetItem { index } => {
                let operand = self.operands(id)?.into_iter().next();
                let all = operand.and_then(|o| self.values.get(&o));
                vec![all.and_then(|v| v.get(*index)).cloned().ok_or_else(|| {
                    KernelError::Undefined {
                        node: self.graph.display(id),
                    }
                })?]
            }
            NodeKind::Output => {
                let outs = self
                    .operands(id)?
                    .iter()
                    .map(|o| self.value(o).map(|v| v.slot_view()))
                    .collect::<Result<Vec<_>>>()?;
                self.program.outputs = outs;
                return Ok(());
            }
            NodeKind::CallModule { target, .. } => {
                return self.external(
                    id,
                    ExternalCall::Module(target.clone()),
                    Some("the module call could not be inlined".into()),
                );
            }
            NodeKind::CallFunction { op: Op::View(view) } => {
                let operand = self.operands(id)?.into_iter().next();
                let input = match operand {
                    Some(o) => self.value(&o)?,
                    None => {
                        return Err(KernelError::Undefined {
                            node: self.graph.display(id),
                        });
                    }
                };
                match self.view(id, input, view, &first()?)? {
                    Some(v) => vec![v],
                    None => {
                        return self.external(
                            id,
                            ExternalCall::Op(Op::View(view.clone())),
                            Some("the reshape needs a copy of a tensor kernels do not read".into()),
                        );
                    }
                }
            }
            NodeKind::CallFunction {
                op: Op::BatchNormUpdate(update),
            } => {
                let update = *update;
                return self.batch_norm_update(id, &update);
            }
            NodeKind::CallFunction { op: Op::Optim(_) } => {
                return self.partition(std::slice::from_ref(id));
            }
            NodeKind::CallFunction {
                op: Op::Pool(PoolOp::MaxPool2d(p)),
            } if pool_backward::indices_recomputed(self.graph, id) => {
                return self.pool(id, &Op::Pool(PoolOp::MaxPool2dValues(*p)));
            }
            NodeKind::CallFunction {
                op:
                    op @ Op::Pool(PoolOp::MaxPool2dBackward { .. } | PoolOp::AvgPool2dBackward { .. }),
            } => {
                let op = op.clone();
                return self.pool_backward(id, &op);
            }
            NodeKind::CallFunction {
                op: op @ Op::Pool(PoolOp::AdaptiveAvgPool2dBackward { .. }),
            } => {
                let op = op.clone();
                return self.adaptive_pool_backward(id, &op);
            }
            NodeKind::CallFunction {
                op:
                    op @ Op::Pool(PoolOp::AdaptiveAvgPool2d { .. } | PoolOp::AdaptiveMaxPool2d { .. }),
            } => {
                let op = op.clone();
                return self.adaptive_pool(id, &op);
            }
            NodeKind::CallFunction {
                op:
                    op @ Op::Quant(QuantOp::AvgPool {
                        pool: PoolOp::AdaptiveAvgPool2d { .. },
                        ..
                    }),
            } => {
                let op = op.clone();
                return self.adaptive_pool(id, &op);
            }
            NodeKind::CallFunction {
                op: op @ Op::Index(IndexOp::Cat { dim }),
            } => {
                let (op, dim) = (op.clone(), *dim);
                return self.cat(id, &op, dim);
            }
            NodeKind::CallFunction { op } if loss::elementwise_loss(op).is_some() => {
                let op = op.clone();
                return self.loss(id, &op);
            }
            NodeKind::CallFunction {
                op:
                    op @ (Op::Embedding(_)
                    | Op::Index(IndexOp::IndexSelect { .. } | IndexOp::Gather { .. })),
            } => {
                let op = op.clone();
                return self.indexing(id, &op);
            }
            NodeKind::CallFunction {
                op: op @ Op::Index(IndexOp::OneHot { num_classes }),
            } => {
                let (op, num_classes) = (op.clone(), *num_classes);
                return self.one_hot(id, &op, num_classes);
            }
            NodeKind::CallFunction {
                op:
                    op @ (Op::EmbeddingBackward(_)
                    | Op::Index(IndexOp::IndexAdd { .. } | IndexOp::ScatterAdd { .. })),
            } => {
                let op = op.clone();
                return self.scatter(id, &op);
            }
            NodeKind::CallFunction {
                op: Op::Loss(loss @ (LossOp::Nll { .. } | LossOp::NllBackward { .. })),
            } => {
                let loss = loss.clone();
                return self.nll(id, &loss);
            }
            NodeKind::CallFunction { op } if fake_quant_gradients::is_learnable_backward(op) => {
                let op = op.clone();
                return self.fake_quant_gradients(id, &op);
            }
            NodeKind::CallFunction { op } if fake_quant::lowered_fake_quant(op).is_some() => {
                let op = op.clone();
                return self.fake_quant(id, &op);
            }
            NodeKind::CallFunction { op }
                if self.options.product_kernels && quant_linear::is_int8_product(op) =>
            {
                let op = op.clone();
                return self.int8_product(id, &op);
            }
            NodeKind::CallFunction { op } if quant::lowered_quant(op) => {
                let op = op.clone();
                return self.quant(id, &op);
            }
            NodeKind::CallFunction { op } if pool::window_pool(op).is_some() => {
                let op = op.clone();
                return self.pool(id, &op);
            }
            NodeKind::CallFunction { op } => {
                let op = op.clone();
                return self.external(id, ExternalCall::Op(op), None);
            }
        };
        self.values.insert(*id, vals);
        Ok(())
    }

    /// `input` seen through `view`: a new layout of the same slot, or, for a reshape that no
    /// strides can express, a packed copy made by a kernel (`None` when no kernel can copy
    /// the dtype).
    fn view(
        &mut self,
        id: &NodeId,
        input: Val,
        view: &ViewOp,
        out: &TensorMeta,
    ) -> Result<Option<Val>> {
        let l = &input.layout;
        let layout = match view {
            ViewOp::Reshape(shape) => match view_strides(l, shape) {
                Some(strides) => Layout {
                    shape: shape.clone(),
                    strides,
                    offset: l.offset,
                },
                None => {
                    let Some(copied) = self.copy(id, &input, out)? else {
                        return Ok(None);
                    };
                    let mut v = copied;
                    v.views.push(view.clone());
                    v.layout = Layout::contiguous(shape);
                    return Ok(Some(v));
                }
            },
            ViewOp::Permute(dims) => Layout {
                shape: dims.iter().map(|&d| l.shape[d]).collect(),
                strides: dims.iter().map(|&d| l.strides[d]).collect(),
                offset: l.offset,
            },
            ViewOp::Narrow { dim, start, len } => {
                let mut shape = l.shape.clone();
                shape[*dim] = *len;
                Layout {
                    shape: shape.clone(),
                    strides: l.strides.clone(),
                    // As the eager view: an empty view keeps the offset.
                    offset: if shape.contains(&0) {
                        l.offset
                    } else {
                        l.offset + start * l.strides[*dim]
                    },
                }
            }
            ViewOp::Expand(shape) => {
                broadcast_layout("expand", l, shape).map_err(|e| KernelError::Invalid {
                    kernel: "expand".into(),
                    message: e.to_string(),
                })?
            }
            // Kernels read any layout: making it packed is left to whoever needs packed data.
            ViewOp::Contiguous => l.clone(),
        };
        let mut v = input;
        v.views.push(view.clone());
        v.layout = layout;
        Ok(Some(v))
    }

    /// A kernel copying `input` (of shape `out.shape` before the reshape `id`) into a packed
    /// slot.
    fn copy(&mut self, id: &NodeId, input: &Val, out: &TensorMeta) -> Result<Option<Val>> {
        let Some(ty) = ScalarType::of_buffer(out.dtype) else {
            return Ok(None);
        };
        let shape = input.layout.shape.clone();
        let name = format!("k{}_copy", self.kernel_count());
        let mut b = KernelBuilder::new(name, shape.clone());
        let src = b.buffer(BufferRole::Input, ty, 0);
        let index = IndexExpr {
            offset: input.layout.offset,
            strides: input.layout.strides.clone(),
        };
        let loaded = b.push(
            ty,
            crate::Expr::Load {
                buffer: src,
                index: index.clone(),
            },
        );
        let numel = shape.iter().product();
        let dst = b.buffer(BufferRole::Output, ty, numel);
        b.store(dst, packed_index(&shape), loaded);
        let mut kernel = b.finish();
        kernel.buffers[src.index()].len = index.extent(&shape);
        schedule(&mut kernel);
        kernel.verify()?;
        let meta = TensorMeta::new(shape.clone(), out.dtype);
        self.program.slots.push(Slot {
            name: format!("{}_packed", self.program.slot(input.slot).name),
            meta,
            source: SlotSource::Step,
            layout: Layout::contiguous(&shape),
        });
        let slot = SlotId::from_index(self.program.slots.len() - 1);
        let nodes = self.node_names(std::slice::from_ref(id))?;
        self.program.steps.push(Step::Kernel {
            kernel,
            inputs: vec![input.slot],
            outputs: vec![slot],
            nodes,
        });
        Ok(Some(Val {
            slot,
            views: Vec::new(),
            layout: Layout::contiguous(&shape),
        }))
    }

    /// The names of `ids`, for the steps that compute them.
    fn node_names(&self, ids: &[NodeId]) -> Result<Vec<String>> {
        ids.iter()
            .map(|id| {
                self.graph
                    .node(id)
                    .map(|n| n.name.clone())
                    .map_err(|e| graph_error(self.graph, id, e))
            })
            .collect()
    }

    fn kernel_count(&self) -> usize {
        self.program.kernels().count()
    }

    /// The name of the next kernel: `k<index>_` and the ops of its first four members.
    fn kernel_name<'m>(&self, members: impl IntoIterator<Item = &'m NodeId>) -> String {
        let names: Vec<String> = members
            .into_iter()
            .take(4)
            .filter_map(|m| self.op_of(m).ok().flatten().map(|o| o.name()))
            .collect();
        format!("k{}_{}", self.kernel_count(), names.join("_"))
    }

    /// Runs node `id`'s eager kernel as an external call, reported as a fallback that says
    /// why its kernel was not generated.
    fn not_generated(&mut self, id: &NodeId, op: &Op, why: &str) -> Result<()> {
        let reason = format!("not generated: {why}");
        self.external(id, ExternalCall::Op(op.clone()), Some(reason))
    }

    /// Makes `kernel`'s value node `id`'s, or, when it says why no kernel was generated, runs
    /// the node's eager kernel (reported as a fallback).
    fn value_or_fallback(
        &mut self,
        id: &NodeId,
        op: &Op,
        kernel: std::result::Result<Val, String>,
    ) -> Result<()> {
        match kernel {
            Ok(v) => {
                self.values.insert(*id, vec![v]);
                Ok(())
            }
            Err(why) => self.not_generated(id, op, &why),
        }
    }

    /// Runs `id` through its eager kernel (or module), recording the fallback.
    fn external(&mut self, id: &NodeId, call: ExternalCall, reason: Option<String>) -> Result<()> {
        let inputs = self
            .operands(id)?
            .iter()
            .map(|o| self.value(o).map(|v| v.slot_view()))
            .collect::<Result<Vec<_>>>()?;
        let op_name = match &call {
            ExternalCall::Op(op) => op.name(),
            ExternalCall::Module(target) => target.clone(),
        };
        let reason = reason.unwrap_or_else(|| match &call {
            ExternalCall::Op(op) => fallback_reason(op),
            ExternalCall::Module(_) => "a module call".into(),
        });
        let node = self.graph.name(id).unwrap_or("?").to_string();
        self.program.fallbacks.push(Fallback {
            node: node.clone(),
            op: op_name,
            reason,
        });
        let mut vals = Vec::new();
        for m in self.meta(id)? {
            let layout = Layout::contiguous(&m.shape);
            vals.push(self.slot(id, m, SlotSource::Step, layout));
        }
        self.program.steps.push(Step::External {
            node,
            call,
            inputs,
            outputs: vals.iter().map(|v| v.slot).collect(),
        });
        self.values.insert(*id, vals);
        Ok(())
    }

    /// Lowers the elementwise members of one fusion group into one kernel, or, when the
    /// kernel IR cannot express them yet, runs each through its eager kernel.
    fn partition(&mut self, members: &[NodeId]) -> Result<()> {
        let attempt = if members.iter().any(|m| has_outputs(self.graph, m)) {
            self.frame_partition(members)?
        } else {
            self.try_kernel(members)?
        };
        match attempt {
            Ok(()) => Ok(()),
            Err(reason) => {
                for id in members {
                    let Some(op) = self.op_of(id)? else {
                        continue;
                    };
                    let why = format!("not generated: {reason}");
                    self.external(id, ExternalCall::Op(op), Some(why))?;
                }
                Ok(())
            }
        }
    }

    /// The kernel of `members`; the inner error says why the kernel IR cannot express it.
    fn try_kernel(&mut self, members: &[NodeId]) -> Result<Result<(), String>> {
        let inside: HashSet<NodeId> = members.iter().copied().collect();
        let Some(last) = members.last() else {
            return Ok(Ok(()));
        };
        let domain = match self.meta(last)?.first() {
            Some(m) => m.shape.clone(),
            None => return Ok(Err("the node has no value".into())),
        };
        let name = self.kernel_name(members);
        let mut b = KernelBuilder::new(name, domain.clone());
        let mut local: HashMap<NodeId, ValueId> = HashMap::new();
        let mut buffers: HashMap<SlotId, BufferId> = HashMap::new();
        let mut inputs: Vec<SlotId> = Vec::new();
        for id in members {
            let meta = self.meta(id)?;
            let Some(out) = meta.first() else {
                return Ok(Err("the node has no value".into()));
            };
            if out.shape != domain {
                return Ok(Err(format!(
                    "shape {:?} differs from the group's {domain:?}",
                    out.shape
                )));
            }
            let Some(out_ty) = ScalarType::of_value(out.dtype) else {
                return Ok(Err(format!("{:?} values are not lowered yet", out.dtype)));
            };
            let mut operands = Vec::new();
            for o in self.operands(id)? {
                if let Some(v) = local.get(&o) {
                    operands.push(*v);
                    continue;
                }
                let val = self.value(&o)?;
                let dtype = self.program.slot(val.slot).meta.dtype;
                let Some(ty) = ScalarType::of_buffer(dtype) else {
                    return Ok(Err(format!("reading {dtype:?} tensors is not lowered yet")));
                };
                let Ok(view) = broadcast_layout("load", &val.layout, &domain) else {
                    return Ok(Err(format!(
                        "{:?} does not broadcast to {domain:?}",
                        val.layout.shape
                    )));
                };
                let buffer = *buffers.entry(val.slot).or_insert_with(|| {
                    inputs.push(val.slot);
                    b.buffer(BufferRole::Input, ty, 0)
                });
                let index = IndexExpr {
                    offset: view.offset,
                    strides: view.strides,
                };
                operands.push(b.push(ty, crate::Expr::Load { buffer, index }));
            }
            let Some(op) = self.op_of(id)? else {
                return Ok(Err("not an op".into()));
            };
            match lower_elementwise(&op, &mut b, &operands, out_ty) {
                Ok(v) => {
                    local.insert(*id, v);
                }
                Err(reason) => return Ok(Err(format!("{}: {reason}", op.name()))),
            }
        }
        // The members whose values leave the group are the kernel's outputs.
        let mut outputs: Vec<(NodeId, TensorMeta)> = Vec::new();
        for id in members {
            let users = self
                .graph
                .users(id)
                .map_err(|e| graph_error(self.graph, id, e))?;
            if users.iter().any(|u| !inside.contains(u)) {
                let meta = self.meta(id)?.remove(0);
                if ScalarType::of_buffer(meta.dtype).is_none() {
                    return Ok(Err(format!(
                        "writing {:?} tensors is not lowered yet",
                        meta.dtype
                    )));
                }
                outputs.push((*id, meta));
            }
        }
        let numel: usize = domain.iter().product();
        let mut out_buffers = Vec::new();
        for (id, meta) in &outputs {
            let ty = ScalarType::of_buffer(meta.dtype).unwrap_or(ScalarType::F32);
            let buffer = b.buffer(BufferRole::Output, ty, numel);
            b.store(buffer, packed_index(&domain), local[id]);
            out_buffers.push(buffer);
        }
        let mut kernel = b.finish();
        // Each input buffer is as long as the furthest index any of its loads reaches.
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
        let mut out_slots = Vec::new();
        for (id, meta) in outputs {
            let layout = Layout::contiguous(&meta.shape);
            let v = self.slot(&id, meta, SlotSource::Step, layout);
            out_slots.push(v.slot);
            self.values.insert(id, vec![v]);
        }
        let nodes = self.node_names(members)?;
        self.program.steps.push(Step::Kernel {
            kernel,
            inputs,
            outputs: out_slots,
            nodes,
        });
        Ok(Ok(()))
    }
}

/// The row-major index of a packed tensor of `shape`.
fn packed_index(shape: &[usize]) -> IndexExpr {
    IndexExpr {
        offset: 0,
        strides: Layout::contiguous(shape).strides,
    }
}
