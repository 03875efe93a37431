//! The batch of a compiled module's inputs, and its graph re-shaped for other inputs. The batch
//! is the leading size every input shares. A graph is traced for one batch, so reshapes and
//! expands hold its sizes: when the batch changes, a reshape or expand whose input's
//! leading size changed and whose target's leading size is a multiple of that input's traced
//! leading size (flatten, `view(x.size(0), -1)`, splitting attention heads) keeps the same
//! multiple of the new leading size. Other targets are left as traced, so a graph that mixes
//! the batch into another dimension fails shape propagation at a new batch, naming the node.

use super::CompileError;
use crate::fx::interpreter::{GraphInterpreter, Interpreter};
use crate::fx::shape_prop::propagate_shapes;
use crate::fx::{Graph, GraphModule, Node, NodeKind, RunError};
use crate::nn::Module;
use indexmap::IndexMap;
use std::collections::HashMap;
use tessera_tensor::op::ViewOp;
use tessera_tensor::{Op, Tensor, TensorMeta};

/// The leading size every input shares (`None` when there is no input, one is 0-d, or they
/// differ).
pub(super) fn batch_of(metas: &[TensorMeta]) -> Option<usize> {
    let mut leading = metas.iter().map(|m| m.shape.first().copied());
    let first = leading.next()??;
    leading.all(|l| l == Some(first)).then_some(first)
}

/// `metas` with the leading size of each replaced by `batch`.
pub(super) fn with_batch(metas: &[TensorMeta], batch: usize) -> Vec<TensorMeta> {
    metas
        .iter()
        .map(|m| {
            let mut shape = m.shape.clone();
            if let Some(first) = shape.first_mut() {
                *first = batch;
            }
            TensorMeta::new(shape, m.dtype)
        })
        .collect()
}

/// The input metas `graph` was traced (or last re-shaped) for.
pub(super) fn graph_input_metas(graph: &Graph) -> Vec<TensorMeta> {
    graph
        .placeholders()
        .iter()
        .filter_map(|p| graph.node(p).ok()?.meta.first().cloned())
        .collect()
}

/// `gm`'s graph re-shaped for inputs of `metas`: the graph itself when they are its own, with
/// batch-leading reshape and expand targets rescaled when the batch differs.
pub(super) fn reshaped_graph(
    gm: &GraphModule,
    metas: &[TensorMeta],
) -> Result<Graph, CompileError> {
    let mut graph = gm.graph.clone();
    let traced = graph_input_metas(&graph);
    if traced == metas {
        return Ok(graph);
    }
    let new_batch = batch_of(&traced)
        .zip(batch_of(metas))
        .is_some_and(|(from, to)| from != to);
    let mut rescale = RescaleBatch {
        inner: GraphInterpreter {
            root: gm.as_module(),
            constants: Some(&gm.constants),
        },
        traced_leading: if new_batch {
            traced_leading_sizes(&graph)
        } else {
            HashMap::new()
        },
        rewritten: Vec::new(),
    };
    propagate_shapes(&mut graph, &mut rescale, metas).map_err(|e| CompileError::Shapes {
        source: Box::new(e),
    })?;
    for (name, op) in rescale.rewritten {
        if let Some(id) = graph.find(&name) {
            graph.set_op(&id, op).map_err(|e| CompileError::Shapes {
                source: Box::new(e),
            })?;
        }
    }
    Ok(graph)
}

/// The traced leading size of the input of every reshape and expand node, by node name.
fn traced_leading_sizes(graph: &Graph) -> HashMap<String, usize> {
    graph
        .nodes()
        .filter_map(|id| {
            let node = graph.node(&id).ok()?;
            let NodeKind::CallFunction {
                op: Op::View(ViewOp::Reshape(_) | ViewOp::Expand(_)),
            } = &node.kind
            else {
                return None;
            };
            let input = graph.operands(&id).ok()?.into_iter().next()?;
            let leading = *graph.node(&input).ok()?.meta.first()?.shape.first()?;
            Some((node.name.clone(), leading))
        })
        .collect()
}

/// `target` with its leading size the same multiple of `leading` as it was of
/// `traced_leading`, when the input's leading size changed and it was such a multiple.
fn rescaled(target: &[usize], traced_leading: usize, leading: usize) -> Option<Vec<usize>> {
    let first = *target.first()?;
    if traced_leading == 0 || leading == traced_leading || first % traced_leading != 0 {
        return None;
    }
    let mut target = target.to_vec();
    target[0] = first / traced_leading * leading;
    Some(target)
}

/// The plain interpreter, running batch-leading reshapes and expands with rescaled targets
/// (on meta tensors, during shape propagation) and noting each rewritten op.
struct RescaleBatch<'a> {
    inner: GraphInterpreter<'a>,
    traced_leading: HashMap<String, usize>,
    rewritten: Vec<(String, Op)>,
}

impl Interpreter for RescaleBatch<'_> {
    fn root(&self) -> &dyn Module {
        self.inner.root()
    }

    fn constants(&self) -> Option<&IndexMap<String, Tensor>> {
        self.inner.constants()
    }

    fn call_function(
        &mut self,
        node: &Node,
        op: &Op,
        args: Vec<Tensor>,
    ) -> Result<Vec<Tensor>, RunError> {
        let leading = args.first().and_then(|a| a.shape().first().copied());
        let traced = self.traced_leading.get(&node.name).copied();
        let rewritten = match (op, traced.zip(leading)) {
            (Op::View(ViewOp::Reshape(t)), Some((from, to))) => {
                rescaled(t, from, to).map(|t| Op::View(ViewOp::Reshape(t)))
            }
            (Op::View(ViewOp::Expand(t)), Some((from, to))) => {
                rescaled(t, from, to).map(|t| Op::View(ViewOp::Expand(t)))
            }
            _ => None,
        };
        match rewritten {
            Some(op) => {
                let out = self.inner.call_function(node, &op, args);
                self.rewritten.push((node.name.clone(), op));
                out
            }
            None => self.inner.call_function(node, op, args),
        }
    }
}
