//! The printed form of a graph (`Display`), FX-like with a shape and dtype on every value:
//!
//! ```text
//! graph(x: f32[1, 3, 32, 32]):
//!     %conv1 : f32[1, 16, 32, 32] = call_module[conv1: Conv2d(3, 16, kernel_size=(3, 3))](%x)
//!     %relu : f32[1, 16, 32, 32] = call_function[relu](%conv1)
//!     return %relu
//! ```
//!
//! Buffer mutations (see [`crate::mutations`]) follow the results in the `return` line, as
//! `return (%relu, %getitem_3 -> bn.running_mean)`.
//!
//! Node metadata is not printed (serde keeps it); the output node's name is not printed either,
//! and parsing names it `output` (or the first free `output_N`).

use crate::op_syntax::{op_text_between, op_to_text};
use crate::{Graph, NodeKind};
use petgraph::stable_graph::NodeIndex;
use std::fmt;
use tessera_tensor::TensorMeta;

/// `f32[1, 3]`.
pub(crate) fn meta_text(meta: &TensorMeta) -> String {
    let dims: Vec<String> = meta.shape.iter().map(|d| d.to_string()).collect();
    format!("{}[{}]", meta.dtype, dims.join(", "))
}

/// `f32[2, 3], i64[2]`: metas separated by commas.
pub(crate) fn metas_list(metas: &[TensorMeta]) -> String {
    metas.iter().map(meta_text).collect::<Vec<_>>().join(", ")
}

/// One value's meta, or a parenthesised tuple for zero or several values.
pub(crate) fn node_meta_text(metas: &[TensorMeta]) -> String {
    match metas {
        [one] => meta_text(one),
        many => format!("({})", metas_list(many)),
    }
}

impl Graph {
    /// `%a, %b`: the operands of a node.
    pub(crate) fn operand_list(&self, i: NodeIndex<u32>) -> String {
        let names: Vec<String> = self
            .operand_indices(i)
            .into_iter()
            .map(|o| format!("%{}", self.graph[o].name))
            .collect();
        names.join(", ")
    }

    /// What a node does, without its operands: `call_function[relu]`, `get_attr[fc.weight]`.
    /// An op with no text form (`Custom`) prints as `call_function[name]{custom}`, which does
    /// not parse back.
    pub(crate) fn target_text(&self, i: NodeIndex<u32>) -> String {
        let node = &self.graph[i];
        match &node.kind {
            NodeKind::Placeholder { target } => format!("placeholder[{target}]"),
            NodeKind::GetAttr { target } => format!("get_attr[{target}]"),
            NodeKind::CallModule {
                target,
                module_repr,
                ..
            } => format!("call_module[{target}: {module_repr}]"),
            NodeKind::CallFunction { op } => match op_text_between(op, "]") {
                Ok(text) => format!("call_function[{text}"),
                Err(_) => format!("call_function[{}]{{custom}}", op.name()),
            },
            NodeKind::GetItem { index } => format!("getitem[{index}]"),
            NodeKind::Output => "output".into(),
        }
    }

    /// One body line (without indentation), or the `return` line for an output.
    pub(crate) fn node_line(&self, i: NodeIndex<u32>) -> String {
        let node = &self.graph[i];
        let operands = self.operand_list(i);
        if node.kind == NodeKind::Output {
            return self.return_line(i);
        }
        let mut line = format!(
            "%{} : {} = {}",
            node.name,
            node_meta_text(&node.meta),
            self.target_text(i)
        );
        if !matches!(node.kind, NodeKind::GetAttr { .. }) {
            line.push_str(&format!("({operands})"));
        }
        line
    }
}

impl Graph {
    /// `return %a`, `return (%a, %b)`; buffer mutations follow the results as
    /// `%value -> target`.
    fn return_line(&self, i: NodeIndex<u32>) -> String {
        let operands = self.operand_indices(i);
        let first_mutation = operands.len().saturating_sub(self.mutations.len());
        let items: Vec<String> = operands
            .iter()
            .enumerate()
            .map(|(k, &o)| {
                let value = format!("%{}", self.graph[o].name);
                match k.checked_sub(first_mutation) {
                    Some(m) => format!("{value} -> {}", self.mutations[m]),
                    None => value,
                }
            })
            .collect();
        match items.as_slice() {
            [one] => format!("return {one}"),
            _ => format!("return ({})", items.join(", ")),
        }
    }
}

impl fmt::Display for Graph {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let inputs: Vec<String> = self
            .order
            .iter()
            .filter(|&i| matches!(self.graph[i].kind, NodeKind::Placeholder { .. }))
            .map(|i| {
                let node = &self.graph[i];
                format!("{}: {}", node.name, node_meta_text(&node.meta))
            })
            .collect();
        writeln!(f, "graph({}):", inputs.join(", "))?;
        for i in self.order.iter() {
            if !matches!(self.graph[i].kind, NodeKind::Placeholder { .. }) {
                writeln!(f, "    {}", self.node_line(i))?;
            }
        }
        Ok(())
    }
}

impl Graph {
    /// The printed graph, or an error naming the first op with no text form.
    pub fn to_text(&self) -> crate::Result<String> {
        for i in self.order.iter() {
            if let NodeKind::CallFunction { op } = &self.graph[i].kind {
                op_to_text(op)?;
            }
        }
        Ok(self.to_string())
    }
}
