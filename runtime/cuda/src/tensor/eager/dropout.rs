//! Dropout on CUDA tensors, drawn as on the CPU: the keep mask comes from the global
//! generator on the host (`DropoutOp::keep_mask`, the draws the CPU kernel makes, so one seed
//! gives the same mask and the same result on every device), is uploaded as a bool tensor,
//! and `where(keep, x * scale, 0)` runs as kernels of the shared lowering, cached like every
//! eager op's. The uploaded mask is the op's second output, which backward reads.

use super::cache::EagerKey;
use super::compile::compile_graph;
use crate::tensor::copies::upload;
use crate::tensor::device_state::DeviceState;
use crate::tensor::storage::CudaStorage;
use crate::{CudaDriver, CudaError, Result};
use std::sync::Arc;
use tessera_fx::Graph;
use tessera_tensor::backend::DeviceOperand;
use tessera_tensor::layout::Layout;
use tessera_tensor::op::{BinaryOp, DropoutOp, ScalarOp};
use tessera_tensor::storage::CpuStorage;
use tessera_tensor::{DType, Op, TensorMeta};

/// Runs `dropout` on `x` (its storage `storage`), returning the result and the keep mask.
pub(crate) fn run(
    driver: &Arc<dyn CudaDriver>,
    state: &DeviceState,
    dropout: &DropoutOp,
    x: &DeviceOperand<'_>,
    storage: &CudaStorage,
    outputs: &[TensorMeta],
) -> Result<Vec<CudaStorage>> {
    let shape = x.layout.shape.clone();
    let numel = shape.iter().product();
    let keep = upload(
        &state.allocator,
        &CpuStorage::Bool(dropout.keep_mask(numel)),
    )?;
    let keep_layout = Layout::contiguous(&shape);
    let operands = [
        DeviceOperand {
            memory: x.memory,
            layout: x.layout,
        },
        DeviceOperand {
            memory: &keep,
            layout: &keep_layout,
        },
    ];
    let key = EagerKey::new(&Op::Dropout(*dropout), &operands);
    let compiled = state.kernels.get_or_compile(key, || {
        compile_graph(
            driver,
            state,
            &masking_graph(dropout, &shape, x)?,
            &operands,
        )
    })?;
    let compiled = compiled.ok_or_else(|| CudaError::Unsupported {
        kernel: "dropout".into(),
        what: format!("the masking kernels of {:?} {:?}", x.memory.dtype(), shape),
    })?;
    let result = outputs.first().cloned().into_iter().collect::<Vec<_>>();
    let mut stored = compiled.run(state, &[storage, &keep], &result)?;
    stored.push(keep);
    Ok(stored)
}

/// `where(keep, x * scale, float(keep))`: where `keep` is false its float is exactly `+0`,
/// the CPU kernel's dropped value, so no constant operand is needed.
fn masking_graph(dropout: &DropoutOp, shape: &[usize], x: &DeviceOperand<'_>) -> Result<Graph> {
    let dtype = x.memory.dtype();
    let wrap = |source| CudaError::OpGraph {
        op: "dropout".into(),
        source,
    };
    let mut g = Graph::new();
    let xs = g.placeholder("x", TensorMeta::new(shape.to_vec(), dtype));
    let keep = g.placeholder("keep", TensorMeta::new(shape.to_vec(), DType::Bool));
    let scale = Op::Scalar(ScalarOp {
        op: BinaryOp::Mul,
        value: dropout.scale(),
        reversed: false,
    });
    let scaled = g.call_function(scale, &[&xs]).map_err(wrap)?;
    let zero = g
        .call_function(Op::ToDType(dtype), &[&keep])
        .map_err(wrap)?;
    let out = g
        .call_function(Op::Where, &[&keep, &scaled, &zero])
        .map_err(wrap)?;
    g.output(&[&out]).map_err(wrap)?;
    Ok(g)
}
