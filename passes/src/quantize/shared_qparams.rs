//! The ops whose output keeps its input's quantization parameters (PyTorch FX's "shared
//! qparams" ops: max and average pooling, flatten and reshape, identity and eval dropout),
//! so that a u8 tensor can flow through them unchanged in scale and zero point, and the walk
//! back through a chain of them to the value that sets those parameters.

use super::module_at;
use crate::Result;
use tessera_fx::{GraphModule, NodeId, NodeKind};
use tessera_nn::layers::AvgPool2d;
use tessera_nn::{ModuleExt, ModuleKind};
use tessera_tensor::Op;
use tessera_tensor::op::{PoolOp, ViewOp};

/// Whether `node` computes its single operand's values (or a subset, or means of them) in a
/// way that runs on u8 with the same scale and zero point. An average whose padding counts in
/// the divisor does not: a padded zero is the zero point, which a u8 tensor does not carry.
pub(super) fn keeps_qparams(gm: &GraphModule, node: &NodeId) -> Result<bool> {
    if gm.graph.operands(node)?.len() != 1 {
        return Ok(false);
    }
    Ok(match &gm.graph.node(node)?.kind {
        NodeKind::CallModule { target, kind, .. } => {
            let module = || module_at(gm, target);
            match kind {
                // Kinds whose forward keeps the parameters for any configuration.
                ModuleKind::MaxPool2d
                | ModuleKind::AdaptiveAvgPool2d
                | ModuleKind::Flatten
                | ModuleKind::Identity => true,
                ModuleKind::Dropout => !module()?.is_training(),
                ModuleKind::AvgPool2d => module()?
                    .as_any()
                    .downcast_ref::<AvgPool2d>()
                    .is_some_and(|p| !p.count_include_pad || p.padding.pair() == [0, 0]),
                _ => false,
            }
        }
        NodeKind::CallFunction { op } => match op {
            Op::Pool(PoolOp::MaxPool2dValues(_) | PoolOp::AdaptiveAvgPool2d { .. }) => true,
            Op::Pool(PoolOp::AvgPool2d {
                params,
                count_include_pad,
            }) => !count_include_pad || params.padding == [0, 0],
            Op::View(ViewOp::Reshape(_) | ViewOp::Contiguous) => true,
            _ => false,
        },
        _ => false,
    })
}

/// The first node reached from `node` by following operands back through ops that keep
/// their quantization parameters (`node` itself when it is no such op).
pub(super) fn through_shared_qparams(gm: &GraphModule, node: &NodeId) -> Result<NodeId> {
    let mut node = *node;
    while keeps_qparams(gm, &node)? {
        node = gm.graph.operands(&node)?.remove(0);
    }
    Ok(node)
}
