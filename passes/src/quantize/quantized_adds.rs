//! Residual connections on u8: `add(dequantize{A}(a), dequantize{B}(b))`, optionally
//! followed by a ReLU that is its only reader, becomes PyTorch's `quantized::add(_relu)`
//! of `a` and `b` when the float result is quantized afterwards (directly, or through ops
//! that keep quantization parameters): the output takes that quantize's scale and zero
//! point, and float readers of the sum read its dequantized value instead.

use super::blocks::is_relu;
use super::hoist_dequantize::dequantized_u8;
use super::round_trips::quantize_params;
use super::shared_qparams::keeps_qparams;
use crate::Result;
use tessera_fx::{GraphModule, NodeId, NodeKind};
use tessera_tensor::Op;
use tessera_tensor::op::{BinaryOp, QuantOp};

/// The u8 scale and zero point `value` is quantized with by one of its readers, found
/// through chains of ops that keep quantization parameters.
fn quantized_as(gm: &GraphModule, value: &NodeId) -> Result<Option<(f64, i64)>> {
    let mut pending = gm.graph.users(value)?;
    while let Some(user) = pending.pop() {
        if let Some(params) = quantize_params(gm, &user)? {
            return Ok(Some(params));
        }
        if keeps_qparams(gm, &user)? {
            pending.extend(gm.graph.users(&user)?);
        }
    }
    Ok(None)
}

/// Rewrites every eligible add in graph order; returns whether any was rewritten.
pub(super) fn quantize_adds(gm: &mut GraphModule) -> Result<bool> {
    let mut changed = false;
    let order: Vec<NodeId> = gm.graph.nodes().collect();
    for add in order {
        // A ReLU erased with the add before it is no longer there.
        let Ok(node) = gm.graph.node(&add) else {
            continue;
        };
        let is_add = matches!(
            &node.kind,
            NodeKind::CallFunction {
                op: Op::Binary(BinaryOp::Add)
            }
        );
        let operands = gm.graph.operands(&add)?;
        if !is_add || operands.len() != 2 {
            continue;
        }
        let (Some(((a_scale, a_zero_point), a)), Some(((b_scale, b_zero_point), b))) = (
            dequantized_u8(gm, &operands[0])?,
            dequantized_u8(gm, &operands[1])?,
        ) else {
            continue;
        };
        let users = gm.graph.users(&add)?;
        let relu = match users.as_slice() {
            [user] if is_relu(gm, user)? => Some(*user),
            _ => None,
        };
        let value = relu.unwrap_or(add);
        let Some((out_scale, out_zero_point)) = quantized_as(gm, &value)? else {
            continue;
        };
        let op = Op::Quant(QuantOp::Add {
            a_scale,
            a_zero_point,
            b_scale,
            b_zero_point,
            out_scale,
            out_zero_point,
            relu: relu.is_some(),
        });
        let dequantized = gm.graph.insert_before(&add, |g| {
            let sum = g.call_function(op, &[&a, &b])?;
            g.call_function(
                Op::Quant(QuantOp::DequantizePerTensor {
                    scale: out_scale,
                    zero_point: out_zero_point,
                }),
                &[&sum],
            )
        })?;
        gm.graph.replace_all_uses_with(&value, &dequantized)?;
        if let Some(relu) = relu {
            gm.graph.erase(&relu)?;
        }
        gm.graph.erase(&add)?;
        for operand in &operands {
            if gm.graph.users(operand)?.is_empty() {
                gm.graph.erase(operand)?;
            }
        }
        changed = true;
    }
    Ok(changed)
}
