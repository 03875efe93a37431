//! Backward as a graph transform (the joint graph of AOTAutograd): from an op-level forward
//! graph and the values that need gradients, a graph that computes the forward outputs and
//! those gradients. Each op's backward formula from the op table (the one eager autograd runs)
//! is applied to meta tensors standing for the graph's values, and the ops it applies become
//! nodes; saved activations are ordinary graph values.
//!
//! What is differentiated: every float output of the forward. A one-element output (a loss)
//! is seeded with ones; any other output gets a placeholder `tangent_<output>` for its
//! upstream gradient, after the forward's inputs. The joint graph returns the forward outputs,
//! then one gradient per requested value, in request order, each computed by a node named
//! `grad_<value>` (`grad_fc1_weight`) where the gradient is a node of its own. A value the
//! outputs do not depend on gets zeros.
//!
//! Training-mode state: the forward's buffer mutations (a training batch norm's running
//! statistics) need no gradient and stay buffer mutations of the joint graph, returned after
//! the gradients; a training dropout's mask is an output of its node, which the backward reads,
//! so the gradient flows through the mask drawn in the same run.
//!
//! Not done here: choosing what to save and what to recompute (the graph keeps every forward
//! value the formulas read; `tessera_passes::Rematerialize` chooses), and optimizers.

mod walk;

use crate::graph_module::GraphModule;
use crate::trace::TracedGraph;
use crate::{Graph, Result};

/// A joint forward+backward graph and what its outputs are.
#[derive(Clone)]
pub struct JointGraph {
    /// The graph, and the tensors its `get_attr` nodes read that are not state of the traced
    /// module: the forward's constants and those the backward formulas made.
    pub traced: TracedGraph,
    /// How many of the outputs are the forward's results (they come first; the buffer
    /// mutations, `traced.graph.buffer_mutations()`, come last, after the gradients).
    pub forward_outputs: usize,
    /// What each gradient output (after the forward outputs) is the gradient of, in order.
    pub gradients_of: Vec<String>,
    /// Names of the placeholders added for the upstream gradients of outputs that are not
    /// one-element (after the forward's inputs), in output order.
    pub tangents: Vec<String>,
}

/// Derives the joint graph of `forward` (an op-level graph: module calls inlined) with
/// respect to `wrt`: get_attr targets (parameters by their state-dict names, `fc1.weight`)
/// and placeholder names (`x`).
pub fn joint_graph(forward: &TracedGraph, wrt: &[&str]) -> Result<JointGraph> {
    walk::derive(forward, wrt)
}

impl GraphModule {
    /// The joint forward+backward graph of this graph module with respect to `wrt` (see
    /// [`joint_graph`]) as a graph module that shares this one's modules and parameters:
    /// calling it runs the forward and returns the outputs and then the gradients.
    pub fn joint(&self, wrt: &[&str]) -> Result<(GraphModule, JointGraph)> {
        let forward = TracedGraph {
            graph: self.graph.clone(),
            attributes: self.constants.clone(),
        };
        let joint = joint_graph(&forward, wrt)?;
        let mut module = self.share();
        module.graph = joint.traced.graph.clone();
        module.constants = joint.traced.attributes.clone();
        Ok((module, joint))
    }
}

impl JointGraph {
    /// The joint graph.
    pub fn graph(&self) -> &Graph {
        &self.traced.graph
    }
}
