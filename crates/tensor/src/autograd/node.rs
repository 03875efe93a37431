//! A recorded op in the autograd graph: the op, what it saved, and edges to its inputs' nodes.

use crate::op::{BackwardCtx, Op};
use crate::{Result, Tensor, TensorError, TensorMeta};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

static NEXT_NODE_ID: AtomicU64 = AtomicU64::new(1);

/// Where a gradient flows: output `index` of `node`.
#[derive(Clone)]
pub(crate) struct GradEdge {
    pub(crate) node: Arc<Node>,
    pub(crate) index: usize,
}

/// Where an input's gradient goes: another node, or a leaf's `.grad`.
pub(crate) enum InputEdge {
    Node(GradEdge),
    Leaf(Tensor),
    None,
}

/// Values the backward formula reads; freed after a backward that does not retain the graph.
pub(crate) struct Saved {
    pub(crate) inputs: Vec<Tensor>,
    pub(crate) input_versions: Vec<u64>,
    pub(crate) outputs: Vec<Tensor>,
}

pub(crate) struct Node {
    pub(crate) id: u64,
    pub(crate) op: Op,
    pub(crate) inputs: Vec<InputEdge>,
    pub(crate) output_metas: Vec<TensorMeta>,
    pub(crate) saved: Mutex<Option<Saved>>,
}

impl Node {
    pub(crate) fn op_name(&self) -> String {
        format!("{}Backward", self.op.name())
    }

    /// Frees the saved values unless the graph is retained.
    pub(crate) fn release(&self, retain: bool) {
        if !retain {
            *self.saved.lock().unwrap_or_else(|e| e.into_inner()) = None;
        }
    }

    /// Runs the op's backward formula for the given output gradients.
    pub(crate) fn apply(
        &self,
        grads: &[Option<Tensor>],
        retain: bool,
    ) -> Result<Vec<Option<Tensor>>> {
        let mut slot = self.saved.lock().unwrap_or_else(|e| e.into_inner());
        let Some(saved) = slot.as_ref() else {
            return Err(TensorError::Autograd(format!(
                "trying to backward through the graph a second time (through {}); the saved values \
                 were freed by the first backward: pass retain_graph=true to keep them",
                self.op_name()
            )));
        };
        for (i, (t, &v)) in saved.inputs.iter().zip(&saved.input_versions).enumerate() {
            if t.version() != v {
                return Err(TensorError::Autograd(format!(
                    "one of the values needed by {} (input {i}, shape {:?}) has been modified by an \
                     in-place operation: it is at version {}, expected version {v}",
                    self.op_name(),
                    t.shape(),
                    t.version()
                )));
            }
        }
        let needs: Vec<bool> = self
            .inputs
            .iter()
            .map(|e| !matches!(e, InputEdge::None))
            .collect();
        let cx = BackwardCtx {
            inputs: &saved.inputs,
            outputs: &saved.outputs,
            grads,
            needs: &needs,
            output_metas: &self.output_metas,
        };
        let result = self.op.backward(&cx)?;
        if !retain {
            *slot = None;
        }
        Ok(result)
    }
}

/// Attaches a new node for `op` to `outputs` when any input requires a gradient.
pub(crate) fn record(op: &Op, inputs: &[&Tensor], outputs: &[Tensor]) {
    let edges: Vec<InputEdge> = inputs
        .iter()
        .map(|t| {
            if !t.requires_grad() {
                InputEdge::None
            } else if let Some(edge) = t.grad_fn() {
                InputEdge::Node(edge)
            } else {
                InputEdge::Leaf((*t).clone())
            }
        })
        .collect();
    let saved = Saved {
        inputs: inputs.iter().map(|t| t.detach()).collect(),
        input_versions: inputs.iter().map(|t| t.version()).collect(),
        outputs: outputs.iter().map(|t| t.detach()).collect(),
    };
    let node = Arc::new(Node {
        id: NEXT_NODE_ID.fetch_add(1, Ordering::Relaxed),
        op: op.clone(),
        inputs: edges,
        output_metas: outputs.iter().map(|t| t.meta()).collect(),
        saved: Mutex::new(Some(saved)),
    });
    for (index, out) in outputs.iter().enumerate() {
        if out.dtype().is_float() && op.output_is_differentiable(index) {
            out.set_grad_fn(GradEdge {
                node: Arc::clone(&node),
                index,
            });
        }
    }
}
