//! Profiling a compiled run: one event per step of the compiled program, a generated kernel
//! (named after the kernel, `k2_linear_relu`) or a node that runs its eager kernel (named
//! after its op, with the node and the module its weights come from).

use super::{Event, EventKind, Profiler};
use crate::compile::{CompileError, CompiledModule};
use std::time::{Duration, Instant};
use tessera_kernel::{ExternalCall, Step};
use tessera_tensor::Tensor;

impl Profiler {
    /// Runs `compiled` on `inputs` (as [`CompiledModule::run`]), recording one event per
    /// step of its program.
    pub fn profile_compiled(
        &self,
        compiled: &CompiledModule,
        inputs: &[Tensor],
    ) -> Result<Vec<Tensor>, CompileError> {
        let mut timed: Vec<(usize, Instant, Duration, usize)> = Vec::new();
        let mut timer = |step: usize, elapsed: Duration, outputs: &[&Tensor]| {
            let bytes = outputs
                .iter()
                .map(|t| t.numel().saturating_mul(t.dtype().size_in_bytes()))
                .sum();
            let start = Instant::now()
                .checked_sub(elapsed)
                .unwrap_or_else(Instant::now);
            timed.push((step, start, elapsed, bytes));
        };
        let (outputs, program) = compiled.run_timed(inputs, Some(&mut timer))?;
        let graph = compiled.graph();
        for (step, start, duration, bytes) in timed {
            let (name, path, flops) = match &program.program.steps[step] {
                Step::Kernel { kernel, .. } => (kernel.name.clone(), kernel.name.clone(), 0),
                Step::External { node, call, .. } => {
                    let id = graph.find(node);
                    let flops = id
                        .and_then(|id| tessera_passes::cost::op_flops(&graph, &id).ok())
                        .unwrap_or(0);
                    let name = match call {
                        ExternalCall::Op(op) => op.name(),
                        ExternalCall::Module(_) => "call_module".into(),
                    };
                    let path = match id.and_then(|id| graph.weights_module(&id)) {
                        Some(module) => format!("%{node} ({module})"),
                        None => format!("%{node}"),
                    };
                    (name, path, flops)
                }
            };
            self.record(Event {
                name,
                path,
                kind: EventKind::Node,
                start: self.since_origin(start),
                duration,
                depth: 0,
                bytes,
                flops,
            });
        }
        Ok(outputs)
    }
}
