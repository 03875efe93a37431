//! Removing the float round trips static conversion leaves between quantized blocks:
//! `quantize_per_tensor{P}(T(dequantize{P}(q)))`, where `T` is a chain of ops that keep their
//! input's quantization parameters, becomes `T(q)` on u8 (what PyTorch FX's lowering does for
//! pooling and flatten). Average pools of the chain then take the zero point (see
//! [`super::u8_average`]). Chains whose values are also read as float, and round trips whose
//! two parameters differ, are left alone.

use super::hoist_dequantize::dequantized_u8;
use super::shared_qparams::keeps_qparams;
use super::u8_average::give_zero_point;
use crate::Result;
use tessera_fx::{GraphModule, NodeId, NodeKind};
use tessera_tensor::op::QuantOp;
use tessera_tensor::{DType, Op};

/// The u8 `scale` and `zero_point` a node quantizes to, if it is a u8 `quantize_per_tensor`.
pub(super) fn quantize_params(gm: &GraphModule, node: &NodeId) -> Result<Option<(f64, i64)>> {
    Ok(match &gm.graph.node(node)?.kind {
        NodeKind::CallFunction {
            op:
                Op::Quant(QuantOp::QuantizePerTensor {
                    scale,
                    zero_point,
                    dtype: DType::U8,
                }),
        } => Some((*scale, *zero_point)),
        _ => None,
    })
}

/// Folds every round trip of the graph; returns whether any was folded.
pub(super) fn fold_round_trips(gm: &mut GraphModule) -> Result<bool> {
    let mut changed = false;
    let order: Vec<NodeId> = gm.graph.nodes().collect();
    for quantize in order {
        let Some(params) = quantize_params(gm, &quantize)? else {
            continue;
        };
        // The chain, from the op feeding the quantize back to the one reading the dequantize;
        // each must have one user so that no float reader loses its input.
        let mut chain = Vec::new();
        let Some(mut node) = gm.graph.operands(&quantize)?.into_iter().next() else {
            continue;
        };
        while keeps_qparams(gm, &node)? && gm.graph.users(&node)?.len() == 1 {
            let operand = gm.graph.operands(&node)?.remove(0);
            chain.push(node);
            node = operand;
        }
        if dequantized_u8(gm, &node)?.map(|(params, _)| params) != Some(params) {
            continue;
        }
        let dequantize = node;
        let q = gm.graph.operands(&dequantize)?.remove(0);
        // In data-flow order the chain runs from `chain.last()` to `chain[0]`.
        let result = match (chain.last(), chain.first()) {
            (Some(reads_dequantize), Some(feeds_quantize)) => {
                gm.graph.set_operand(reads_dequantize, 0, &q)?;
                *feeds_quantize
            }
            _ => q,
        };
        for op in &chain {
            let mut meta = gm.graph.node(op)?.meta.clone();
            for m in &mut meta {
                m.dtype = DType::U8;
            }
            gm.graph.set_meta(op, meta)?;
        }
        gm.graph.replace_all_uses_with(&quantize, &result)?;
        gm.graph.erase(&quantize)?;
        if gm.graph.users(&dequantize)?.is_empty() {
            gm.graph.erase(&dequantize)?;
        }
        // In data-flow order, so that each op is rebuilt on its operand's u8 value.
        for op in chain.iter().rev() {
            give_zero_point(gm, op, params.1)?;
        }
        changed = true;
    }
    Ok(changed)
}
