//! Equality-saturation simplification with egg: every region of elementwise and layout ops
//! (see [`region`]) becomes an e-graph over a tensor-expression language ([`language`]) with a
//! shape analysis ([`analysis`]); the rules of [`rules`] run within node, iteration and time
//! limits; the cheapest equivalent terms under [`cost`] replace the region in the IR
//! ([`writeback`]), and [`explain`] reports which rules fired. Everything outside regions
//! (module calls, GEMMs, convolutions, reductions, multi-output ops) is left alone and only
//! read as opaque leaves.

mod analysis;
mod cost;
mod explain;
mod language;
mod region;
mod rules;
mod writeback;

pub use explain::{RegionReport, SimplifyReport, Stop};

use crate::{Changed, Pass, PassError, Result};
use analysis::{LeafFacts, ShapeAnalysis};
use egg::{Id, Runner};
use language::{Leaf, TensorLang, add_op};
use region::Region;
use std::collections::HashMap;
use std::time::Duration;
use tessera_fx::{GraphModule, NodeId, NodeKind};
use tessera_nn::ModuleExt;
use tessera_tensor::{DType, Tensor};

/// The simplify pass and its limits, which apply to each region's e-graph run.
///
/// ```
/// use std::sync::Arc;
/// use tessera_fx::trace::TracedGraph;
/// use tessera_fx::{Graph, GraphModule};
/// use tessera_nn::layers::Identity;
/// use tessera_passes::Simplify;
/// use tessera_tensor::op::{BinaryOp, ScalarOp, UnaryOp};
/// use tessera_tensor::{DType, Op, TensorMeta};
///
/// let mut g = Graph::new();
/// let x = g.placeholder("x", TensorMeta::new([2, 3], DType::F32));
/// let one = Op::Scalar(ScalarOp { op: BinaryOp::Mul, value: 1.0, reversed: false });
/// let y = g.call_function(one, &[&x])?;
/// let r = g.call_function(Op::Unary(UnaryOp::Relu), &[&y])?;
/// let rr = g.call_function(Op::Unary(UnaryOp::Relu), &[&r])?;
/// g.output(&[&rr])?;
/// let traced = TracedGraph { graph: g, attributes: Default::default() };
/// let mut gm = GraphModule::new(Arc::new(Identity::new()), traced);
///
/// let report = Simplify::default().run_with_report(&mut gm)?;
/// assert_eq!(report.fired(), ["mul-one", "relu-relu"]);
/// assert_eq!(
///     gm.graph.to_string(),
///     "graph(x: f32[2, 3]):
///     %relu_2 : f32[2, 3] = call_function[relu](%x)
///     return %relu_2
/// "
/// );
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct Simplify {
    /// Stop once the e-graph holds this many e-nodes.
    pub node_limit: usize,
    /// Stop after this many iterations of applying every rule.
    pub iter_limit: usize,
    /// Stop once this much time has passed.
    pub time_limit: Duration,
}

impl Default for Simplify {
    fn default() -> Self {
        Simplify {
            node_limit: 10_000,
            iter_limit: 30,
            time_limit: Duration::from_secs(2),
        }
    }
}

/// The value every element of `t` has, if they all agree (an empty tensor has none).
fn uniform_value(t: &Tensor) -> Option<f64> {
    if t.dtype() == DType::Bool {
        return None;
    }
    let values = t.to_vec_f64().ok()?;
    let first = *values.first()?;
    values
        .iter()
        .all(|v| v.to_bits() == first.to_bits())
        .then_some(first)
}

/// What the graph says about each leaf: its meta, and its fill when it reads a constant of the
/// module (`gm.constants`, never parameters or buffers, which training may change).
fn leaf_facts(gm: &GraphModule, leaves: &[NodeId]) -> Result<Vec<LeafFacts>> {
    leaves
        .iter()
        .map(|id| {
            let node = gm.graph.node(id)?;
            let meta = node.meta.first().cloned().ok_or_else(|| {
                PassError::Unsupported(format!("simplify: leaf %{} has no value", node.name))
            })?;
            let fill = match &node.kind {
                // Parameters and buffers shadow constants of the same name, as in the
                // interpreter.
                NodeKind::GetAttr { target }
                    if gm.root().get_parameter(target).is_err()
                        && gm.root().get_buffer(target).is_err() =>
                {
                    gm.constants.get(target).and_then(uniform_value)
                }
                _ => None,
            };
            Ok(LeafFacts { meta, fill })
        })
        .collect()
}

impl Simplify {
    /// Simplifies every region of `gm` and explains what happened.
    pub fn run_with_report(&self, gm: &mut GraphModule) -> Result<SimplifyReport> {
        let rules = rules::all()?;
        let mut report = SimplifyReport {
            nodes_before: gm.graph.len(),
            ..SimplifyReport::default()
        };
        for region in region::regions(&gm.graph)? {
            let region_report = self.simplify_region(gm, &region, &rules, &mut report)?;
            report.regions.push(region_report);
        }
        report.nodes_after = gm.graph.len();
        Ok(report)
    }

    fn simplify_region(
        &self,
        gm: &mut GraphModule,
        region: &Region,
        rules: &[rules::Rule],
        report: &mut SimplifyReport,
    ) -> Result<RegionReport> {
        let analysis = ShapeAnalysis {
            leaves: leaf_facts(gm, &region.leaves)?,
            conflicts: 0,
        };
        let mut runner: Runner<TensorLang, ShapeAnalysis> = Runner::new(analysis)
            .with_node_limit(self.node_limit)
            .with_iter_limit(self.iter_limit)
            .with_time_limit(self.time_limit);
        let mut class_of: HashMap<NodeId, Id> = HashMap::new();
        for (i, leaf) in region.leaves.iter().enumerate() {
            let id = runner.egraph.add(TensorLang::Leaf(Leaf(i as u32)));
            class_of.insert(*leaf, id);
        }
        let mut original = Vec::new();
        for id in &region.nodes {
            let node = gm.graph.node(id)?;
            let NodeKind::CallFunction { op } = &node.kind else {
                continue;
            };
            let operands = gm
                .graph
                .operands(id)?
                .iter()
                .map(|o| class_of.get(o).copied())
                .collect::<Option<Vec<Id>>>()
                .ok_or_else(|| {
                    PassError::Unsupported(format!(
                        "simplify: {} out of order",
                        gm.graph.display(id)
                    ))
                })?;
            let class = add_op(&mut runner.egraph, op, &operands).ok_or_else(|| {
                PassError::Unsupported(format!("simplify: cannot express %{}", node.name))
            })?;
            if runner.egraph[class].data.meta.as_ref() != node.meta.first() {
                return Err(PassError::Unsupported(format!(
                    "simplify: the shape analysis disagrees with the meta of %{}",
                    node.name
                )));
            }
            let enodes = &runner.egraph[class].nodes;
            original.extend(enodes.iter().cloned());
            class_of.insert(*id, class);
        }
        let runner = runner.run(rules);
        if runner.egraph.analysis.conflicts > 0 {
            return Err(PassError::Unsupported(format!(
                "simplify: a rule equated values of different shapes or constants in the region \
                 at {}",
                gm.graph.display(&region.nodes[0])
            )));
        }
        for iteration in &runner.iterations {
            for (rule, count) in &iteration.applied {
                *report.rules.entry(rule.to_string()).or_default() += count;
            }
        }
        // Named before the write-back, which may erase the region's first node.
        let first = gm.graph.name(&region.nodes[0])?.to_string();
        let cost = cost::KernelCost::new(&runner.egraph, original);
        let rewritten =
            writeback::write_back(&mut gm.graph, region, &runner.egraph, &class_of, cost)?;
        Ok(RegionReport {
            first,
            nodes: region.nodes.len(),
            leaves: region.leaves.len(),
            roots: region.roots.len(),
            stop: runner
                .stop_reason
                .as_ref()
                .map(Stop::from)
                .unwrap_or(Stop::Saturated),
            iterations: runner.iterations.len(),
            egraph_nodes: runner.egraph.total_size(),
            egraph_classes: runner.egraph.number_of_classes(),
            rewritten,
        })
    }
}

impl Pass for Simplify {
    fn name(&self) -> &'static str {
        "simplify"
    }

    fn run(&self, gm: &mut GraphModule) -> Result<Changed> {
        Ok(Changed::from_bool(self.run_with_report(gm)?.changed()))
    }
}
