//! The recorder tracing installs: it maps traced tensors to graph nodes, turns parameters,
//! buffers and constants into `get_attr` nodes, and appends a node for every op on meta
//! tensors and every leaf module call.

use super::LeafPolicy;
use crate::{FxError, Graph, NodeId, TraceError};
use indexmap::IndexMap;
use std::collections::HashMap;
use std::sync::Mutex;
use tessera_nn::module_trace::ModuleCallRecorder;
use tessera_nn::{Module, ModuleExt};
use tessera_tensor::trace::TraceRecorder;
use tessera_tensor::{Op, Tensor, TensorError, TensorId};

#[derive(Default)]
pub(crate) struct State {
    pub(crate) graph: Graph,
    /// The node (or getitem node) that yields each traced tensor.
    pub(crate) values: HashMap<TensorId, NodeId>,
    /// Values of multi-output nodes not used yet: their getitem is made on first use.
    pending: HashMap<TensorId, (NodeId, usize)>,
    /// get_attr nodes by qualified name.
    attr_nodes: HashMap<String, NodeId>,
    /// Tensors that get_attr nodes read: parameters and buffers by qualified name, then
    /// constants made during the forward (`_tensor_constant0`, ...).
    pub(crate) attributes: IndexMap<String, Tensor>,
    /// Buffers the forward gave new values (by qualified name), in the order first written:
    /// the traced graph returns them as buffer mutations.
    pub(crate) mutations: IndexMap<String, NodeId>,
}

pub(crate) struct Recording {
    pub(crate) state: Mutex<State>,
    /// Qualified names of the root's parameters and buffers by tensor identity.
    names: HashMap<TensorId, String>,
    policy: LeafPolicy,
}

/// Errors inside the recorder travel through the tensor crate's error type.
fn to_tensor_error(e: FxError) -> TensorError {
    TensorError::InvalidArgument {
        op: "trace".into(),
        msg: e.to_string(),
    }
}

impl Recording {
    pub(crate) fn new(
        names: HashMap<TensorId, String>,
        attributes: IndexMap<String, Tensor>,
        policy: LeafPolicy,
    ) -> Self {
        Recording {
            state: Mutex::new(State {
                attributes,
                ..State::default()
            }),
            names,
            policy,
        }
    }

    pub(crate) fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The nodes of `tensors`, in order (see [`Recording::operand`]).
    fn operands<'t>(
        &self,
        state: &mut State,
        tensors: impl IntoIterator<Item = &'t Tensor>,
    ) -> crate::Result<Vec<NodeId>> {
        tensors
            .into_iter()
            .map(|t| self.operand(state, t))
            .collect()
    }

    /// The node yielding `tensor`: a traced value, a parameter or buffer, or a new constant.
    pub(crate) fn operand(&self, state: &mut State, tensor: &Tensor) -> crate::Result<NodeId> {
        if let Some(node) = state.values.get(&tensor.id()) {
            return Ok(*node);
        }
        if let Some((node, index)) = state.pending.remove(&tensor.id()) {
            let item = state.graph.getitem(&node, index)?;
            state.values.insert(tensor.id(), item);
            return Ok(item);
        }
        let name = match self.names.get(&tensor.id()) {
            Some(name) => name.clone(),
            None if tensor.is_meta() => {
                return Err(FxError::Trace {
                    source: TraceError::ForeignTensor {
                        shape: tensor.shape(),
                    },
                });
            }
            None => {
                let name = format!(
                    "_tensor_constant{}",
                    state
                        .attributes
                        .keys()
                        .filter(|k| k.starts_with("_tensor_constant"))
                        .count()
                );
                state.attributes.insert(name.clone(), tensor.detach());
                name
            }
        };
        if let Some(node) = state.attr_nodes.get(&name) {
            return Ok(*node);
        }
        let node = state.graph.get_attr(&name, tensor.meta())?;
        state.attr_nodes.insert(name, node);
        state.values.insert(tensor.id(), node);
        Ok(node)
    }

    /// Maps `outputs` to `node` (one output) or to getitem nodes of it, made when a value is
    /// first used (several).
    pub(crate) fn bind_outputs(
        state: &mut State,
        node: NodeId,
        outputs: &[Tensor],
    ) -> crate::Result<()> {
        if outputs.len() == 1 {
            state.values.insert(outputs[0].id(), node);
            return Ok(());
        }
        for (i, out) in outputs.iter().enumerate() {
            state.pending.insert(out.id(), (node, i));
        }
        Ok(())
    }

    fn record_op(&self, op: &Op, inputs: &[&Tensor], outputs: &[Tensor]) -> crate::Result<()> {
        let mut state = self.lock();
        let operands = self.operands(&mut state, inputs.iter().copied())?;
        let refs: Vec<&NodeId> = operands.iter().collect();
        let node = state.graph.call_function(op.clone(), &refs)?;
        Self::bind_outputs(&mut state, node, outputs)
    }
}

impl TraceRecorder for Recording {
    fn record(
        &self,
        op: &Op,
        inputs: &[&Tensor],
        outputs: &[Tensor],
    ) -> tessera_tensor::Result<()> {
        self.record_op(op, inputs, outputs).map_err(to_tensor_error)
    }

    /// A buffer of the traced module gets a new value: the graph will return it as a buffer
    /// mutation, and later reads of the buffer in the same forward see the new value.
    fn record_state_write(&self, target: &Tensor, value: &Tensor) -> tessera_tensor::Result<()> {
        let Some(name) = self.names.get(&target.id()) else {
            return Err(to_tensor_error(FxError::Trace {
                source: TraceError::StateWrite {
                    shape: target.shape(),
                },
            }));
        };
        let mut state = self.lock();
        let node = self.operand(&mut state, value).map_err(to_tensor_error)?;
        state.values.insert(target.id(), node);
        state.mutations.insert(name.clone(), node);
        Ok(())
    }
}

impl ModuleCallRecorder for Recording {
    fn is_leaf(&self, module: &dyn Module, path: &str) -> bool {
        self.policy.is_leaf(module, path)
    }

    fn record_call(
        &self,
        module: &dyn Module,
        path: &str,
        inputs: &[Tensor],
        outputs: &[Tensor],
    ) -> tessera_nn::Result<()> {
        let record = || -> crate::Result<()> {
            let mut state = self.lock();
            let operands = self.operands(&mut state, inputs)?;
            let refs: Vec<&NodeId> = operands.iter().collect();
            let metas = outputs.iter().map(Tensor::meta).collect();
            let node = state.graph.call_module(
                path,
                module.kind(),
                &tessera_nn::one_line_repr(module),
                &refs,
                metas,
            )?;
            Self::bind_outputs(&mut state, node, outputs)
        };
        record().map_err(|e| tessera_nn::NnError::Invalid(format!("tracing {path}: {e}")))
    }
}
