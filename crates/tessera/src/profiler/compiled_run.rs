//! Profiling a compiled run: one event per step of the compiled program, a generated kernel
//! (named after the kernel, `k2_linear_relu`, with the graph nodes it fuses, their FLOPs and
//! the module whose weights they read) or a node that runs its eager kernel (named after its
//! op, with the node and the module its weights come from).

use super::{Event, EventKind, Profiler};
use crate::compile::{CompileError, CompiledModule};
use std::time::Instant;
use tessera_fx::Graph;
use tessera_kernel::{ExternalCall, Step, StepCost};
use tessera_tensor::Tensor;

impl Profiler {
    /// Runs `compiled` on `inputs` (as [`CompiledModule::run`]), recording one event per
    /// step of its program.
    pub fn profile_compiled(
        &self,
        compiled: &CompiledModule,
        inputs: &[Tensor],
    ) -> Result<Vec<Tensor>, CompileError> {
        let mut timed: Vec<(StepCost, Instant, u64)> = Vec::new();
        let mut timer = |cost: StepCost, _outputs: &[&Tensor]| {
            let start = Instant::now()
                .checked_sub(cost.elapsed)
                .unwrap_or_else(Instant::now);
            timed.push((cost, start, cost.output_bytes));
        };
        let (outputs, program) = compiled.run_timed(inputs, Some(&mut timer))?;
        let graph = compiled.graph();
        for (cost, start, output_bytes) in timed {
            let (name, path, flops) = match &program.program.steps[cost.step] {
                Step::Kernel { kernel, nodes, .. } => {
                    let (path, flops) = fused(&graph, nodes);
                    (kernel.name.clone(), path, flops)
                }
                Step::External { node, call, .. } => {
                    let name = match call {
                        ExternalCall::Op(op) => op.name(),
                        ExternalCall::Module(_) => "call_module".into(),
                    };
                    let (path, flops) = fused(&graph, std::slice::from_ref(node));
                    (name, path, flops)
                }
            };
            self.record(Event {
                name,
                path,
                kind: EventKind::Node,
                start: self.since_origin(start),
                duration: cost.elapsed,
                depth: 0,
                allocated_bytes: cost.allocated_bytes,
                output_bytes,
                flops,
            });
        }
        Ok(outputs)
    }
}

/// The path of a step computing the graph nodes `nodes` (`%linear, %relu (fc1)`: the nodes,
/// then the module whose weights the first of them that reads weights reads) and their FLOPs.
fn fused(graph: &Graph, nodes: &[String]) -> (String, u64) {
    let ids: Vec<_> = nodes.iter().filter_map(|n| graph.find(n)).collect();
    let flops = ids
        .iter()
        .map(|id| tessera_passes::cost::op_flops(graph, id).unwrap_or(0))
        .sum();
    let names: Vec<String> = nodes.iter().map(|n| format!("%{n}")).collect();
    let names = names.join(", ");
    let path = match ids.iter().find_map(|id| graph.weights_module(id)) {
        Some(module) => format!("{names} ({module})"),
        None => names,
    };
    (path, flops)
}
