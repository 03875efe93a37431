//! The graph of a training step: the loss traced at op level, its joint forward+backward
//! graph with respect to the trainable parameters (rematerialised when asked), the module's
//! parameters and buffers read as
//! graph inputs (they change every step), and the optimizer's recorded update appended, whose
//! results (new parameters, new optimizer state) are the graph's outputs after the loss.

use super::record::{UpdateRecord, ValueRef};
use crate::CompileError;
use crate::fx::autodiff::joint_graph;
use crate::fx::trace::{LeafPolicy, TracedGraph, trace_with};
use crate::fx::{FxError, Graph, GraphModule, NodeId, NodeKind};
use crate::nn::{Call, Layer, Module, ModuleExt, Sequential};
use crate::passes::RematReport;
use indexmap::IndexMap;
use std::collections::HashMap;
use std::sync::Arc;
use tessera_tensor::{Tensor, TensorId, TensorMeta};

/// What feeds a placeholder of the step's graph on each call.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Feed {
    /// The batch's input (0) or target (1).
    Batch(usize),
    /// Module state tensor `i` (a parameter or a buffer).
    State(usize),
    /// Live tensor `i` of the update record (optimizer state).
    Live(usize),
    /// Run-time scalar `i` of the update record.
    Scalar(usize),
}

/// The joint graph of one batch shape, before an update is appended.
pub(crate) struct JointStep {
    graph: Graph,
    constants: IndexMap<String, Tensor>,
    loss: NodeId,
    /// One per trainable parameter, in `trainable` order.
    grads: Vec<NodeId>,
    /// Module state read by the graph, each with its placeholder.
    state: Vec<(Tensor, NodeId)>,
    /// Buffers a training step writes (batch-norm running statistics), each with the node of
    /// its new value: outputs after the update's.
    mutations: Vec<(Tensor, NodeId)>,
    /// Trainable parameters by id, with their position among `grads`.
    pub(crate) grad_index: HashMap<TensorId, usize>,
    /// The qualified name of each parameter and buffer, by id (for errors).
    names: HashMap<TensorId, String>,
}

/// Traces `loss(module(input), target)` at op level for a batch shaped like `input` and
/// `target`, derives its joint graph with respect to the module's trainable parameters and,
/// when `rematerialize` is set, rematerialises it (returning what that did).
pub(crate) fn joint_step<M: Layer>(
    module: &M,
    loss: &dyn Fn(&Tensor, &Tensor) -> crate::nn::Result<Tensor>,
    input: &TensorMeta,
    target: &TensorMeta,
    rematerialize: bool,
) -> Result<(JointStep, Option<RematReport>), CompileError> {
    let traced = trace_with(
        module,
        &[("input", input.clone()), ("target", target.clone())],
        LeafPolicy::none(),
        |batch| Ok(vec![loss(&module.call(batch[0].clone())?, &batch[1])?]),
    )
    .map_err(graph_error)?;
    let trainable: Vec<(String, Tensor)> = module
        .named_parameters()
        .into_iter()
        .filter(|(_, p)| p.tensor().requires_grad())
        .map(|(name, p)| (name, p.tensor().clone()))
        .collect();
    let wrt: Vec<&str> = trainable.iter().map(|(name, _)| name.as_str()).collect();
    let mut joint = joint_graph(&traced, &wrt).map_err(graph_error)?;
    let remat = if rematerialize {
        let report = crate::passes::rematerialize(&mut joint.traced.graph, joint.forward_outputs)
            .map_err(|source| CompileError::TrainPass {
            pass: "rematerialize",
            source: Box::new(source),
        })?;
        Some(report)
    } else {
        None
    };
    let TracedGraph {
        mut graph,
        mut attributes,
    } = joint.traced;
    let mutated = graph.take_buffer_mutations().map_err(graph_error)?;
    let output = graph
        .output_node()
        .ok_or_else(|| invalid("the joint graph has no output".into()))?;
    let results = graph.operands(&output).map_err(graph_error)?;
    graph.erase(&output).map_err(graph_error)?;
    let (loss, grads) = (results[0], results[joint.forward_outputs..].to_vec());

    let live_state: HashMap<String, Tensor> = module
        .named_parameters()
        .into_iter()
        .map(|(n, p)| (n, p.tensor().clone()))
        .chain(module.named_buffers())
        .collect();
    let state = state_as_inputs(&mut graph, &live_state).map_err(graph_error)?;
    let mutations = mutated
        .into_iter()
        .map(|(target, value)| match live_state.get(&target) {
            Some(buffer) => Ok((buffer.clone(), value)),
            None => Err(invalid(format!(
                "the graph writes {target}, which is not a buffer of the module"
            ))),
        })
        .collect::<Result<Vec<_>, _>>()?;
    for name in live_state.keys() {
        attributes.shift_remove(name);
    }
    let grad_index = trainable
        .iter()
        .enumerate()
        .map(|(i, (_, p))| (p.id(), i))
        .collect();
    let names = live_state
        .iter()
        .map(|(name, t)| (t.id(), name.clone()))
        .collect();
    let step = JointStep {
        names,
        graph,
        constants: attributes,
        loss,
        grads,
        state,
        mutations,
        grad_index,
    };
    Ok((step, remat))
}

/// Replaces every `get_attr` of module state (`live`, by qualified name) with a placeholder
/// named after it: one per tensor, in the order of first use.
fn state_as_inputs(
    graph: &mut Graph,
    live: &HashMap<String, Tensor>,
) -> Result<Vec<(Tensor, NodeId)>, FxError> {
    let reads: Vec<(NodeId, String)> = graph
        .nodes()
        .filter_map(|id| match &graph.node(&id).ok()?.kind {
            NodeKind::GetAttr { target } if live.contains_key(target) => Some((id, target.clone())),
            _ => None,
        })
        .collect();
    let mut placeholders: IndexMap<String, NodeId> = IndexMap::new();
    for (read, target) in reads {
        let placeholder = match placeholders.get(&target) {
            Some(p) => *p,
            None => {
                let meta = graph.node(&read)?.meta[0].clone();
                let p = graph.placeholder(&target.replace('.', "_"), meta);
                placeholders.insert(target.clone(), p);
                p
            }
        };
        graph.replace_all_uses_with(&read, &placeholder)?;
        graph.erase(&read)?;
    }
    Ok(placeholders
        .into_iter()
        .map(|(target, node)| (live[&target].clone(), node))
        .collect())
}

impl JointStep {
    /// The step's graph module with `update` appended (its outputs: the loss, each written
    /// value in the record's order, then the new buffer values) and what feeds each of its
    /// placeholders.
    pub(crate) fn with_update(
        &self,
        update: &UpdateRecord,
    ) -> Result<(GraphModule, Vec<Feed>), CompileError> {
        let (gm, order) = self.append_update(update).map_err(graph_error)?;
        let order = order
            .into_iter()
            .zip(gm.graph.placeholders())
            .map(|(feed, p)| {
                feed.ok_or_else(|| {
                    invalid(format!(
                        "the graph has an input {} that is neither the batch, module state nor \
                         optimizer state",
                        gm.graph.display(&p)
                    ))
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok((gm, order))
    }

    #[allow(clippy::type_complexity)]
    fn append_update(
        &self,
        update: &UpdateRecord,
    ) -> Result<(GraphModule, Vec<Option<Feed>>), FxError> {
        let mut graph = self.graph.clone();
        let state_nodes: HashMap<TensorId, NodeId> =
            self.state.iter().map(|(t, node)| (t.id(), *node)).collect();
        let mut feeds: HashMap<NodeId, Feed> = HashMap::new();
        let mut live_nodes = Vec::with_capacity(update.live.len());
        for (i, t) in update.live.iter().enumerate() {
            let node = match state_nodes.get(&t.id()) {
                Some(node) => *node,
                None => {
                    let node = graph.placeholder(&format!("optimizer_state_{i}"), t.meta());
                    feeds.insert(node, Feed::Live(i));
                    node
                }
            };
            live_nodes.push(node);
        }
        let scalar_nodes: Vec<NodeId> = (0..update.scalars.len())
            .map(|i| {
                let meta = TensorMeta::new(vec![], tessera_tensor::DType::F64);
                let node = graph.placeholder(&format!("lr_{i}"), meta);
                feeds.insert(node, Feed::Scalar(i));
                node
            })
            .collect();
        let mut op_outputs: Vec<Vec<NodeId>> = Vec::with_capacity(update.shape.ops.len());
        let node_of = |r: &ValueRef, op_outputs: &[Vec<NodeId>]| -> NodeId {
            match *r {
                ValueRef::Grad(i) => self.grads[i],
                ValueRef::Live(i) => live_nodes[i],
                ValueRef::Scalar(i) => scalar_nodes[i],
                ValueRef::Output { op, index } => op_outputs[op][index],
            }
        };
        for (op, refs) in &update.shape.ops {
            let operands: Vec<NodeId> = refs.iter().map(|r| node_of(r, &op_outputs)).collect();
            let operand_refs: Vec<&NodeId> = operands.iter().collect();
            let node = graph.call_function(op.clone(), &operand_refs)?;
            let count = graph.node(&node)?.meta.len();
            let outputs = if count == 1 {
                vec![node]
            } else {
                (0..count)
                    .map(|k| graph.getitem(&node, k))
                    .collect::<Result<_, _>>()?
            };
            op_outputs.push(outputs);
        }
        let mut results = vec![self.loss];
        results.extend(update.shape.written.iter().map(|r| node_of(r, &op_outputs)));
        results.extend(self.mutations.iter().map(|(_, value)| *value));
        let result_refs: Vec<&NodeId> = results.iter().collect();
        graph.output(&result_refs)?;

        for (i, (_, node)) in self.state.iter().enumerate() {
            feeds.insert(*node, Feed::State(i));
        }
        let placeholders = graph.placeholders();
        let mut order = Vec::with_capacity(placeholders.len());
        for p in &placeholders {
            order.push(match (feeds.get(p), graph.name(p)?) {
                (Some(feed), _) => Some(*feed),
                (None, "input") => Some(Feed::Batch(0)),
                (None, "target") => Some(Feed::Batch(1)),
                (None, _) => None,
            });
        }
        let root: Arc<dyn Module> = Arc::new(Sequential::new());
        let mut gm = GraphModule::new(
            root,
            TracedGraph {
                graph,
                attributes: IndexMap::new(),
            },
        );
        gm.constants = self.constants.clone();
        Ok((gm, order))
    }

    /// The buffers written after the update's values, in output order.
    pub(crate) fn mutated_buffers(&self) -> impl Iterator<Item = &Tensor> {
        self.mutations.iter().map(|(t, _)| t)
    }

    /// The qualified name of module state tensor `id` (a parameter or a buffer).
    pub(crate) fn state_name(&self, id: TensorId) -> Option<&str> {
        self.names.get(&id).map(String::as_str)
    }

    /// The module state tensors fed as [`Feed::State`], in order.
    pub(crate) fn state(&self) -> impl Iterator<Item = &Tensor> {
        self.state.iter().map(|(t, _)| t)
    }
}

fn graph_error(source: FxError) -> CompileError {
    CompileError::TrainGraph {
        source: Box::new(source),
    }
}

fn invalid(reason: String) -> CompileError {
    CompileError::TrainStep { reason }
}
