//! What a graph costs: the parameters its nodes read and the FLOPs (two per multiply-add) of
//! its convolutions, linear layers and matmuls, for pass reports (pruning, the optimize example).

use crate::lookup::module_at;
use crate::{PassError, Result};
use std::collections::BTreeSet;
use std::fmt;
use tessera_fx::{Graph, GraphModule, NodeId, NodeKind};
use tessera_nn::{Module, ModuleExt, ModuleKind};
use tessera_tensor::Op;
use tessera_tensor::op::ConvOp;

/// Parameters and FLOPs of one run of a graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GraphCost {
    /// Elements of the parameters of called modules and of the attributes read by `get_attr`.
    pub parameters: usize,
    /// Floating-point operations of one run, two per multiply-add.
    pub flops: u64,
}

impl fmt::Display for GraphCost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} parameters, {:.2} MFLOPs",
            self.parameters,
            self.flops as f64 / 1e6
        )
    }
}

/// The cost of `gm` at the shapes recorded in its nodes.
pub fn graph_cost(gm: &GraphModule) -> Result<GraphCost> {
    let mut modules = BTreeSet::new();
    let mut attributes = BTreeSet::new();
    let mut flops = 0u64;
    for id in gm.graph.nodes() {
        let node = gm.graph.node(&id)?;
        let out_numel = node
            .meta
            .first()
            .map_or(0, |m| m.shape.iter().product::<usize>()) as u64;
        match &node.kind {
            NodeKind::CallModule { target, kind, .. } => {
                let module = module_at(gm, target)?;
                flops += module_flops(gm, &id, module, kind, out_numel)?;
                modules.insert(target.clone());
            }
            NodeKind::GetAttr { target } => {
                attributes.insert((target.clone(), node.meta[0].shape.iter().product::<usize>()));
            }
            NodeKind::CallFunction { .. } => flops += op_flops(&gm.graph, &id)?,
            _ => {}
        }
    }
    let mut parameters: usize = attributes.iter().map(|(_, n)| n).sum();
    for target in &modules {
        if let Ok(m) = gm.get_submodule(target) {
            parameters += m.parameters().iter().map(|p| p.numel()).sum::<usize>();
        }
    }
    Ok(GraphCost { parameters, flops })
}

/// FLOPs of one run of the op node `id` (convolution, linear, matmul; 0 for any other node),
/// from the shapes recorded in the graph.
pub fn op_flops(graph: &Graph, id: &NodeId) -> Result<u64> {
    let node = graph.node(id)?;
    let NodeKind::CallFunction { op } = &node.kind else {
        return Ok(0);
    };
    let out_numel = node
        .meta
        .first()
        .map_or(0, |m| m.shape.iter().product::<usize>()) as u64;
    let operands = graph.operands(id)?;
    let shape = |i: usize| -> Result<Vec<usize>> {
        let operand = operands.get(i).ok_or_else(|| {
            PassError::Unsupported(format!("{} has no operand {i}", graph.display(id)))
        })?;
        Ok(graph.node(operand)?.meta[0].shape.clone())
    };
    Ok(match op {
        Op::Conv(ConvOp::Forward { .. }) => {
            2 * out_numel * shape(1)?.get(1..).unwrap_or(&[]).iter().product::<usize>() as u64
        }
        Op::Linear { .. } => 2 * out_numel * shape(1)?.get(1).copied().unwrap_or(1) as u64,
        Op::Matmul => 2 * out_numel * shape(0)?.last().copied().unwrap_or(1) as u64,
        _ => 0,
    })
}

/// FLOPs of one call of a conv-like or linear module, from its weight's shape.
fn module_flops(
    gm: &GraphModule,
    id: &NodeId,
    module: &dyn Module,
    kind: &ModuleKind,
    out_numel: u64,
) -> Result<u64> {
    let Ok(weight) = module.get_parameter("weight") else {
        return Ok(0);
    };
    let w = weight.shape();
    Ok(match kind {
        ModuleKind::Conv1d | ModuleKind::Conv2d | ModuleKind::Linear => {
            2 * out_numel * w[1..].iter().product::<usize>() as u64
        }
        ModuleKind::ConvTranspose2d => {
            // Every input element is multiplied by one kernel slice per output channel.
            let input = &gm.graph.operands(id)?[0];
            let in_numel = gm.graph.node(input)?.meta[0]
                .shape
                .iter()
                .product::<usize>() as u64;
            2 * in_numel * w[1..].iter().product::<usize>() as u64
        }
        _ => 0,
    })
}
