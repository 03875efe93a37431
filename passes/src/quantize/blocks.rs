//! The blocks static quantization works on: a `call_module` Conv2d or Linear (or their
//! quantization-aware training forms, QatConv2d and QatLinear), optionally
//! followed by a ReLU (a `call_module` ReLU or a `call_function` relu) that is the only user
//! of its output, which becomes one fused quantized module.

use crate::Result;
use tessera_fx::{GraphModule, NodeId, NodeKind};
use tessera_nn::ModuleKind;
use tessera_tensor::Op;
use tessera_tensor::op::UnaryOp;

/// The module kinds that start a block.
const BLOCK_STARTS: [ModuleKind; 4] = [
    ModuleKind::Conv2d,
    ModuleKind::Linear,
    ModuleKind::QatConv2d,
    ModuleKind::QatLinear,
];

/// One conv or linear, and the ReLU fused after it if any.
#[derive(Debug, Clone, PartialEq)]
pub struct Block {
    /// The `call_module` conv or linear.
    pub layer: NodeId,
    /// Its module path.
    pub target: String,
    /// `Conv2d`, `Linear`, `QatConv2d` or `QatLinear`.
    pub kind: ModuleKind,
    /// The ReLU applied to the layer's output, when it is the layer's only user.
    pub relu: Option<NodeId>,
}

impl Block {
    /// The node whose value leaves the block.
    pub fn last(&self) -> &NodeId {
        self.relu.as_ref().unwrap_or(&self.layer)
    }
}

/// Whether `node` applies a ReLU (module or function).
pub(super) fn is_relu(gm: &GraphModule, node: &NodeId) -> Result<bool> {
    Ok(match &gm.graph.node(node)?.kind {
        NodeKind::CallModule { kind, .. } => *kind == ModuleKind::ReLU,
        NodeKind::CallFunction {
            op: Op::Unary(UnaryOp::Relu),
        } => true,
        _ => false,
    })
}

/// Every block of the graph, in graph order; a layer with other than one operand is skipped.
pub fn find_blocks(gm: &GraphModule) -> Result<Vec<Block>> {
    let mut blocks = Vec::new();
    for id in gm.graph.nodes() {
        let NodeKind::CallModule { target, kind, .. } = &gm.graph.node(&id)?.kind else {
            continue;
        };
        if !BLOCK_STARTS.contains(kind) || gm.graph.operands(&id)?.len() != 1 {
            continue;
        }
        let users = gm.graph.users(&id)?;
        let relu = match users.as_slice() {
            [user] if is_relu(gm, user)? => Some(*user),
            _ => None,
        };
        blocks.push(Block {
            layer: id,
            target: target.clone(),
            kind: kind.clone(),
            relu,
        });
    }
    Ok(blocks)
}
