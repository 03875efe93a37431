//! Rematerialisation of a joint forward+backward graph (AOTAutograd's min-cut partitioner):
//! for each forward value the backward reads, keep it alive from forward to backward, or
//! compute it again in the backward from values kept anyway, whichever keeps fewer bytes
//! alive. Only cheap pure elementwise ops and views are recomputed ([`policy`]); products,
//! convolutions, reductions, normalisations and random ops are always kept. The choice is a
//! minimum cut ([`cut`], over [`max_flow`]), so the pass never keeps more bytes than before;
//! the copies ([`rewrite`]) are named `<name>_recomputed`. The forward is left as it is, and
//! the graph's results do not change.
//!
//! ```
//! use tessera_fx::{Graph, GraphModule};
//! use tessera_passes::Rematerialize;
//!
//! // The forward `sum(gelu(x @ w))`; its backward reads the GEMM's output `mm` (GELU's
//! // derivative) and `gelu` (the gradient of `w` from a later product, here `mm_1`).
//! let mut gm = GraphModule::from_graph(Graph::parse(
//!     "graph(x: f32[64, 32], w: f32[32, 32], g: f32[64, 32]):
//!     %mm : f32[64, 32] = call_function[matmul](%x, %w)
//!     %gelu : f32[64, 32] = call_function[gelu]{tanh: false}(%mm)
//!     %sum : f32[] = call_function[sum]{kind: Sum, dims: [0, 1], keepdim: false}(%gelu)
//!     %gelu_backward : f32[64, 32] = call_function[gelu_backward]{tanh: false}(%g, %mm)
//!     %permute : f32[32, 64] = call_function[permute]{[1, 0]}(%gelu)
//!     %mm_1 : f32[32, 32] = call_function[matmul](%permute, %gelu_backward)
//!     return (%sum, %mm_1)
//! ",
//! )?);
//! let report = Rematerialize::new(1).run_with_report(&mut gm)?;
//! assert_eq!(report.bytes_before(), 2 * 64 * 32 * 4);
//! assert_eq!(report.bytes_saved(), 64 * 32 * 4);
//! assert_eq!(report.recomputed, [("gelu".to_string(), "gelu_recomputed".to_string())]);
//! assert!(gm.graph.to_string().contains("%permute : f32[32, 64] = call_function[permute]{[1, 0]}(%gelu_recomputed)"));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod cut;
mod max_flow;
mod partition;
mod policy;
mod report;
mod rewrite;

pub use report::{RematReport, SavedValue};

use crate::{Changed, Pass, Result};
use partition::Partition;
use policy::value_bytes;
use std::collections::HashMap;
use tessera_fx::interpreter::GraphInterpreter;
use tessera_fx::shape_prop::propagate_shapes;
use tessera_fx::{Graph, GraphModule, NodeId};
use tessera_nn::Module;
use tessera_tensor::TensorMeta;

/// The rematerialisation pass over a joint graph whose first `forward_outputs` results (and
/// buffer mutations) are the forward's and whose other results are gradients, as
/// `tessera_fx::autodiff` builds it ([`JointGraph::forward_outputs`]).
///
/// [`JointGraph::forward_outputs`]: tessera_fx::autodiff::JointGraph::forward_outputs
#[derive(Debug, Clone, PartialEq)]
pub struct Rematerialize {
    /// How many of the graph's results are the forward's (a training loss: 1).
    pub forward_outputs: usize,
    /// Weigh values by their bytes for inputs of these shapes and dtypes (shape propagation
    /// through the graph), rather than for the shapes the graph was traced with.
    pub input_shapes: Option<Vec<TensorMeta>>,
}

impl Default for Rematerialize {
    /// A joint graph of one loss, weighed at its traced shapes.
    fn default() -> Self {
        Rematerialize::new(1)
    }
}

impl Rematerialize {
    /// The pass for a joint graph of `forward_outputs` forward results.
    pub fn new(forward_outputs: usize) -> Self {
        Rematerialize {
            forward_outputs,
            input_shapes: None,
        }
    }

    /// Weighs values for inputs of `shapes` (see [`Rematerialize::input_shapes`]).
    pub fn for_input_shapes(mut self, shapes: Vec<TensorMeta>) -> Self {
        self.input_shapes = Some(shapes);
        self
    }

    /// Runs the pass on `gm` and reports the values kept before and after.
    pub fn run_with_report(&self, gm: &mut GraphModule) -> Result<RematReport> {
        let metas = match &self.input_shapes {
            None => HashMap::new(),
            Some(shapes) => {
                let mut graph = gm.graph.clone();
                let mut interpreter = GraphInterpreter {
                    root: gm.as_module(),
                    constants: Some(&gm.constants),
                };
                propagate_shapes(&mut graph, &mut interpreter, shapes)?;
                let ids: Vec<NodeId> = graph.nodes().collect();
                ids.into_iter()
                    .map(|id| Ok((id, graph.node(&id)?.meta.clone())))
                    .collect::<Result<_>>()?
            }
        };
        rematerialize_weighed(&mut gm.graph, self.forward_outputs, &metas)
    }
}

impl Pass for Rematerialize {
    fn name(&self) -> &'static str {
        "rematerialize"
    }

    fn run(&self, gm: &mut GraphModule) -> Result<Changed> {
        let report = self.run_with_report(gm)?;
        Ok(Changed::from_bool(!report.recomputed.is_empty()))
    }
}

/// Rematerialises the joint graph `graph` (its first `forward_outputs` results are the
/// forward's), weighing values at the shapes it was traced with.
pub fn rematerialize(graph: &mut Graph, forward_outputs: usize) -> Result<RematReport> {
    rematerialize_weighed(graph, forward_outputs, &HashMap::new())
}

/// [`rematerialize`] with the bytes of each node's values taken from `metas` where it has
/// them.
fn rematerialize_weighed(
    graph: &mut Graph,
    forward_outputs: usize,
    metas: &HashMap<NodeId, Vec<TensorMeta>>,
) -> Result<RematReport> {
    let partition = Partition::of(graph, forward_outputs)?;
    let saved = |ids: &[NodeId], graph: &Graph| -> Result<Vec<SavedValue>> {
        ids.iter()
            .map(|id| {
                let node = graph.node(id)?;
                Ok(SavedValue {
                    name: node.name.clone(),
                    bytes: value_bytes(metas.get(id).unwrap_or(&node.meta)),
                })
            })
            .collect()
    };
    let before: Vec<NodeId> = partition
        .read_by_backward()
        .filter(|id| {
            graph
                .node(id)
                .is_ok_and(|n| policy::role(n) != policy::Role::Input)
        })
        .copied()
        .collect();
    let decision = cut::decide(graph, &partition, metas)?;
    let mut report = RematReport {
        saved_before: saved(&before, graph)?,
        saved_after: saved(&decision.kept, graph)?,
        recomputed: Vec::new(),
    };
    // The cut is minimal, so this holds; a graph is never rewritten to keep more.
    if decision.recomputed.is_empty() || report.bytes_after() > report.bytes_before() {
        report.saved_after = report.saved_before.clone();
        return Ok(report);
    }
    let pairs = rewrite::recompute_in_backward(graph, &partition, &decision.recomputed)?;
    report.recomputed = pairs
        .iter()
        .map(|(original, copy)| {
            Ok((
                graph.name(original)?.to_string(),
                graph.name(copy)?.to_string(),
            ))
        })
        .collect::<Result<_>>()?;
    Ok(report)
}
