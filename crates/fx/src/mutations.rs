//! Buffer mutations: values a graph returns after its results as the new contents of buffers
//! of its module (a training batch norm's running statistics and batch counter), like the
//! `BUFFER_MUTATION` outputs of torch.export and AOTAutograd. The graph stays pure; whoever
//! runs it writes those outputs back after each call ([`write_back`]). They print after the
//! results in the `return` line, as `%value -> target`.

use crate::graph::check_path;
use crate::{FxError, Graph, NodeId, Result, RunError};
use tessera_nn::{Module, ModuleExt};
use tessera_tensor::{Tensor, TensorError};

impl Graph {
    /// The buffers the graph's trailing outputs are written into, in output order: the last
    /// `buffer_mutations().len()` operands of the output node are their new values.
    pub fn buffer_mutations(&self) -> &[String] {
        &self.mutations
    }

    /// Each mutated buffer with the node of its new value, in output order.
    pub fn mutation_values(&self) -> Result<Vec<(String, NodeId)>> {
        let operands = self.output_operands()?;
        let skip = operands.len().saturating_sub(self.mutations.len());
        Ok(self
            .mutations
            .iter()
            .cloned()
            .zip(operands.into_iter().skip(skip))
            .collect())
    }

    /// The operands of the output node that are the graph's results (the mutations aside).
    pub fn results(&self) -> Result<Vec<NodeId>> {
        let mut operands = self.output_operands()?;
        operands.truncate(operands.len().saturating_sub(self.mutations.len()));
        Ok(operands)
    }

    /// Makes the graph write `value` into the buffer `target` (`bn.running_mean`) after each
    /// call: `value` becomes the output node's last operand. A buffer already written gets the
    /// new value in place of the old one.
    pub fn mutate_buffer(&mut self, target: &str, value: &NodeId) -> Result<()> {
        check_path(target)?;
        let output = self.output_node().ok_or(FxError::RunGraph {
            source: RunError::NoOutput,
        })?;
        let count = self.operands(&output)?.len();
        if let Some(k) = self.mutations.iter().position(|m| m == target) {
            let position = count - self.mutations.len() + k;
            return self.set_operand(&output, position, value);
        }
        let (source, sink) = (self.index(value)?, self.index(&output)?);
        self.graph.add_edge(source, sink, count as u32);
        self.mutations.push(target.into());
        Ok(())
    }

    /// Stops writing buffers: returns each mutated buffer with the node of its new value, in
    /// output order, and leaves those values out of the output node (the results stay), for a
    /// caller that returns them its own way (a compiled training step writes them itself).
    pub fn take_buffer_mutations(&mut self) -> Result<Vec<(String, NodeId)>> {
        let taken = self.mutation_values()?;
        if let Some(output) = self.output_node() {
            let results = self.results()?;
            self.erase(&output)?;
            let refs: Vec<&NodeId> = results.iter().collect();
            self.output(&refs)?;
        }
        self.mutations.clear();
        Ok(taken)
    }

    fn output_operands(&self) -> Result<Vec<NodeId>> {
        match self.output_node() {
            Some(output) => self.operands(&output),
            None => Ok(Vec::new()),
        }
    }
}

/// Writes the buffer mutations among `outputs` (all the values `graph` returned, in output
/// order, as [`crate::interpreter::run`] or a compiled program gives them) into `root`'s
/// buffers, and returns the graph's results. Writes are copies without autograd; a buffer that
/// `root` does not have, or a value of another shape, is an error naming the buffer.
pub fn write_back(
    graph: &Graph,
    root: &dyn Module,
    mut outputs: Vec<Tensor>,
) -> Result<Vec<Tensor>> {
    let targets = graph.buffer_mutations();
    if outputs.len() < targets.len() {
        return Err(FxError::RunGraph {
            source: RunError::MutationCount {
                expected: targets.len(),
                got: outputs.len(),
            },
        });
    }
    let values = outputs.split_off(outputs.len() - targets.len());
    for (target, value) in targets.iter().zip(values) {
        let fail = |source: Box<dyn std::error::Error + Send + Sync>| FxError::RunGraph {
            source: RunError::WriteBack {
                target: target.clone(),
                source,
            },
        };
        let buffer = root.get_buffer(target).map_err(|e| fail(Box::new(e)))?;
        if buffer.meta() != value.meta() {
            return Err(fail(Box::new(TensorError::ShapeMismatch {
                op: "write_back".into(),
                lhs: buffer.shape(),
                rhs: value.shape(),
                detail: format!(
                    "the buffer is {} and the graph's value {}",
                    buffer.dtype(),
                    value.dtype()
                ),
            })));
        }
        tessera_tensor::trace::write_state(&buffer, &value).map_err(|e| fail(Box::new(e)))?;
    }
    Ok(outputs)
}
