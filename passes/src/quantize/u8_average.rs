//! Giving the average pools that run on u8 their input's zero point: once a round trip is
//! folded, each average pool of its chain (a `call_module` AvgPool2d or AdaptiveAvgPool2d, or
//! the `call_function` op) becomes `quantized_avg_pool2d` / `quantized_adaptive_avg_pool2d`
//! with that zero point, which rounds `mean - zero_point` as PyTorch's quantized kernels do on
//! the channels-last tensors its quantized convolutions write. Max pooling, flatten and the
//! other ops that keep quantization parameters are exact on u8 and stay as they are.

use super::module_at;
use crate::Result;
use tessera_fx::{GraphModule, NodeId, NodeKind};
use tessera_nn::layers::{AdaptiveAvgPool2d, AvgPool2d};
use tessera_tensor::Op;
use tessera_tensor::op::{PoolOp, QuantOp};

/// The average pool `node` computes, if it computes one.
fn average_pool(gm: &GraphModule, node: &NodeId) -> Result<Option<PoolOp>> {
    Ok(match &gm.graph.node(node)?.kind {
        NodeKind::CallFunction {
            op: Op::Pool(pool @ (PoolOp::AvgPool2d { .. } | PoolOp::AdaptiveAvgPool2d { .. })),
        } => Some(pool.clone()),
        NodeKind::CallModule { target, .. } => {
            let module = module_at(gm, target)?.as_any();
            if let Some(p) = module.downcast_ref::<AvgPool2d>() {
                Some(PoolOp::avg_pool2d(
                    p.kernel_size.pair(),
                    p.stride.pair(),
                    p.padding.pair(),
                    p.ceil_mode,
                    p.count_include_pad,
                ))
            } else {
                module
                    .downcast_ref::<AdaptiveAvgPool2d>()
                    .map(|p| PoolOp::AdaptiveAvgPool2d {
                        output_size: p.output_size.pair(),
                    })
            }
        }
        _ => None,
    })
}

/// Makes `node`, if it is an average pool reading u8 values whose zero point is `zero_point`,
/// a `quantized_*avg_pool2d` with it (a module call is replaced by a call of the op, named
/// after it; its users follow).
pub(super) fn give_zero_point(gm: &mut GraphModule, node: &NodeId, zero_point: i64) -> Result<()> {
    let Some(pool) = average_pool(gm, node)? else {
        return Ok(());
    };
    let op = Op::Quant(QuantOp::AvgPool { pool, zero_point });
    if matches!(gm.graph.node(node)?.kind, NodeKind::CallFunction { .. }) {
        gm.graph.set_op(node, op)?;
        return Ok(());
    }
    let input = gm.graph.operands(node)?.remove(0);
    let pooled = gm
        .graph
        .insert_before(node, |g| g.call_function(op, &[&input]))?;
    gm.graph.replace_all_uses_with(node, &pooled)?;
    gm.graph.erase(node)?;
    Ok(())
}
