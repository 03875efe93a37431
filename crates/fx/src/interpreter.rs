//! The interpreter: runs a graph node by node on real tensors. It is the specification every
//! compiled backend is tested against; like FX's `Interpreter`, each opcode is one method a
//! subclass-like implementation can override.

use crate::trace::TracedGraph;
use crate::{FxError, Graph, Node, NodeId, NodeKind, Result, RunError};
use indexmap::IndexMap;
use std::collections::HashMap;
use tessera_nn::{Call, Module, ModuleExt};
use tessera_tensor::{Op, Tensor};

/// One method per opcode; the defaults execute the node. A method says what went wrong as a
/// [`RunError`]; [`run`] wraps it in an [`FxError::Run`] naming the node.
pub trait Interpreter {
    /// The module whose parameters, buffers and leaf submodules the graph refers to.
    fn root(&self) -> &dyn Module;

    /// Tensors that are not state of the root (constants made during tracing).
    fn constants(&self) -> Option<&IndexMap<String, Tensor>> {
        None
    }

    fn placeholder(&mut self, _node: &Node, input: Tensor) -> Result<Tensor, RunError> {
        Ok(input)
    }

    /// Reads the root's current parameter or buffer at `target` (so training updates are
    /// seen), or a constant.
    fn get_attr(&mut self, _node: &Node, target: &str) -> Result<Tensor, RunError> {
        if let Ok(p) = self.root().get_parameter(target) {
            return Ok(p.tensor().clone());
        }
        if let Ok(b) = self.root().get_buffer(target) {
            return Ok(b);
        }
        self.constants()
            .and_then(|c| c.get(target).cloned())
            .ok_or_else(|| RunError::MissingAttribute {
                target: target.into(),
            })
    }

    /// Calls the leaf submodule at `target` through `call` (so its hooks run).
    fn call_module(
        &mut self,
        _node: &Node,
        target: &str,
        args: Vec<Tensor>,
    ) -> Result<Vec<Tensor>, RunError> {
        let module = self
            .root()
            .get_submodule(target)
            .map_err(|source| RunError::NoSubmodule {
                target: target.into(),
                source: Box::new(source),
            })?;
        let layer = module.as_layer().ok_or_else(|| RunError::NotALayer {
            target: target.into(),
            module_type: module.type_name().to_string(),
        })?;
        let [x] =
            <[Tensor; 1]>::try_from(args).map_err(|a| RunError::OperandCount { count: a.len() })?;
        let y = layer.call(x).map_err(|source| RunError::Module {
            source: Box::new(source),
        })?;
        Ok(vec![y])
    }

    fn call_function(
        &mut self,
        _node: &Node,
        op: &Op,
        args: Vec<Tensor>,
    ) -> Result<Vec<Tensor>, RunError> {
        let refs: Vec<&Tensor> = args.iter().collect();
        op.apply(&refs).map_err(|source| RunError::Op {
            source: Box::new(source),
        })
    }
}

/// Runs the root's graph with its own state: the plain interpreter.
pub struct GraphInterpreter<'a> {
    pub root: &'a dyn Module,
    pub constants: Option<&'a IndexMap<String, Tensor>>,
}

impl Interpreter for GraphInterpreter<'_> {
    fn root(&self) -> &dyn Module {
        self.root
    }

    fn constants(&self) -> Option<&IndexMap<String, Tensor>> {
        self.constants
    }
}

/// `%conv1 = call_module[conv1](%x)`: how errors name the node being executed.
fn describe(graph: &Graph, id: &NodeId, node: &Node) -> String {
    let operands = graph
        .operands(id)
        .map(|ops| {
            ops.iter()
                .map(|o| graph.display(o))
                .collect::<Vec<_>>()
                .join(", ")
        })
        .unwrap_or_default();
    let what = match &node.kind {
        NodeKind::Placeholder { target } => format!("placeholder[{target}]"),
        NodeKind::GetAttr { target } => format!("get_attr[{target}]"),
        NodeKind::CallModule { target, .. } => format!("call_module[{target}]"),
        NodeKind::CallFunction { op } => format!("call_function[{}]", op.name()),
        NodeKind::GetItem { index } => format!("getitem[{index}]"),
        NodeKind::Output => "output".into(),
    };
    format!("%{} = {what}({operands})", node.name)
}

impl TracedGraph {
    /// Runs the graph with the reference interpreter on `inputs`: `get_attr` reads `root`'s
    /// state, then the tensors made while tracing, and `call_module` calls `root`'s
    /// submodules. The graph's buffer mutations are written into `root`'s buffers (see
    /// [`crate::write_back`]); the results are returned.
    pub fn interpret(&self, root: &dyn Module, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        let mut interpreter = GraphInterpreter {
            root,
            constants: Some(&self.attributes),
        };
        let outputs = run(&mut interpreter, &self.graph, inputs)?;
        crate::write_back(&self.graph, root, outputs)
    }
}

/// Executes `graph` on `inputs` (one per placeholder, in order) and returns all its outputs:
/// the results, then the new values of the buffers it mutates, which this function does not
/// write back (see [`crate::write_back`]; `GraphModule` and [`TracedGraph::interpret`] do).
pub fn run(
    interpreter: &mut dyn Interpreter,
    graph: &Graph,
    inputs: &[Tensor],
) -> Result<Vec<Tensor>> {
    let placeholders = graph.placeholders();
    if placeholders.len() != inputs.len() {
        return Err(FxError::RunGraph {
            source: RunError::InputCount {
                expected: placeholders.len(),
                got: inputs.len(),
            },
        });
    }
    let mut values: HashMap<NodeId, Vec<Tensor>> = HashMap::new();
    // Values are dropped after their last use, as FX's interpreter does, so that memory (and
    // the buffer cache) behaves as in eager execution.
    let mut remaining_uses: HashMap<NodeId, usize> = HashMap::new();
    for id in graph.nodes() {
        for operand in graph.operands(&id)? {
            *remaining_uses.entry(operand).or_insert(0) += 1;
        }
    }
    let mut next_input = inputs.iter();
    for id in graph.nodes() {
        let node = graph.node(&id)?;
        let args = graph
            .operands(&id)?
            .iter()
            .map(|o| {
                values
                    .get(o)
                    .and_then(|v| v.first().cloned())
                    .ok_or_else(|| FxError::UnknownNode {
                        node: graph.display(o),
                    })
            })
            .collect::<Result<Vec<Tensor>>>();
        let at = |source: RunError| FxError::Run {
            node: describe(graph, &id, node),
            source,
        };
        let result = match &node.kind {
            NodeKind::Placeholder { .. } => {
                let input = next_input
                    .next()
                    .cloned()
                    .ok_or_else(|| FxError::UnknownNode {
                        node: graph.display(&id),
                    })?;
                vec![interpreter.placeholder(node, input).map_err(at)?]
            }
            NodeKind::GetAttr { target } => vec![interpreter.get_attr(node, target).map_err(at)?],
            NodeKind::CallModule { target, .. } => {
                interpreter.call_module(node, target, args?).map_err(at)?
            }
            NodeKind::CallFunction { op } => {
                interpreter.call_function(node, op, args?).map_err(at)?
            }
            NodeKind::GetItem { index } => {
                let operand = graph.operands(&id)?.into_iter().next().ok_or_else(|| {
                    FxError::UnknownNode {
                        node: graph.display(&id),
                    }
                })?;
                let all = values.get(&operand).ok_or_else(|| FxError::UnknownNode {
                    node: graph.display(&operand),
                })?;
                vec![
                    all.get(*index)
                        .cloned()
                        .ok_or_else(|| at(RunError::NoValue { index: *index }))?,
                ]
            }
            NodeKind::Output => return args,
        };
        for operand in graph.operands(&id)? {
            if let Some(count) = remaining_uses.get_mut(&operand) {
                *count -= 1;
                if *count == 0 {
                    values.remove(&operand);
                }
            }
        }
        values.insert(id, result);
    }
    Err(FxError::RunGraph {
        source: RunError::NoOutput,
    })
}
