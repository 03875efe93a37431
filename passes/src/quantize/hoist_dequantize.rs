//! Moving a `dequantize` below the ops that compute their output exactly from the values of
//! their input (max pooling, flatten, reshape, identity, eval dropout): `T(dequantize{P}(q))`
//! becomes `dequantize{P}(T(q))`, so that `T` runs on u8 even when its float output has
//! several readers (a residual connection and the next block's quantize, say). Average
//! pooling is not moved: on u8 it rounds its means, which float readers would see.

use super::shared_qparams::keeps_qparams;
use crate::Result;
use tessera_fx::{GraphModule, NodeId, NodeKind};
use tessera_nn::ModuleKind;
use tessera_tensor::op::{PoolOp, QuantOp};
use tessera_tensor::{DType, Op};

/// Whether `node` keeps its input's quantization parameters without rounding anything.
fn exact_on_u8(gm: &GraphModule, node: &NodeId) -> Result<bool> {
    if !keeps_qparams(gm, node)? {
        return Ok(false);
    }
    Ok(match &gm.graph.node(node)?.kind {
        NodeKind::CallModule { kind, .. } => {
            !matches!(kind, ModuleKind::AvgPool2d | ModuleKind::AdaptiveAvgPool2d)
        }
        NodeKind::CallFunction { op } => !matches!(
            op,
            Op::Pool(PoolOp::AvgPool2d { .. } | PoolOp::AdaptiveAvgPool2d { .. })
        ),
        _ => false,
    })
}

/// The scale and zero point of `node` and its u8 input, if `node` dequantizes a u8 tensor
/// per tensor.
pub(super) fn dequantized_u8(
    gm: &GraphModule,
    node: &NodeId,
) -> Result<Option<((f64, i64), NodeId)>> {
    let NodeKind::CallFunction {
        op: Op::Quant(QuantOp::DequantizePerTensor { scale, zero_point }),
    } = &gm.graph.node(node)?.kind
    else {
        return Ok(None);
    };
    let Some(input) = gm.graph.operands(node)?.into_iter().next() else {
        return Ok(None);
    };
    let u8_input = gm
        .graph
        .node(&input)?
        .meta
        .iter()
        .all(|m| m.dtype == DType::U8);
    Ok(u8_input.then_some(((*scale, *zero_point), input)))
}

/// Moves every dequantize below the exact ops reading it, in graph order (so a chain of such
/// ops ends up on u8 as a whole); returns whether anything moved.
pub(super) fn hoist_dequantize(gm: &mut GraphModule) -> Result<bool> {
    let mut changed = false;
    let order: Vec<NodeId> = gm.graph.nodes().collect();
    for node in order {
        if !exact_on_u8(gm, &node)? {
            continue;
        }
        let operand = gm.graph.operands(&node)?.remove(0);
        let Some(((scale, zero_point), q)) = dequantized_u8(gm, &operand)? else {
            continue;
        };
        gm.graph.set_operand(&node, 0, &q)?;
        let mut meta = gm.graph.node(&node)?.meta.clone();
        for m in &mut meta {
            m.dtype = DType::U8;
        }
        gm.graph.set_meta(&node, meta)?;
        let dequantize = Op::Quant(QuantOp::DequantizePerTensor { scale, zero_point });
        let moved = gm
            .graph
            .insert_after(&node, |g| g.call_function(dequantize, &[&node]))?;
        gm.graph.replace_all_uses_with(&node, &moved)?;
        if gm.graph.users(&operand)?.is_empty() {
            gm.graph.erase(&operand)?;
        }
        changed = true;
    }
    Ok(changed)
}
