//! Structured pruning that shrinks tensors: the lowest-norm output channels of conv and linear
//! layers are removed, together with the matching input channels of every consumer, through
//! batch norm, activations, pooling and flatten; residual adds make their branches drop the same
//! channels and concatenations shift channel indices (see [`channels`]). The pruned layers are
//! new, smaller dense modules the graph module owns or, for `conv2d`, `linear` and `batch_norm`
//! ops of graphs traced with modules inlined, new smaller constants their `get_attr` operands
//! read (see [`ops`]); the traced model is not changed.

pub mod channels;
mod ops;
mod rebuild;

use crate::cost::{GraphCost, graph_cost};
use crate::lookup::module_at;
use crate::{Changed, Pass, PassError, Result};
use channels::{ChannelGroups, ChannelMap, analyse};
use ops::{op_weight, slice_batch_norm_op, slice_layer_op};
use rebuild::{Keep, sliced_batch_norm, sliced_layer};
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use tessera_fx::interpreter::GraphInterpreter;
use tessera_fx::shape_prop::propagate_shapes;
use tessera_fx::{GraphModule, NodeId, NodeKind};
use tessera_nn::{Module, ModuleExt};
use tessera_tensor::Op;
use tessera_tensor::op::ViewOp;

/// The norm that ranks channels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChannelNorm {
    L1,
    L2,
}

/// Removes `amount` (a fraction, rounded to the nearest count) of the output channels of
/// every prunable channel group, lowest summed weight norm first; at least one channel stays.
#[derive(Debug, Clone, Copy)]
pub struct StructuredPrune {
    pub amount: f64,
    pub norm: ChannelNorm,
}

impl StructuredPrune {
    /// Prunes `amount` of the channels by L1 norm.
    pub fn new(amount: f64) -> Self {
        StructuredPrune {
            amount,
            norm: ChannelNorm::L1,
        }
    }

    /// Prunes `gm` and reports what was removed, with parameters and FLOPs before and after.
    pub fn run_with_report(&self, gm: &mut GraphModule) -> Result<PruneReport> {
        if !(0.0..1.0).contains(&self.amount) {
            return Err(PassError::Unsupported(format!(
                "structured_prune: amount must be in [0, 1), got {}",
                self.amount
            )));
        }
        let before = graph_cost(gm)?;
        let groups = analyse(gm)?;
        let alive = self.choose_channels(gm, &groups)?;
        let mut report = PruneReport {
            amount: self.amount,
            before,
            after: before,
            groups: Vec::new(),
        };
        // Report groups in the order of their first layer in the graph.
        let mut roots: Vec<(usize, usize)> = alive
            .keys()
            .map(|&root| {
                let first = groups
                    .producers
                    .iter()
                    .position(|(_, g)| groups.root(*g) == root);
                (first.unwrap_or(usize::MAX), root)
            })
            .collect();
        roots.sort();
        for (_, root) in &roots {
            let mask = &alive[root];
            let producers = groups
                .producers
                .iter()
                .filter(|(_, g)| groups.root(*g) == *root)
                .map(|(id, _)| gm.graph.display(id))
                .collect();
            report.groups.push(GroupReport {
                producers,
                channels: mask.len(),
                kept: mask.iter().filter(|&&a| a).count(),
            });
        }
        if alive.is_empty() {
            return Ok(report);
        }
        rewrite(gm, &groups, &alive)?;
        report.after = graph_cost(gm)?;
        Ok(report)
    }

    /// For each prunable group (by root), which of its channels stay.
    fn choose_channels(
        &self,
        gm: &GraphModule,
        groups: &ChannelGroups,
    ) -> Result<BTreeMap<usize, Vec<bool>>> {
        let mut scores: BTreeMap<usize, Vec<f64>> = BTreeMap::new();
        for (id, g) in &groups.producers {
            if !groups.is_prunable(*g) {
                continue;
            }
            let weight = layer_weight(gm, id)?;
            let rows = weight.len() / groups.channels(*g);
            let total = scores
                .entry(groups.root(*g))
                .or_insert_with(|| vec![0.0; groups.channels(*g)]);
            for (c, score) in total.iter_mut().enumerate() {
                let row = &weight[c * rows..(c + 1) * rows];
                *score += match self.norm {
                    ChannelNorm::L1 => row.iter().map(|x| x.abs()).sum::<f64>(),
                    ChannelNorm::L2 => row.iter().map(|x| x * x).sum::<f64>().sqrt(),
                };
            }
        }
        let mut alive = BTreeMap::new();
        for (root, score) in scores {
            let n = score.len();
            let remove = ((self.amount * n as f64).round() as usize).min(n - 1);
            if remove == 0 {
                continue;
            }
            let mut order: Vec<usize> = (0..n).collect();
            order.sort_by(|&a, &b| score[a].total_cmp(&score[b]).then(a.cmp(&b)));
            let mut mask = vec![true; n];
            for &c in &order[..remove] {
                mask[c] = false;
            }
            alive.insert(root, mask);
        }
        Ok(alive)
    }
}

/// The weight of the layer node `id` calls (a module) or computes (an op), as f64 values.
fn layer_weight(gm: &GraphModule, id: &NodeId) -> Result<Vec<f64>> {
    let weight = match &gm.graph.node(id)?.kind {
        NodeKind::CallModule { target, .. } => gm
            .get_parameter(&format!("{target}.weight"))
            .map_err(|e| PassError::Unsupported(format!("{}: {e}", gm.graph.display(id))))?
            .tensor()
            .clone(),
        _ => op_weight(gm, id)?,
    };
    weight
        .detach()
        .to_vec_f64()
        .map_err(|e| PassError::Unsupported(format!("{}: {e}", gm.graph.display(id))))
}

/// The channels of a value with `map` that stay, or `None` if all do.
fn kept(map: &ChannelMap, groups: &ChannelGroups, alive: &BTreeMap<usize, Vec<bool>>) -> Keep {
    let keep: Vec<usize> = map
        .iter()
        .enumerate()
        .filter(|(_, entry)| match entry {
            Some((g, c)) => alive.get(&groups.root(*g)).is_none_or(|mask| mask[*c]),
            None => true,
        })
        .map(|(j, _)| j)
        .collect();
    (keep.len() < map.len()).then_some(keep)
}

/// Replaces every affected module call by a call of its smaller copy, points every affected op
/// at smaller constants, resizes flattening reshapes, then re-derives every node's shapes.
fn rewrite(
    gm: &mut GraphModule,
    groups: &ChannelGroups,
    alive: &BTreeMap<usize, Vec<bool>>,
) -> Result<()> {
    let mut layers: HashMap<NodeId, (Keep, Keep)> = HashMap::new();
    for (id, g) in &groups.producers {
        if let Some(mask) = alive.get(&groups.root(*g)) {
            let keep = (0..mask.len()).filter(|&c| mask[c]).collect();
            layers.entry(*id).or_default().0 = Some(keep);
        }
    }
    for (id, map) in &groups.consumers {
        if let Some(keep) = kept(map, groups, alive) {
            layers.entry(*id).or_default().1 = Some(keep);
        }
    }
    let order: Vec<NodeId> = gm.graph.nodes().collect();
    for id in &order {
        if let Some((out, input)) = layers.get(id) {
            if is_module_call(gm, id)? {
                replace_module_call(gm, id, "pruned", |target, m| {
                    sliced_layer(target, m, out, input)
                })?;
            } else {
                slice_layer_op(gm, id, out, input)?;
            }
        }
    }
    for (id, map) in &groups.followers {
        if let Some(keep) = kept(map, groups, alive) {
            if is_module_call(gm, id)? {
                replace_module_call(gm, id, "pruned", |target, m| {
                    sliced_batch_norm(target, m, &Some(keep.clone()))
                })?;
            } else {
                slice_batch_norm_op(gm, id, &Some(keep))?;
            }
        }
    }
    for (id, map) in &groups.reshapes {
        if let Some(keep) = kept(map, groups, alive) {
            // Each kept channel still spans the input's spatial size (metas are not updated yet).
            let input = &gm.graph.operands(id)?[0];
            let spatial: usize = gm.graph.node(input)?.meta[0].shape[2..].iter().product();
            let batch = gm.graph.node(id)?.meta[0].shape[0];
            let features = keep.len() * spatial;
            gm.graph
                .set_op(id, Op::View(ViewOp::Reshape(vec![batch, features])))?;
        }
    }
    let inputs: Vec<_> = gm
        .graph
        .placeholders()
        .iter()
        .map(|p| gm.graph.node(p).map(|n| n.meta[0].clone()))
        .collect::<tessera_fx::Result<_>>()?;
    let mut graph = gm.graph.clone();
    let mut interpreter = GraphInterpreter {
        root: gm.as_module(),
        constants: Some(&gm.constants),
    };
    propagate_shapes(&mut graph, &mut interpreter, &inputs)?;
    gm.graph = graph;
    Ok(())
}

fn is_module_call(gm: &GraphModule, id: &NodeId) -> Result<bool> {
    Ok(matches!(
        gm.graph.node(id)?.kind,
        NodeKind::CallModule { .. }
    ))
}

/// Points the `call_module` node `id` at a new owned module built from the old one, named
/// `{target}_{suffix}`.
fn replace_module_call(
    gm: &mut GraphModule,
    id: &NodeId,
    suffix: &str,
    build: impl FnOnce(&str, &dyn Module) -> Result<Box<dyn Module>>,
) -> Result<()> {
    let node = gm.graph.node(id)?;
    let NodeKind::CallModule { target, .. } = node.kind.clone() else {
        return Err(PassError::Unsupported(format!(
            "{} is not a module call",
            gm.graph.display(id)
        )));
    };
    let meta = node.meta.clone();
    let module = module_at(gm, &target)?;
    let built = build(&target, module)?;
    let name = gm.fresh_name(&format!("{target}_{suffix}"));
    let (kind, repr) = (built.kind(), tessera_nn::repr(built.as_module()));
    gm.add_owned_module(&name, built)?;
    let operands = gm.graph.operands(id)?;
    let refs: Vec<&NodeId> = operands.iter().collect();
    let new = gm
        .graph
        .insert_before(id, |g| g.call_module(&name, kind, &repr, &refs, meta))?;
    gm.graph.replace_all_uses_with(id, &new)?;
    gm.graph.erase(id)?;
    Ok(())
}

impl Pass for StructuredPrune {
    fn name(&self) -> &'static str {
        "structured_prune"
    }

    fn run(&self, gm: &mut GraphModule) -> Result<Changed> {
        let report = self.run_with_report(gm)?;
        Ok(Changed::from_bool(report.after != report.before))
    }
}

/// One channel group: the layers that produce it, and its channels before and after.
#[derive(Debug, Clone)]
pub struct GroupReport {
    pub producers: Vec<String>,
    pub channels: usize,
    pub kept: usize,
}

/// What structured pruning removed.
#[derive(Debug, Clone)]
pub struct PruneReport {
    pub amount: f64,
    pub before: GraphCost,
    pub after: GraphCost,
    pub groups: Vec<GroupReport>,
}

impl fmt::Display for PruneReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "structured pruning of {:.0}% of channels:",
            self.amount * 100.0
        )?;
        for g in &self.groups {
            writeln!(
                f,
                "  {}: {} -> {} channels",
                g.producers.join(" + "),
                g.channels,
                g.kept
            )?;
        }
        let ratio = |a: f64, b: f64| if b == 0.0 { 1.0 } else { a / b };
        writeln!(
            f,
            "  parameters: {} -> {} ({:.1}%)",
            self.before.parameters,
            self.after.parameters,
            100.0 * ratio(self.after.parameters as f64, self.before.parameters as f64)
        )?;
        write!(
            f,
            "  FLOPs: {} -> {} ({:.1}%)",
            self.before.flops,
            self.after.flops,
            100.0 * ratio(self.after.flops as f64, self.before.flops as f64)
        )
    }
}
