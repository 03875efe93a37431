//! Op-level folding: `getitem[0](call_function[batch_norm](conv2d(x, w, b), mean, var, gamma,
//! beta))` with every weight a `get_attr` becomes `conv2d(x, w', b')` reading two new
//! constants (and the same for `linear` with a 2-D output). The old weights stay where other
//! nodes read them; the original conv stays while it has other users.

use super::formula::{BatchNormStats, WeightLayout, fold};
use crate::Result;
use crate::attributes::{attr_targets, attribute, insert_constant};
use tessera_fx::{GraphModule, NodeId, NodeKind};
use tessera_tensor::Op;
use tessera_tensor::op::{ConvOp, NormOp};

/// The producer op with its bias flag replaced by `true`, when it is one folding handles.
fn with_bias(op: &Op, output_rank: usize) -> Option<Op> {
    match op {
        Op::Conv(ConvOp::Forward { params, .. }) => Some(Op::Conv(ConvOp::Forward {
            params: *params,
            bias: true,
        })),
        // batch_norm normalises dim 1, which is the linear's features only for 2-D output.
        Op::Linear { .. } if output_rank == 2 => Some(Op::Linear { bias: true }),
        _ => None,
    }
}

/// Erases `id` and then those of its operands left without users (the dead `get_attr`s).
fn erase_with_dead_operands(gm: &mut GraphModule, id: &NodeId) -> Result<()> {
    let operands = gm.graph.operands(id)?;
    gm.graph.erase(id)?;
    for o in operands {
        let unused = gm.graph.users(&o)?.is_empty();
        if unused && matches!(gm.graph.node(&o)?.kind, NodeKind::GetAttr { .. }) {
            gm.graph.erase(&o)?;
        }
    }
    Ok(())
}

/// Folds every eval `batch_norm` call whose input is a conv or linear call with attribute
/// weights; returns whether anything changed.
pub(super) fn fold_op_pairs(gm: &mut GraphModule) -> Result<bool> {
    let order: Vec<NodeId> = gm.graph.nodes().collect();
    let mut changed = false;
    for bn_id in order {
        if gm.graph.node(&bn_id).is_err() {
            continue;
        }
        let NodeKind::CallFunction {
            op:
                Op::Norm(NormOp::BatchNorm {
                    training: false,
                    eps,
                    weight,
                    bias,
                }),
        } = gm.graph.node(&bn_id)?.kind.clone()
        else {
            continue;
        };
        // Only the normalised value may be read: the other outputs are not the conv's.
        let users = gm.graph.users(&bn_id)?;
        let only_value = users
            .iter()
            .map(|u| {
                gm.graph
                    .node(u)
                    .map(|n| n.kind == NodeKind::GetItem { index: 0 })
            })
            .collect::<tessera_fx::Result<Vec<bool>>>()?;
        if users.is_empty() || only_value.contains(&false) {
            continue;
        }
        let bn_operands = gm.graph.operands(&bn_id)?;
        let Some(stat_targets) = attr_targets(gm, &bn_operands[1..])? else {
            continue;
        };
        let producer = bn_operands[0];
        let producer_node = gm.graph.node(&producer)?;
        let NodeKind::CallFunction { op } = producer_node.kind.clone() else {
            continue;
        };
        let output_rank = producer_node.meta.first().map_or(0, |m| m.shape.len());
        let Some(folded_op) = with_bias(&op, output_rank) else {
            continue;
        };
        let producer_operands = gm.graph.operands(&producer)?;
        let Some(weight_targets) = attr_targets(gm, &producer_operands[1..])? else {
            continue;
        };
        if stat_targets.len() != 2 + usize::from(weight) + usize::from(bias) {
            continue;
        }
        let read = |name: &str| attribute(gm, name);
        let (mean, var) = (read(&stat_targets[0])?, read(&stat_targets[1])?);
        let gamma = weight.then(|| read(&stat_targets[2])).transpose()?;
        let beta_at = 2 + usize::from(weight);
        let beta = bias.then(|| read(&stat_targets[beta_at])).transpose()?;
        let stats = BatchNormStats::from_tensors(&mean, &var, gamma.as_ref(), beta.as_ref(), eps)?;
        let w = read(&weight_targets[0])?;
        let b = weight_targets.get(1).map(|t| read(t)).transpose()?;
        let (w, b) = fold(&w, b.as_ref(), &stats, WeightLayout::OutputFirst)?;

        let stem = weight_targets[0]
            .strip_suffix(".weight")
            .unwrap_or(&weight_targets[0])
            .to_string();
        let w = insert_constant(gm, &format!("{stem}_weight_folded"), w, &bn_id)?;
        let b = insert_constant(gm, &format!("{stem}_bias_folded"), b, &bn_id)?;
        let input = producer_operands[0];
        let folded = gm
            .graph
            .insert_before(&bn_id, |g| g.call_function(folded_op, &[&input, &w, &b]))?;
        for user in users {
            gm.graph.replace_all_uses_with(&user, &folded)?;
            gm.graph.erase(&user)?;
        }
        erase_with_dead_operands(gm, &bn_id)?;
        if gm.graph.users(&producer)?.is_empty() {
            erase_with_dead_operands(gm, &producer)?;
        }
        changed = true;
    }
    Ok(changed)
}
