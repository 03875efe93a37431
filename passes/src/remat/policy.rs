//! What the rematerialisation pass may recompute and what keeping a value costs. Cheap
//! elementwise ops (unary, binary, scalar, compare, where, clamp, casts) and views are
//! recomputable when pure; products, convolutions, reductions, normalisations, pooling,
//! losses, random ops and every op with several outputs are always kept. The op table's own
//! facts ([`OpKind`], effects) decide, so a new op is classified where it is defined.

use tessera_fx::{Node, NodeKind};
use tessera_tensor::TensorMeta;
use tessera_tensor::op::OpKind;

/// What the pass may do with a forward node the backward needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Role {
    /// A graph input (placeholder or get_attr): alive for the whole step at no cost.
    Input,
    /// A cheap pure elementwise op or view: may run again in the backward.
    Recomputable,
    /// Anything else: computed once, in the forward, and kept when the backward reads it.
    Kept,
}

pub(super) fn role(node: &Node) -> Role {
    match &node.kind {
        NodeKind::Placeholder { .. } | NodeKind::GetAttr { .. } => Role::Input,
        NodeKind::CallFunction { op } if node.meta.len() == 1 && op.is_pure() => match op.kind() {
            OpKind::ElementwiseUnary
            | OpKind::ElementwiseBinary
            | OpKind::ElementwiseTernary
            | OpKind::View
            | OpKind::Copy => Role::Recomputable,
            _ => Role::Kept,
        },
        _ => Role::Kept,
    }
}

/// The bytes of a node's values (their logical size: elements times element size, also for
/// views, which the compiled program may or may not materialise).
pub(super) fn value_bytes(metas: &[TensorMeta]) -> u64 {
    metas
        .iter()
        .map(|m| (m.shape.iter().product::<usize>() * m.dtype.size_in_bytes()) as u64)
        .sum()
}
