//! Shape propagation without data: the interpreter runs the graph on meta tensors (real
//! parameters, no values computed) and every node's shapes and dtypes are rewritten, so a
//! graph traced for one input size can be re-shaped for another and checked.

use crate::interpreter::{Interpreter, run};
use crate::{FxError, Graph, Node, NodeId, Result, RunError};
use std::collections::HashMap;
use tessera_nn::Module;
use tessera_tensor::{Op, Tensor, TensorMeta};

/// Wraps an interpreter and records each node's output metas.
struct Recording<'i> {
    inner: &'i mut dyn Interpreter,
    metas: HashMap<String, Vec<TensorMeta>>,
}

impl Recording<'_> {
    /// Notes the metas of `node`'s outputs and passes them on.
    fn record(&mut self, node: &Node, out: Vec<Tensor>) -> Vec<Tensor> {
        self.metas
            .insert(node.name.clone(), out.iter().map(Tensor::meta).collect());
        out
    }
}

impl Interpreter for Recording<'_> {
    fn root(&self) -> &dyn Module {
        self.inner.root()
    }

    fn constants(&self) -> Option<&indexmap::IndexMap<String, Tensor>> {
        self.inner.constants()
    }

    fn placeholder(&mut self, node: &Node, input: Tensor) -> Result<Tensor, RunError> {
        let out = self.inner.placeholder(node, input)?;
        self.metas.insert(node.name.clone(), vec![out.meta()]);
        Ok(out)
    }

    fn get_attr(&mut self, node: &Node, target: &str) -> Result<Tensor, RunError> {
        let out = self.inner.get_attr(node, target)?;
        self.metas.insert(node.name.clone(), vec![out.meta()]);
        Ok(out)
    }

    fn call_module(
        &mut self,
        node: &Node,
        target: &str,
        args: Vec<Tensor>,
    ) -> Result<Vec<Tensor>, RunError> {
        let out = self.inner.call_module(node, target, args)?;
        Ok(self.record(node, out))
    }

    fn call_function(
        &mut self,
        node: &Node,
        op: &Op,
        args: Vec<Tensor>,
    ) -> Result<Vec<Tensor>, RunError> {
        let out = self.inner.call_function(node, op, args)?;
        Ok(self.record(node, out))
    }
}

/// Re-derives every node's metas for inputs of `inputs` shapes and dtypes; errors name the
/// node whose shapes do not fit (as the interpreter's do).
pub fn propagate_shapes(
    graph: &mut Graph,
    interpreter: &mut dyn Interpreter,
    inputs: &[TensorMeta],
) -> Result<()> {
    let meta_inputs: Vec<Tensor> = inputs
        .iter()
        .map(|m| Tensor::new_meta(&m.shape, m.dtype))
        .collect();
    let mut recording = Recording {
        inner: interpreter,
        metas: HashMap::new(),
    };
    run(&mut recording, graph, &meta_inputs)?;
    let ids: Vec<NodeId> = graph.nodes().collect();
    for id in ids {
        let name = graph.name(&id)?.to_string();
        if let Some(metas) = recording.metas.remove(&name) {
            graph.set_meta(&id, metas)?;
        } else if let Some(operand) = graph.operands(&id)?.first().cloned() {
            // getitem: one value of its operand.
            let index = match &graph.node(&id)?.kind {
                crate::NodeKind::GetItem { index } => *index,
                _ => continue,
            };
            let meta = graph
                .node(&operand)?
                .meta
                .get(index)
                .cloned()
                .ok_or(FxError::UnknownNode { node: name })?;
            graph.set_meta(&id, vec![meta])?;
        }
    }
    Ok(())
}
