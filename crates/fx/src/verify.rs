//! `Graph::verify`: checks a graph and reports every problem at once, each with its node.

use crate::print::{metas_list, node_meta_text};
use crate::{Graph, NodeKind};
use petgraph::stable_graph::NodeIndex;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::fmt;

/// One problem found by [`Graph::verify`]; `node` is the printed name (`%relu`), or `graph`
/// for problems of the whole graph.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifyError {
    pub node: String,
    pub message: String,
}

impl fmt::Display for VerifyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.node, self.message)
    }
}

/// All the problems of a graph, in node order.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct VerifyErrors(pub Vec<VerifyError>);

impl fmt::Display for VerifyErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "the graph has {} problem(s):", self.0.len())?;
        for e in &self.0 {
            writeln!(f, "  {e}")?;
        }
        Ok(())
    }
}

impl Graph {
    /// Checks acyclicity and definition before use, operand counts, shapes and dtypes against
    /// each op's meta function, getitem indices, unique names and exactly one output, last.
    pub fn verify(&self) -> Result<(), VerifyErrors> {
        self.verify_checking(None)
    }

    /// [`Graph::verify`], also reporting get_attr targets missing from `attributes`
    /// (the qualified names of the parameters and buffers the graph may read).
    pub fn verify_with_attributes(
        &self,
        attributes: &BTreeSet<String>,
    ) -> Result<(), VerifyErrors> {
        self.verify_checking(Some(attributes))
    }

    fn verify_checking(&self, attributes: Option<&BTreeSet<String>>) -> Result<(), VerifyErrors> {
        let mut errors = Vec::new();
        let mut report = |node: &str, message: String| {
            errors.push(VerifyError {
                node: node.into(),
                message,
            })
        };
        let position: HashMap<NodeIndex<u32>, usize> = self
            .order
            .iter()
            .enumerate()
            .map(|(p, &i)| (i, p))
            .collect();
        if petgraph::algo::toposort(&self.graph, None).is_err() {
            report("graph", "the graph has a cycle".into());
        }
        let mut seen = HashSet::new();
        let outputs: Vec<_> = self
            .order
            .iter()
            .filter(|&&i| self.graph[i].kind == NodeKind::Output)
            .collect();
        match outputs.as_slice() {
            [] => report("graph", "the graph has no output".into()),
            [_] => {}
            many => report("graph", format!("the graph has {} outputs", many.len())),
        }
        if let Some(&&first) = outputs.first()
            && self.order.last() != Some(&first)
        {
            report("graph", "the output is not the last node".into());
        }
        for (p, &i) in self.order.iter().enumerate() {
            let node = &self.graph[i];
            let name = format!("%{}", node.name);
            if !seen.insert(node.name.clone()) {
                report(&name, "the name is used by another node".into());
            }
            let operands = self.operand_indices(i);
            for &o in &operands {
                if position.get(&o).is_none_or(|&q| q >= p) {
                    report(
                        &name,
                        format!(
                            "uses %{}, which is not defined before it",
                            self.graph[o].name
                        ),
                    );
                }
            }
            let multi: Vec<_> = operands
                .iter()
                .filter(|&&o| self.graph[o].meta.len() != 1)
                .map(|&o| &self.graph[o])
                .collect();
            let needs_single = !matches!(node.kind, NodeKind::GetItem { .. } | NodeKind::Output);
            if needs_single {
                for o in &multi {
                    report(
                        &name,
                        format!(
                            "operand %{} yields {} values; select one with getitem",
                            o.name,
                            o.meta.len()
                        ),
                    );
                }
            }
            let expect_metas = |count: usize, what: &str| {
                (node.meta.len() != count)
                    .then(|| format!("{what} must have {count} meta(s), has {}", node.meta.len()))
            };
            let problem = match &node.kind {
                NodeKind::Placeholder { .. } | NodeKind::GetAttr { .. } if !operands.is_empty() => {
                    Some(format!(
                        "{} takes no operands, has {}",
                        node.kind.opcode(),
                        operands.len()
                    ))
                }
                NodeKind::Placeholder { target } if *target != node.name => Some(format!(
                    "placeholder target {target:?} differs from the node's name, which prints in its place"
                )),
                NodeKind::Placeholder { .. } => expect_metas(1, "a placeholder"),
                NodeKind::GetAttr { target } => match attributes {
                    Some(known) if !known.contains(target) => Some(format!(
                        "get_attr[{target}] names no known parameter or buffer"
                    )),
                    _ => expect_metas(1, "a get_attr"),
                },
                NodeKind::CallModule { .. } => None,
                NodeKind::CallFunction { op } if needs_single && multi.is_empty() => {
                    let metas: Vec<_> = operands
                        .iter()
                        .map(|&o| self.graph[o].meta[0].clone())
                        .collect();
                    match op.meta(&metas) {
                        Err(e) => Some(format!(
                            "call_function[{}] on ({}): {e}",
                            op.name(),
                            metas_list(&metas)
                        )),
                        Ok(expected) if expected != node.meta => Some(format!(
                            "meta {} disagrees with call_function[{}], which gives {}",
                            node_meta_text(&node.meta),
                            op.name(),
                            node_meta_text(&expected)
                        )),
                        Ok(_) => None,
                    }
                }
                NodeKind::CallFunction { .. } => None,
                NodeKind::GetItem { index } => match operands.as_slice() {
                    [o] => match self.graph[*o].meta.get(*index) {
                        None => Some(format!(
                            "getitem[{index}] of %{}, which yields {} values",
                            self.graph[*o].name,
                            self.graph[*o].meta.len()
                        )),
                        Some(m) if node.meta != [m.clone()] => Some(format!(
                            "meta {} disagrees with value {index} of %{}, which is {}",
                            node_meta_text(&node.meta),
                            self.graph[*o].name,
                            crate::print::meta_text(m)
                        )),
                        Some(_) => None,
                    },
                    _ => Some(format!("getitem takes 1 operand, has {}", operands.len())),
                },
                NodeKind::Output if !self.user_indices(i).is_empty() => {
                    Some("the output is used by other nodes".into())
                }
                NodeKind::Output => None,
            };
            if let Some(message) = problem {
                report(&name, message);
            }
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(VerifyErrors(errors))
        }
    }
}
