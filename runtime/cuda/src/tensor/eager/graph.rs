//! The graph an eager op is lowered from: one placeholder per operand (its shape and dtype;
//! its layout goes to the lowering separately), the op, and its outputs. `contiguous` is a
//! view, which the lowering turns into a layout and not a kernel, so its graph is the
//! identity conversion (`to_dtype` to its own dtype), which the lowering makes a copy kernel
//! of: a load through the operand's layout and a packed store.

use crate::{CudaError, Result};
use tessera_fx::Graph;
use tessera_tensor::backend::DeviceOperand;
use tessera_tensor::op::ViewOp;
use tessera_tensor::{Op, TensorMeta};

/// The one-op graph of `op` on `inputs`, returning its `outputs`.
pub(crate) fn op_graph(
    op: &Op,
    inputs: &[DeviceOperand<'_>],
    outputs: &[TensorMeta],
) -> Result<Graph> {
    let wrap = |source| CudaError::OpGraph {
        op: op.name(),
        source,
    };
    let op = match op {
        Op::View(ViewOp::Contiguous) => match inputs.first() {
            Some(x) => Op::ToDType(x.memory.dtype()),
            None => op.clone(),
        },
        other => other.clone(),
    };
    let mut g = Graph::new();
    let placeholders: Vec<_> = inputs
        .iter()
        .enumerate()
        .map(|(i, x)| {
            g.placeholder(
                &format!("x{i}"),
                TensorMeta::new(x.layout.shape.clone(), x.memory.dtype()),
            )
        })
        .collect();
    let refs: Vec<_> = placeholders.iter().collect();
    let node = g.call_function(op, &refs).map_err(wrap)?;
    let results = if outputs.len() == 1 {
        vec![node]
    } else {
        (0..outputs.len())
            .map(|i| g.getitem(&node, i))
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(wrap)?
    };
    let refs: Vec<_> = results.iter().collect();
    g.output(&refs).map_err(wrap)?;
    Ok(g)
}
