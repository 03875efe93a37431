//! Which channels depend on which: every value on a path from a conv or linear layer carries a
//! channel map (for each channel at dim 1, the producer group and channel it comes from).
//! Layers are `call_module` nodes or, in graphs traced with every module inlined, `conv2d` and
//! `linear` ops whose weights are `get_attr` nodes no other node reads. Activations, pooling and
//! batch norm (module or op) pass maps through, flatten repeats each channel over its spatial
//! size, `cat` on dim 1 concatenates maps and elementwise ops of two same-shaped values
//! (residual adds) merge their groups, which must then drop the same channels. A map reaching
//! anything else (the output, an unknown op, a grouped conv, a layer sharing its weights) pins
//! its groups: they are not pruned.

use crate::Result;
use crate::attributes::{attr_target, attr_targets};
use std::collections::HashMap;
use tessera_fx::{GraphModule, NodeId, NodeKind};
use tessera_nn::{Module, ModuleExt, ModuleKind};
use tessera_tensor::Op;
use tessera_tensor::op::{BinaryOp, ConvOp, IndexOp, NormOp, OpKind, ViewOp};

/// For each channel of a value: `(group, channel of the group)`, or `None` for a channel no
/// prunable layer produced.
pub type ChannelMap = Vec<Option<(usize, usize)>>;

/// What the graph's channel dependencies allow.
#[derive(Debug, Default)]
pub struct ChannelGroups {
    parent: Vec<usize>,
    /// Groups merged under each root (union by size).
    members: Vec<usize>,
    size: Vec<usize>,
    pinned: Vec<bool>,
    /// Prunable layers (`Conv2d` without groups, 2-D `Linear`, as modules or ops) and the group
    /// of their output.
    pub producers: Vec<(NodeId, usize)>,
    /// Conv and linear calls and the map of their input (their input channels follow it).
    pub consumers: Vec<(NodeId, ChannelMap)>,
    /// Per-channel modules and ops (batch norm) and the map of their input.
    pub followers: Vec<(NodeId, ChannelMap)>,
    /// Flattening reshapes and the map of their input (their sizes follow the channels).
    pub reshapes: Vec<(NodeId, ChannelMap)>,
}

/// Module kinds that keep channels aligned and hold no per-channel state.
const PASS_THROUGH_MODULES: [ModuleKind; 11] = [
    ModuleKind::ReLU,
    ModuleKind::LeakyReLU,
    ModuleKind::GELU,
    ModuleKind::SiLU,
    ModuleKind::Sigmoid,
    ModuleKind::Tanh,
    ModuleKind::Dropout,
    ModuleKind::Identity,
    ModuleKind::MaxPool2d,
    ModuleKind::AvgPool2d,
    ModuleKind::AdaptiveAvgPool2d,
];

impl ChannelGroups {
    fn new_group(&mut self, channels: usize) -> usize {
        self.parent.push(self.parent.len());
        self.members.push(1);
        self.size.push(channels);
        self.pinned.push(false);
        self.parent.len() - 1
    }

    /// The representative of `g`'s merged group.
    pub fn root(&self, mut g: usize) -> usize {
        while self.parent[g] != g {
            g = self.parent[g];
        }
        g
    }

    /// Merges two groups, the smaller tree under the larger (so roots stay a few steps away).
    fn union(&mut self, a: usize, b: usize) {
        let (mut a, mut b) = (self.root(a), self.root(b));
        if a != b {
            if self.members[a] < self.members[b] {
                std::mem::swap(&mut a, &mut b);
            }
            self.parent[b] = a;
            self.members[a] += self.members[b];
            self.pinned[a] |= self.pinned[b];
        }
    }

    fn pin(&mut self, map: &ChannelMap) {
        for (g, _) in map.iter().flatten() {
            let r = self.root(*g);
            self.pinned[r] = true;
        }
    }

    /// Whether the merged group of `g` may lose channels.
    pub fn is_prunable(&self, g: usize) -> bool {
        !self.pinned[self.root(g)]
    }

    /// The channel count of group `g`.
    pub fn channels(&self, g: usize) -> usize {
        self.size[g]
    }

    /// Merges the groups of two maps of values combined elementwise; channels that do not
    /// line up (different channels, or a prunable channel against a fixed one) pin them.
    fn merge(&mut self, a: &ChannelMap, b: &ChannelMap) {
        if a.len() != b.len() {
            self.pin(a);
            self.pin(b);
            return;
        }
        for (x, y) in a.iter().zip(b) {
            match (x, y) {
                (Some((ga, ca)), Some((gb, cb))) if ca == cb => self.union(*ga, *gb),
                (None, None) => {}
                _ => {
                    self.pin(&vec![*x]);
                    self.pin(&vec![*y]);
                }
            }
        }
    }
}

/// A conv or linear module call that can lose output channels.
fn is_producer(module: &dyn Module, kind: &ModuleKind, output_rank: usize) -> bool {
    match kind {
        ModuleKind::Conv2d => module
            .as_any()
            .downcast_ref::<tessera_nn::layers::Conv2d>()
            .is_some_and(|c| c.options.groups == 1),
        ModuleKind::Linear => output_rank == 2,
        _ => false,
    }
}

/// A `conv2d` op without groups or a `linear` op with a 2-D weight and output, whose weight and
/// bias are `get_attr` nodes that no other node reads (so that slicing them changes only it).
fn is_producer_op(
    gm: &GraphModule,
    op: &Op,
    operands: &[NodeId],
    output_rank: usize,
) -> Result<bool> {
    let layer = match op {
        Op::Conv(ConvOp::Forward { params, .. }) => params.groups == 1,
        Op::Linear { .. } => {
            output_rank == 2
                && operands
                    .get(1)
                    .map(|w| gm.graph.node(w))
                    .transpose()?
                    .is_some_and(|w| w.meta.first().is_some_and(|m| m.shape.len() == 2))
        }
        _ => false,
    };
    if !layer || operands.len() < 2 {
        return Ok(false);
    }
    for o in &operands[1..] {
        if attr_target(gm, o)?.is_none() || gm.graph.users(o)?.len() != 1 {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Records `id` as a layer with `channels` output channels in a new group, whose input channels
/// follow `input`; returns its output's map.
fn produce(
    groups: &mut ChannelGroups,
    id: &NodeId,
    input: Option<&ChannelMap>,
    channels: usize,
) -> ChannelMap {
    if let Some(map) = input {
        groups.consumers.push((*id, map.clone()));
    }
    let g = groups.new_group(channels);
    groups.producers.push((*id, g));
    (0..channels).map(|c| Some((g, c))).collect()
}

/// Records `id` as a per-channel follower of `input`, which its output keeps.
fn follow(
    groups: &mut ChannelGroups,
    id: &NodeId,
    input: Option<&ChannelMap>,
) -> Option<ChannelMap> {
    if let Some(map) = input {
        groups.followers.push((*id, map.clone()));
    }
    input.cloned()
}

/// Walks the graph once and records every channel dependency.
pub fn analyse(gm: &GraphModule) -> Result<ChannelGroups> {
    let mut groups = ChannelGroups::default();
    let mut maps: HashMap<NodeId, ChannelMap> = HashMap::new();
    for id in gm.graph.nodes() {
        let node = gm.graph.node(&id)?;
        let operands = gm.graph.operands(&id)?;
        let input_maps: Vec<Option<&ChannelMap>> = operands.iter().map(|o| maps.get(o)).collect();
        let shape = node
            .meta
            .first()
            .map(|m| m.shape.clone())
            .unwrap_or_default();
        let pin_all = |groups: &mut ChannelGroups| {
            for m in input_maps.iter().flatten() {
                groups.pin(m);
            }
        };
        let output: Option<ChannelMap> = match &node.kind {
            NodeKind::CallModule { target, kind, .. } => {
                let Ok(module) = gm.get_submodule(target) else {
                    pin_all(&mut groups);
                    continue;
                };
                let first = input_maps.first().copied().flatten();
                if is_producer(module, kind, shape.len()) && operands.len() == 1 {
                    Some(produce(&mut groups, &id, first, shape[1]))
                } else if operands.len() != 1 {
                    pin_all(&mut groups);
                    None
                } else if matches!(kind, ModuleKind::BatchNorm1d | ModuleKind::BatchNorm2d) {
                    follow(&mut groups, &id, first)
                } else if PASS_THROUGH_MODULES.contains(kind) {
                    first.cloned()
                } else if *kind == ModuleKind::Flatten {
                    flattened(gm, &operands[0], &shape, first)?.or_else(|| {
                        pin_all(&mut groups);
                        None
                    })
                } else {
                    // Conv2d with groups, or any other module: its input channels are fixed.
                    if is_consumer(kind)
                        && let Some(map) = first
                    {
                        groups.pin(map);
                    }
                    pin_all(&mut groups);
                    None
                }
            }
            NodeKind::CallFunction { op } => match op {
                // A layer that is not a producer has fixed input channels: the last arm pins.
                Op::Conv(ConvOp::Forward { .. }) | Op::Linear { .. }
                    if is_producer_op(gm, op, &operands, shape.len())? =>
                {
                    let first = input_maps.first().copied().flatten();
                    Some(produce(&mut groups, &id, first, shape[1]))
                }
                Op::Norm(NormOp::BatchNorm { .. })
                    if !operands.is_empty() && attr_targets(gm, &operands[1..])?.is_some() =>
                {
                    follow(&mut groups, &id, input_maps.first().copied().flatten())
                }
                // Elementwise functions of one tensor and pooling keep the channels.
                op if matches!(op.kind(), OpKind::ElementwiseUnary | OpKind::Pooling) => {
                    input_maps.first().copied().flatten().cloned()
                }
                Op::Binary(BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul | BinaryOp::Div) => {
                    let same_shapes = operands.iter().all(|o| {
                        gm.graph
                            .node(o)
                            .is_ok_and(|n| n.meta.first().is_some_and(|m| m.shape == shape))
                    });
                    match (same_shapes, input_maps.as_slice()) {
                        (true, [Some(a), Some(b)]) => {
                            groups.merge(a, b);
                            Some((*a).clone())
                        }
                        _ => {
                            pin_all(&mut groups);
                            None
                        }
                    }
                }
                Op::Index(IndexOp::Cat { dim: 1 }) if input_maps.iter().any(Option::is_some) => {
                    let mut map = ChannelMap::new();
                    for (o, m) in operands.iter().zip(&input_maps) {
                        match m {
                            Some(m) => map.extend(m.iter().copied()),
                            None => {
                                let c = gm.graph.node(o)?.meta[0].shape[1];
                                map.extend(std::iter::repeat_n(None, c));
                            }
                        }
                    }
                    Some(map)
                }
                Op::View(ViewOp::Reshape(_)) => {
                    let first = input_maps.first().copied().flatten();
                    match flattened(gm, &operands[0], &shape, first)? {
                        Some(map) => {
                            if let Some(m) = first {
                                groups.reshapes.push((id, m.clone()));
                            }
                            Some(map)
                        }
                        None => {
                            pin_all(&mut groups);
                            None
                        }
                    }
                }
                _ => {
                    pin_all(&mut groups);
                    None
                }
            },
            // A batch norm op's normalised value; its other outputs are per-channel statistics.
            NodeKind::GetItem { index: 0 } => input_maps.first().copied().flatten().cloned(),
            _ => {
                pin_all(&mut groups);
                None
            }
        };
        if let Some(map) = output {
            maps.insert(id, map);
        }
    }
    Ok(groups)
}

/// Conv-like modules whose weights are laid out by input channel.
fn is_consumer(kind: &ModuleKind) -> bool {
    matches!(
        kind,
        ModuleKind::Conv2d | ModuleKind::Linear | ModuleKind::Conv1d | ModuleKind::ConvTranspose2d
    )
}

/// The map after flattening `[N, C, ...]` to `[N, C * spatial]`, if the reshape is one.
fn flattened(
    gm: &GraphModule,
    input: &NodeId,
    output_shape: &[usize],
    map: Option<&ChannelMap>,
) -> Result<Option<ChannelMap>> {
    let Some(map) = map else {
        return Ok(None);
    };
    let in_shape = &gm.graph.node(input)?.meta[0].shape;
    let spatial: usize = in_shape.iter().skip(2).product();
    let is_flatten = in_shape.len() >= 2
        && output_shape.len() == 2
        && output_shape[0] == in_shape[0]
        && output_shape[1] == in_shape[1] * spatial;
    Ok(is_flatten.then(|| {
        map.iter()
            .flat_map(|c| std::iter::repeat_n(*c, spatial))
            .collect()
    }))
}
