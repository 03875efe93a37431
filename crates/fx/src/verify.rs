//! `Graph::verify`: checks a graph and reports every problem at once, each with its node.

use crate::print::{meta_text, metas_list, node_meta_text};
use crate::{Graph, NodeKind};
use petgraph::stable_graph::NodeIndex;
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::fmt;
use tessera_tensor::TensorMeta;

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

/// What verification knows about the tensors get_attr nodes read.
#[derive(Clone, Copy)]
enum KnownAttributes<'a> {
    /// Nothing: get_attr targets are not checked.
    Unchecked,
    /// Their qualified names.
    Names(&'a BTreeSet<String>),
    /// Their qualified names, shapes and dtypes.
    Metas(&'a BTreeMap<String, TensorMeta>),
}

impl Graph {
    /// Checks acyclicity and definition before use, operand counts, shapes and dtypes against
    /// each op's meta function, getitem indices, unique names and exactly one output, last.
    pub fn verify(&self) -> Result<(), VerifyErrors> {
        self.verify_checking(KnownAttributes::Unchecked)
    }

    /// [`Graph::verify`], also reporting get_attr targets missing from `attributes`
    /// (the qualified names of the parameters and buffers the graph may read).
    pub fn verify_with_attributes(
        &self,
        attributes: &BTreeSet<String>,
    ) -> Result<(), VerifyErrors> {
        self.verify_checking(KnownAttributes::Names(attributes))
    }

    /// [`Graph::verify`], also reporting get_attr targets missing from `attributes` or whose
    /// meta disagrees with the attribute's shape and dtype (a loaded graph and its weights).
    pub fn verify_with_attribute_metas(
        &self,
        attributes: &BTreeMap<String, TensorMeta>,
    ) -> Result<(), VerifyErrors> {
        self.verify_checking(KnownAttributes::Metas(attributes))
    }

    fn verify_checking(&self, attributes: KnownAttributes) -> Result<(), VerifyErrors> {
        let mut errors: Vec<VerifyError> = self
            .graph_problems()
            .into_iter()
            .map(|message| VerifyError {
                node: "graph".into(),
                message,
            })
            .collect();
        let mut seen = HashSet::new();
        for i in self.order.iter() {
            let node = &self.graph[i];
            let mut problems = Vec::new();
            if !seen.insert(node.name.as_str()) {
                problems.push("the name is used by another node".into());
            }
            problems.extend(self.operand_problems(i));
            problems.extend(self.kind_problem(i, attributes));
            errors.extend(problems.into_iter().map(|message| VerifyError {
                node: format!("%{}", node.name),
                message,
            }));
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(VerifyErrors(errors))
        }
    }

    /// A cycle, and anything but exactly one output as the last node.
    fn graph_problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        if petgraph::algo::toposort(&self.graph, None).is_err() {
            problems.push("the graph has a cycle".into());
        }
        let outputs: Vec<_> = self
            .order
            .iter()
            .filter(|&i| self.graph[i].kind == NodeKind::Output)
            .collect();
        match outputs.len() {
            0 => problems.push("the graph has no output".into()),
            1 => {}
            n => problems.push(format!("the graph has {n} outputs")),
        }
        if outputs
            .first()
            .is_some_and(|&o| self.order.last() != Some(o))
        {
            problems.push("the output is not the last node".into());
        }
        problems.extend(self.mutation_problems(outputs.first().copied()));
        problems
    }

    /// Buffer mutations that are not trailing outputs of one tensor each, with a valid and
    /// unique buffer path.
    fn mutation_problems(&self, output: Option<NodeIndex<u32>>) -> Vec<String> {
        let mut problems = Vec::new();
        if self.mutations.is_empty() {
            return problems;
        }
        let operands = output.map(|o| self.operand_indices(o)).unwrap_or_default();
        if operands.len() < self.mutations.len() {
            problems.push(format!(
                "the graph writes {} buffers back but returns only {} values",
                self.mutations.len(),
                operands.len()
            ));
            return problems;
        }
        let values = &operands[operands.len() - self.mutations.len()..];
        let mut seen = HashSet::new();
        for (target, &value) in self.mutations.iter().zip(values) {
            if crate::graph::check_path(target).is_err() {
                problems.push(format!("buffer mutation target `{target}` is not a path"));
            }
            if !seen.insert(target.as_str()) {
                problems.push(format!("buffer `{target}` is written back twice"));
            }
            let metas = &self.graph[value].meta;
            if metas.len() != 1 {
                problems.push(format!(
                    "the new value of buffer `{target}`, %{}, yields {} values",
                    self.graph[value].name,
                    metas.len()
                ));
            }
        }
        problems
    }

    /// Operands used before their definition, and multi-value operands where one tensor is
    /// needed (everywhere but getitem and output).
    fn operand_problems(&self, i: NodeIndex<u32>) -> Vec<String> {
        let mut problems = Vec::new();
        let here = self.order.key(i).unwrap_or(0);
        let takes_tuples = matches!(
            self.graph[i].kind,
            NodeKind::GetItem { .. } | NodeKind::Output
        );
        for o in self.operand_indices(i) {
            let operand = &self.graph[o];
            if self.order.key(o).is_none_or(|q| q >= here) {
                problems.push(format!(
                    "uses %{}, which is not defined before it",
                    operand.name
                ));
            }
            if !takes_tuples && operand.meta.len() != 1 {
                problems.push(format!(
                    "operand %{} yields {} values; select one with getitem",
                    operand.name,
                    operand.meta.len()
                ));
            }
        }
        problems
    }

    /// What is wrong with the node for its kind: operand counts, metas against the op's meta
    /// function or the getitem'd value, unknown get_attr targets (or, with metas, of another
    /// shape or dtype), a module kind its repr does not print, a used output.
    fn kind_problem(&self, i: NodeIndex<u32>, attributes: KnownAttributes) -> Option<String> {
        let node = &self.graph[i];
        let operands = self.operand_indices(i);
        let expect_one_meta = |what: &str| {
            (node.meta.len() != 1)
                .then(|| format!("{what} must have 1 meta, has {}", node.meta.len()))
        };
        match &node.kind {
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
            NodeKind::Placeholder { .. } => expect_one_meta("a placeholder"),
            NodeKind::GetAttr { target } => {
                let missing = || format!("get_attr[{target}] names no known parameter or buffer");
                match attributes {
                    KnownAttributes::Names(known) if !known.contains(target) => Some(missing()),
                    KnownAttributes::Metas(known) => match known.get(target) {
                        None => Some(missing()),
                        Some(meta) if node.meta != std::slice::from_ref(meta) => Some(format!(
                            "meta {} disagrees with attribute {target}, which is {}",
                            node_meta_text(&node.meta),
                            meta_text(meta)
                        )),
                        Some(_) => None,
                    },
                    _ => expect_one_meta("a get_attr"),
                }
            }
            NodeKind::CallModule {
                kind, module_repr, ..
            } => match crate::graph::module_kind_of_repr(module_repr) {
                None => Some(format!(
                    "module repr {module_repr:?} is not one printable line"
                )),
                Some(printed) if printed != *kind => Some(format!(
                    "call_module of kind {kind} prints as {module_repr:?}, which parses back as {printed}"
                )),
                Some(_) => None,
            },
            NodeKind::CallFunction { op } => {
                let metas = operands
                    .iter()
                    .map(|&o| match self.graph[o].meta.as_slice() {
                        [meta] => Some(meta.clone()),
                        _ => None,
                    })
                    .collect::<Option<Vec<_>>>()?;
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
            NodeKind::GetItem { index } => {
                let [o] = operands.as_slice() else {
                    return Some(format!("getitem takes 1 operand, has {}", operands.len()));
                };
                let operand = &self.graph[*o];
                match operand.meta.get(*index) {
                    None => Some(format!(
                        "getitem[{index}] of %{}, which yields {} values",
                        operand.name,
                        operand.meta.len()
                    )),
                    Some(m) if node.meta != std::slice::from_ref(m) => Some(format!(
                        "meta {} disagrees with value {index} of %{}, which is {}",
                        node_meta_text(&node.meta),
                        operand.name,
                        meta_text(m)
                    )),
                    Some(_) => None,
                }
            }
            NodeKind::Output if !self.user_indices(i).is_empty() => {
                Some("the output is used by other nodes".into())
            }
            NodeKind::Output => None,
        }
    }
}
