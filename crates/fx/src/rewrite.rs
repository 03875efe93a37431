//! Pattern rewriting (FX's `subgraph_rewriter.replace_pattern`): find non-overlapping
//! occurrences of a pattern graph and replace each by a replacement graph. Patterns and
//! replacements are ordinary Rust functions (or modules) traced once; ops match with their
//! attributes (so literals must be equal), module calls match by module kind, and matches can
//! be filtered.

use crate::trace::{LeafPolicy, trace_with};
use crate::{FxError, Graph, NodeId, NodeKind, PatternError, Result};
use std::collections::{HashMap, HashSet};
use tessera_nn::{Module, ModuleCore};
use tessera_tensor::{Tensor, TensorMeta};

/// One occurrence of a pattern: pattern node -> graph node.
#[derive(Debug, Clone)]
pub struct Match {
    /// The graph node standing for the pattern's output.
    pub anchor: NodeId,
    /// Every pattern node (placeholders included) with the graph node it matched.
    pub nodes_map: HashMap<NodeId, NodeId>,
}

/// A module with no state, the root for tracing plain functions.
#[derive(tessera_nn::Module)]
struct NoState {
    core: ModuleCore,
}

/// Traces a plain function of tensors (a pattern or a replacement) for inputs of these
/// shapes; shapes only serve the trace, matching ignores them.
pub fn trace_function(
    inputs: &[TensorMeta],
    f: impl FnOnce(&[Tensor]) -> tessera_nn::Result<Vec<Tensor>>,
) -> Result<Graph> {
    let root = NoState {
        core: ModuleCore::default(),
    };
    let named: Vec<(String, TensorMeta)> = inputs
        .iter()
        .enumerate()
        .map(|(i, m)| (format!("in{i}"), m.clone()))
        .collect();
    let refs: Vec<(&str, TensorMeta)> =
        named.iter().map(|(n, m)| (n.as_str(), m.clone())).collect();
    Ok(trace_with(root.as_module(), &refs, LeafPolicy::default(), f)?.graph)
}

/// Whether pattern node `p` (in `pattern`) can stand for graph node `g`, binding operands
/// recursively; placeholders bind to anything, consistently.
fn match_node(
    pattern: &Graph,
    graph: &Graph,
    p: &NodeId,
    g: &NodeId,
    map: &mut HashMap<NodeId, NodeId>,
) -> Result<bool> {
    if let Some(bound) = map.get(p) {
        return Ok(bound == g);
    }
    let (pn, gn) = (pattern.node(p)?, graph.node(g)?);
    let same_kind = match (&pn.kind, &gn.kind) {
        (NodeKind::Placeholder { .. }, _) => {
            map.insert(*p, *g);
            return Ok(true);
        }
        (NodeKind::CallFunction { op: a }, NodeKind::CallFunction { op: b }) => a == b,
        (NodeKind::CallModule { kind: a, .. }, NodeKind::CallModule { kind: b, .. }) => a == b,
        (NodeKind::GetItem { index: a }, NodeKind::GetItem { index: b }) => a == b,
        (NodeKind::GetAttr { target: a }, NodeKind::GetAttr { target: b }) => a == b,
        _ => false,
    };
    if !same_kind {
        return Ok(false);
    }
    let (p_ops, g_ops) = (pattern.operands(p)?, graph.operands(g)?);
    if p_ops.len() != g_ops.len() {
        return Ok(false);
    }
    map.insert(*p, *g);
    for (po, go) in p_ops.iter().zip(&g_ops) {
        if !match_node(pattern, graph, po, go, map)? {
            map.remove(p);
            return Ok(false);
        }
    }
    Ok(true)
}

/// Non-overlapping matches of `pattern` (one output) in `graph`, in graph order. A match's
/// inner nodes may not be used outside it (else removing them would break those users).
pub fn find_matches(graph: &Graph, pattern: &Graph) -> Result<Vec<Match>> {
    let output = pattern.output_node().ok_or(FxError::Pattern {
        problem: PatternError::NoOutput,
    })?;
    let pattern_out = match pattern.operands(&output)?.as_slice() {
        [one] => *one,
        other => {
            return Err(FxError::Pattern {
                problem: PatternError::OutputCount { count: other.len() },
            });
        }
    };
    let mut taken: HashSet<NodeId> = HashSet::new();
    let mut matches = Vec::new();
    for candidate in graph.nodes() {
        let mut map = HashMap::new();
        if !match_node(pattern, graph, &pattern_out, &candidate, &mut map)? {
            continue;
        }
        let inner = replaced_nodes(pattern, &map);
        let overlaps = inner.iter().any(|n| taken.contains(n));
        let inner_set: HashSet<&NodeId> = inner.iter().collect();
        let escapes = inner
            .iter()
            .filter(|n| **n != candidate)
            .map(|n| {
                graph
                    .users(n)
                    .map(|users| users.iter().any(|u| !inner_set.contains(u)))
            })
            .collect::<Result<Vec<bool>>>()?
            .into_iter()
            .any(|e| e);
        if overlaps || escapes {
            continue;
        }
        taken.extend(inner);
        matches.push(Match {
            anchor: candidate,
            nodes_map: map,
        });
    }
    Ok(matches)
}

/// Replaces every match of `pattern` accepted by `filter` with `replacement` (same inputs, in
/// the same order; one output) and returns the matches replaced. A replacement `call_module`
/// whose target names a pattern `call_module` calls the module that node matched, with that
/// node's shapes; other new module calls keep the replacement's traced shapes, so run
/// `shape_prop::propagate_shapes` after such a rewrite.
pub fn replace_pattern_with_filter(
    graph: &mut Graph,
    pattern: &Graph,
    replacement: &Graph,
    filter: impl Fn(&Match, &Graph) -> bool,
) -> Result<Vec<Match>> {
    let pattern_inputs = pattern.placeholders();
    let replacement_inputs = replacement.placeholders();
    if pattern_inputs.len() != replacement_inputs.len() {
        return Err(FxError::Pattern {
            problem: PatternError::InputCount {
                pattern: pattern_inputs.len(),
                replacement: replacement_inputs.len(),
            },
        });
    }
    let matches: Vec<Match> = find_matches(graph, pattern)?
        .into_iter()
        .filter(|m| filter(m, graph))
        .collect();
    for m in &matches {
        // The pattern's module calls by target, to resolve the replacement's.
        let modules: HashMap<String, NodeId> = pattern
            .nodes()
            .filter_map(|p| match &pattern.node(&p).ok()?.kind {
                NodeKind::CallModule { target, .. } => {
                    Some((target.clone(), *m.nodes_map.get(&p)?))
                }
                _ => None,
            })
            .collect();
        let inputs: Vec<NodeId> = pattern_inputs
            .iter()
            .map(|p| {
                m.nodes_map
                    .get(p)
                    .cloned()
                    .ok_or_else(|| FxError::UnknownNode {
                        node: format!("placeholder #{}", p.index.index()),
                    })
            })
            .collect::<Result<_>>()?;
        let result = graph.insert_before(&m.anchor, |g| {
            let mut map: HashMap<NodeId, NodeId> = replacement_inputs
                .iter()
                .cloned()
                .zip(inputs.iter().cloned())
                .collect();
            let outputs = g.append_graph_with(replacement, &mut map, |g, node, operands| {
                let refs: Vec<&NodeId> = operands.iter().collect();
                match &node.kind {
                    NodeKind::CallFunction { op } => g.call_function(op.clone(), &refs),
                    NodeKind::GetItem { index } => g.getitem(&operands[0], *index),
                    NodeKind::GetAttr { target } => g.get_attr(target, node.meta[0].clone()),
                    NodeKind::CallModule {
                        target,
                        kind,
                        module_repr,
                    } => match modules.get(target) {
                        // The module the pattern matched, with the shapes it yields here.
                        Some(matched) => {
                            let matched = g.node(matched)?.clone();
                            let NodeKind::CallModule {
                                target,
                                kind,
                                module_repr,
                            } = matched.kind
                            else {
                                return Err(FxError::UnknownNode { node: matched.name });
                            };
                            g.call_module(&target, kind, &module_repr, &refs, matched.meta)
                        }
                        None => g.call_module(
                            target,
                            kind.clone(),
                            module_repr,
                            &refs,
                            node.meta.clone(),
                        ),
                    },
                    NodeKind::Placeholder { .. } | NodeKind::Output => Err(FxError::UnknownNode {
                        node: format!("%{}", node.name),
                    }),
                }
            })?;
            outputs.into_iter().next().ok_or(FxError::Pattern {
                problem: PatternError::ReplacementNoOutput,
            })
        })?;
        graph.replace_all_uses_with(&m.anchor, &result)?;
        // Erase the matched nodes, users before their operands.
        let mut matched = replaced_nodes(pattern, &m.nodes_map);
        let order: HashMap<NodeId, usize> =
            graph.nodes().enumerate().map(|(i, n)| (n, i)).collect();
        matched.sort_by_key(|n| std::cmp::Reverse(order.get(n).copied().unwrap_or(0)));
        for node in matched {
            if graph.users(&node)?.is_empty() {
                graph.erase(&node)?;
            }
        }
    }
    Ok(matches)
}

/// [`replace_pattern_with_filter`] accepting every match.
pub fn replace_pattern(
    graph: &mut Graph,
    pattern: &Graph,
    replacement: &Graph,
) -> Result<Vec<Match>> {
    replace_pattern_with_filter(graph, pattern, replacement, |_, _| true)
}

/// The graph nodes a match binds to the pattern's nodes other than its placeholders: the nodes
/// a replacement takes the place of.
fn replaced_nodes(pattern: &Graph, map: &HashMap<NodeId, NodeId>) -> Vec<NodeId> {
    map.iter()
        .filter(|(p, _)| {
            !matches!(
                pattern.node(p).map(|n| &n.kind),
                Ok(NodeKind::Placeholder { .. })
            )
        })
        .map(|(_, g)| *g)
        .collect()
}
