//! The derivation itself: the forward graph is copied, each of its values gets a meta tensor
//! that stands for it, and the nodes are walked in reverse, each op's backward formula running
//! on those tensors under a recorder that appends the ops it applies to the graph. Gradients of
//! values used several times are added up; backward nodes nothing uses are dropped.

use super::JointGraph;
use crate::trace::LeafPolicy;
use crate::trace::TracedGraph;
use crate::trace::recording::Recording;
use crate::{AutodiffError, FxError, Graph, NodeId, NodeKind, Result, ValueMap};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use tessera_tensor::op::BackwardCtx;
use tessera_tensor::trace::with_recorder;
use tessera_tensor::{Op, Tensor, TensorError, TensorMeta, no_grad};

fn fail(source: AutodiffError) -> FxError {
    FxError::Autodiff { source }
}

/// The state of one derivation.
struct Walk<'a> {
    forward: &'a Graph,
    recording: Arc<Recording>,
    /// The meta tensors standing for each forward node's values.
    values: HashMap<NodeId, Vec<Tensor>>,
    /// Whether each value of each forward node depends on a value that needs a gradient.
    requires: HashMap<NodeId, Vec<bool>>,
    /// Gradients collected so far, by forward node and value index.
    grads: HashMap<(NodeId, usize), Tensor>,
}

pub(super) fn derive(forward: &TracedGraph, wrt: &[&str]) -> Result<JointGraph> {
    let graph = &forward.graph;
    graph
        .output_node()
        .ok_or_else(|| fail(AutodiffError::NoOutput))?;
    let sources = find_sources(graph, wrt)?;
    let recording = Arc::new(Recording::new(
        HashMap::new(),
        forward.attributes.clone(),
        LeafPolicy::none(),
    ));
    let mut walk = Walk {
        forward: graph,
        recording,
        values: HashMap::new(),
        requires: HashMap::new(),
        grads: HashMap::new(),
    };
    let copied = walk.copy_forward(&sources)?;
    // Buffer mutations are not differentiated: they stay the joint graph's last outputs.
    let outputs = graph.results()?;
    let mutations = graph.mutation_values()?;
    let tangents = walk.seed(&outputs)?;
    let order: Vec<NodeId> = graph.nodes().collect();
    for id in order.iter().rev() {
        walk.step(id)?;
    }
    let returned = Returned {
        outputs: &outputs,
        mutations: &mutations,
    };
    walk.finish(forward, returned, &sources, wrt, tangents, &copied)
}

/// What the forward returns: its results, and the buffers it writes with their new values.
struct Returned<'a> {
    outputs: &'a [NodeId],
    mutations: &'a [(String, NodeId)],
}

/// The forward nodes of each value to differentiate with respect to, in request order (a
/// parameter may be read by several get_attr nodes; its gradient is their sum).
fn find_sources(graph: &Graph, wrt: &[&str]) -> Result<Vec<Vec<NodeId>>> {
    let mut by_name: HashMap<String, Vec<NodeId>> = HashMap::new();
    for id in graph.nodes() {
        let node = graph.node(&id)?;
        match &node.kind {
            NodeKind::Placeholder { target } | NodeKind::GetAttr { target } => {
                by_name.entry(target.clone()).or_default().push(id);
            }
            NodeKind::CallModule { .. } => {
                return Err(fail(AutodiffError::ModuleCall {
                    node: graph.display(&id),
                }));
            }
            _ => {}
        }
    }
    wrt.iter()
        .map(|name| {
            let ids = by_name.get(*name).cloned().ok_or_else(|| {
                fail(AutodiffError::UnknownValue {
                    name: (*name).into(),
                })
            })?;
            let dtype = graph.node(&ids[0])?.meta[0].dtype;
            if !dtype.is_float() {
                return Err(fail(AutodiffError::NotFloat {
                    name: (*name).into(),
                    dtype,
                }));
            }
            Ok(ids)
        })
        .collect()
}

impl Walk<'_> {
    /// Copies the forward graph into the recording's graph (same names), binds a meta tensor
    /// to every value and marks which values need gradients; returns the copied nodes.
    fn copy_forward(&mut self, sources: &[Vec<NodeId>]) -> Result<HashSet<NodeId>> {
        let sources: HashSet<NodeId> = sources.iter().flatten().copied().collect();
        let recording = Arc::clone(&self.recording);
        let mut state = recording.lock();
        let mut map = ValueMap::new();
        state.graph.append_graph(self.forward, &mut map)?;
        for id in self.forward.nodes() {
            let node = self.forward.node(&id)?;
            let operands = self.forward.operands(&id)?;
            let Some(&copy) = map.get(&id) else {
                continue;
            };
            let operand_requires = || {
                operands
                    .iter()
                    .any(|o| self.requires.get(o).is_some_and(|r| r[0]))
            };
            let (tensors, requires) = match &node.kind {
                NodeKind::GetItem { index } => {
                    let parent = &operands[0];
                    let tensor = self.values[parent][*index].clone();
                    (vec![tensor], vec![self.requires[parent][*index]])
                }
                NodeKind::CallFunction { op } => {
                    let any = operand_requires();
                    let tensors = metas_to_tensors(&node.meta);
                    let requires = node
                        .meta
                        .iter()
                        .enumerate()
                        .map(|(i, m)| any && m.dtype.is_float() && op.output_is_differentiable(i))
                        .collect();
                    (tensors, requires)
                }
                _ => (metas_to_tensors(&node.meta), vec![sources.contains(&id)]),
            };
            if tensors.len() == 1 {
                state.values.insert(tensors[0].id(), copy);
            } else {
                Recording::bind_outputs(&mut state, copy, &tensors)?;
            }
            self.values.insert(id, tensors);
            self.requires.insert(id, requires);
        }
        Ok(map.into_values().collect())
    }

    /// Seeds the gradient of every output that needs one: ones for a one-element output, a
    /// new placeholder otherwise. Returns the placeholders' names.
    fn seed(&mut self, outputs: &[NodeId]) -> Result<Vec<String>> {
        let mut tangents = Vec::new();
        for output in outputs {
            if !self.requires[output][0] {
                continue;
            }
            let value = &self.values[output][0];
            let meta = value.meta();
            // The seed is a graph value (a constant or a placeholder) that a meta tensor
            // stands for, so that everything computed from it is recorded.
            let recording = Arc::clone(&self.recording);
            let mut state = recording.lock();
            let node = if value.numel() == 1 {
                let ones = Tensor::ones(&meta.shape, meta.dtype)
                    .map_err(|e| self.formula_error(output, e))?;
                recording.operand(&mut state, &ones)?
            } else {
                let name = format!("tangent_{}", self.forward.name(output)?);
                let node = state.graph.placeholder(&name, meta.clone());
                tangents.push(state.graph.name(&node)?.to_string());
                node
            };
            let seed = Tensor::new_meta(&meta.shape, meta.dtype);
            state.values.insert(seed.id(), node);
            drop(state);
            self.accumulate(*output, 0, seed)?;
        }
        Ok(tangents)
    }

    /// Adds `grad` to the gradient collected for value `index` of `node`.
    fn accumulate(&mut self, node: NodeId, index: usize, grad: Tensor) -> Result<()> {
        let total = match self.grads.remove(&(node, index)) {
            None => grad,
            Some(sum) => self
                .record(|| sum.add(&grad))
                .map_err(|e| self.formula_error(&node, e))?,
        };
        self.grads.insert((node, index), total);
        Ok(())
    }

    /// Runs `f` with the ops it applies to meta tensors recorded into the joint graph.
    fn record<T>(
        &self,
        f: impl FnOnce() -> tessera_tensor::Result<T>,
    ) -> tessera_tensor::Result<T> {
        let _guard = no_grad();
        with_recorder(self.recording.clone(), f)
    }

    fn formula_error(&self, node: &NodeId, source: TensorError) -> FxError {
        fail(AutodiffError::Formula {
            node: self.forward.display(node),
            source: Box::new(source),
        })
    }

    /// Sends the gradients of `id`'s values back to its operands.
    fn step(&mut self, id: &NodeId) -> Result<()> {
        let node = self.forward.node(id)?;
        match &node.kind {
            NodeKind::GetItem { index } => {
                if let Some(grad) = self.grads.remove(&(*id, 0)) {
                    let parent = self.forward.operands(id)?[0];
                    self.accumulate(parent, *index, grad)?;
                }
                Ok(())
            }
            NodeKind::CallFunction { op } => self.backward_of(id, op, &node.meta),
            _ => Ok(()),
        }
    }

    fn backward_of(&mut self, id: &NodeId, op: &Op, metas: &[TensorMeta]) -> Result<()> {
        let grads: Vec<Option<Tensor>> = (0..metas.len())
            .map(|i| self.grads.remove(&(*id, i)))
            .collect();
        let operands = self.forward.operands(id)?;
        let needs: Vec<bool> = operands.iter().map(|o| self.requires[o][0]).collect();
        if grads.iter().all(Option::is_none) || !needs.contains(&true) {
            return Ok(());
        }
        let inputs: Vec<Tensor> = operands.iter().map(|o| self.values[o][0].clone()).collect();
        let cx = BackwardCtx {
            inputs: &inputs,
            outputs: &self.values[id],
            grads: &grads,
            needs: &needs,
            output_metas: metas,
        };
        let input_grads = self
            .record(|| op.backward(&cx))
            .map_err(|e| self.formula_error(id, e))?;
        for (i, grad) in input_grads.into_iter().enumerate() {
            let Some(grad) = grad.filter(|_| needs.get(i).copied().unwrap_or(false)) else {
                continue;
            };
            let expected = inputs[i].meta();
            if grad.meta() != expected {
                return Err(fail(AutodiffError::GradientMeta {
                    node: self.forward.display(id),
                    input: i,
                    expected: crate::print::meta_text(&expected),
                    got: crate::print::meta_text(&grad.meta()),
                }));
            }
            self.accumulate(operands[i], 0, grad)?;
        }
        Ok(())
    }

    /// Adds the output node (forward outputs, then gradients named after their values), drops
    /// unused backward nodes and verifies the joint graph.
    fn finish(
        mut self,
        forward: &TracedGraph,
        returned: Returned,
        sources: &[Vec<NodeId>],
        wrt: &[&str],
        tangents: Vec<String>,
        copied: &HashSet<NodeId>,
    ) -> Result<JointGraph> {
        let mut gradients = Vec::with_capacity(sources.len());
        for nodes in sources {
            let mut total: Option<Tensor> = None;
            for node in nodes {
                let Some(grad) = self.grads.remove(&(*node, 0)) else {
                    continue;
                };
                total = Some(match total {
                    None => grad,
                    Some(sum) => self
                        .record(|| sum.add(&grad))
                        .map_err(|e| self.formula_error(node, e))?,
                });
            }
            let grad = match total {
                Some(grad) => grad,
                None => {
                    let meta = self.values[&nodes[0]][0].meta();
                    self.record(|| Tensor::zeros(&[], meta.dtype)?.expand(&meta.shape))
                        .map_err(|e| self.formula_error(&nodes[0], e))?
                }
            };
            gradients.push(grad);
        }
        let outputs = returned.outputs;
        let recording = Arc::clone(&self.recording);
        let mut state = recording.lock();
        let mut results: Vec<NodeId> = Vec::with_capacity(outputs.len() + gradients.len());
        for output in outputs {
            let tensor = &self.values[output][0];
            results.push(recording.operand(&mut state, tensor)?);
        }
        let mut renamed = HashSet::new();
        for (grad, name) in gradients.iter().zip(wrt) {
            let node = recording.operand(&mut state, grad)?;
            let is_op = matches!(state.graph.node(&node)?.kind, NodeKind::CallFunction { .. });
            if is_op && !copied.contains(&node) && renamed.insert(node) {
                state.graph.rename(&node, &format!("grad_{name}"))?;
            }
            results.push(node);
        }
        let refs: Vec<&NodeId> = results.iter().collect();
        state.graph.output(&refs)?;
        for (target, value) in returned.mutations {
            let node = recording.operand(&mut state, &self.values[value][0])?;
            state.graph.mutate_buffer(target, &node)?;
        }
        let mut graph = std::mem::take(&mut state.graph);
        let mut attributes = std::mem::take(&mut state.attributes);
        drop(state);
        drop_unused(&mut graph, copied)?;
        let used: HashSet<String> = graph
            .nodes()
            .filter_map(|id| match &graph.node(&id).ok()?.kind {
                NodeKind::GetAttr { target } => Some(target.clone()),
                _ => None,
            })
            .collect();
        attributes.retain(|name, _| forward.attributes.contains_key(name) || used.contains(name));
        graph.verify()?;
        Ok(JointGraph {
            traced: TracedGraph { graph, attributes },
            forward_outputs: outputs.len(),
            gradients_of: wrt.iter().map(|w| (*w).to_string()).collect(),
            tangents,
        })
    }
}

fn metas_to_tensors(metas: &[TensorMeta]) -> Vec<Tensor> {
    metas
        .iter()
        .map(|m| Tensor::new_meta(&m.shape, m.dtype))
        .collect()
}

/// Erases the backward nodes (not `kept`) that nothing uses, last first, until none is left.
fn drop_unused(graph: &mut Graph, kept: &HashSet<NodeId>) -> Result<()> {
    loop {
        let mut erased = false;
        let order: Vec<NodeId> = graph.nodes().collect();
        for id in order.iter().rev() {
            if kept.contains(id) || !graph.users(id)?.is_empty() {
                continue;
            }
            let removable = match &graph.node(id)?.kind {
                NodeKind::CallFunction { op } => op.is_pure(),
                NodeKind::GetItem { .. } | NodeKind::GetAttr { .. } => true,
                _ => false,
            };
            if removable {
                graph.erase(id)?;
                erased = true;
            }
        }
        if !erased {
            return Ok(());
        }
    }
}
