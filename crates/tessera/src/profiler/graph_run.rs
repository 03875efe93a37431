//! Profiling a graph run: an interpreter that delegates every node to the reference
//! interpreter, timing it and counting the tensor storage it allocates.

use super::{Event, EventKind, Profiler, bytes_of};
use std::time::Instant;
use tessera_fx::interpreter::{GraphInterpreter, Interpreter, run};
use tessera_fx::trace::TracedGraph;
use tessera_fx::{Graph, Node, NodeKind, RunError};
use tessera_nn::Module;
use tessera_tensor::{Op, Tensor};

impl Profiler {
    /// Runs `traced` with the reference interpreter on `inputs` (as
    /// [`TracedGraph::interpret`]), recording one event per node.
    pub fn profile_graph(
        &self,
        traced: &TracedGraph,
        root: &dyn Module,
        inputs: &[Tensor],
    ) -> tessera_fx::Result<Vec<Tensor>> {
        let mut interpreter = Profiling {
            inner: GraphInterpreter {
                root,
                constants: Some(&traced.attributes),
            },
            graph: &traced.graph,
            profiler: self,
        };
        run(&mut interpreter, &traced.graph, inputs)
    }
}

struct Profiling<'a> {
    inner: GraphInterpreter<'a>,
    graph: &'a Graph,
    profiler: &'a Profiler,
}

impl Profiling<'_> {
    fn timed(
        &mut self,
        node: &Node,
        name: String,
        f: impl FnOnce(&mut GraphInterpreter<'_>) -> Result<Vec<Tensor>, RunError>,
    ) -> Result<Vec<Tensor>, RunError> {
        let allocated = tessera_tensor::allocated_bytes();
        let start = Instant::now();
        let outputs = f(&mut self.inner)?;
        let duration = start.elapsed();
        let allocated_bytes = tessera_tensor::allocated_bytes().wrapping_sub(allocated);
        let id = self.graph.find(&node.name);
        let flops = id
            .and_then(|id| tessera_passes::cost::op_flops(self.graph, &id).ok())
            .unwrap_or(0);
        let path = match id.and_then(|id| self.graph.weights_module(&id)) {
            Some(module) => format!("%{} ({module})", node.name),
            None => format!("%{}", node.name),
        };
        self.profiler.record(Event {
            name,
            path,
            kind: EventKind::Node,
            start: self.profiler.since_origin(start),
            duration,
            depth: 0,
            allocated_bytes,
            output_bytes: bytes_of(&outputs),
            flops,
        });
        Ok(outputs)
    }
}

impl Interpreter for Profiling<'_> {
    fn root(&self) -> &dyn Module {
        self.inner.root()
    }

    fn constants(&self) -> Option<&indexmap::IndexMap<String, Tensor>> {
        self.inner.constants()
    }

    fn call_module(
        &mut self,
        node: &Node,
        target: &str,
        args: Vec<Tensor>,
    ) -> Result<Vec<Tensor>, RunError> {
        let name = match &node.kind {
            NodeKind::CallModule { kind, .. } => kind.to_string(),
            _ => "call_module".into(),
        };
        self.timed(node, name, |inner| inner.call_module(node, target, args))
    }

    fn call_function(
        &mut self,
        node: &Node,
        op: &Op,
        args: Vec<Tensor>,
    ) -> Result<Vec<Tensor>, RunError> {
        self.timed(node, op.name().to_string(), |inner| {
            inner.call_function(node, op, args)
        })
    }
}
