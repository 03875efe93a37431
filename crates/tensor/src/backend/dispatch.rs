//! Sending work on device tensors to their backend: ops (from [`Op::apply`]) and moves
//! between devices (`to_device`). Views are done here for every device, since they only
//! change the layout.

use super::{DeviceOperand, backend_for};
use crate::autograd::{is_grad_enabled, record};
use crate::layout::Layout;
use crate::op::{OpDef, ViewOp, view_strides};
use crate::tensor_storage::{DeviceBuffer, Storage, unsupported};
use crate::{Device, Op, Result, Tensor, TensorError, TensorMeta};

/// Runs `op` on `inputs`, which live on `device` (neither the CPU nor meta), and records the
/// autograd node as the CPU path does.
pub(crate) fn apply_on_device(op: &Op, device: Device, inputs: &[&Tensor]) -> Result<Vec<Tensor>> {
    let metas: Vec<TensorMeta> = inputs.iter().map(|t| t.meta()).collect();
    let expected = op.meta(&metas)?;
    let outputs = match op {
        Op::View(view) => vec![view_on_device(view, inputs[0], device)?],
        _ => run_kernel(op, device, inputs, &expected)?,
    };
    if is_grad_enabled() && inputs.iter().any(|t| t.requires_grad()) {
        record(op, inputs, &outputs);
    }
    Ok(outputs)
}

/// A view of a device tensor: the layout-only views share its memory; `contiguous`, and a
/// `reshape` the strides cannot express, copy on the device through the backend.
fn view_on_device(view: &ViewOp, x: &Tensor, device: Device) -> Result<Tensor> {
    let contiguous = |x: &Tensor| -> Result<Tensor> {
        let op = Op::View(ViewOp::Contiguous);
        let mut outs = run_kernel(&op, device, &[x], &[x.meta()])?;
        Ok(outs.swap_remove(0))
    };
    match view {
        ViewOp::Contiguous => contiguous(x),
        ViewOp::Reshape(shape) if view_strides(&x.layout(), shape).is_none() => {
            Ok(contiguous(x)?.view_with_layout(Layout::contiguous(shape)))
        }
        // The view kernels of these touch only the layout, so they serve every device.
        _ => Ok(view.cpu(&[x])?.swap_remove(0)),
    }
}

/// Calls the backend's kernel for `op` and wraps the memory it returns in tensors.
fn run_kernel(
    op: &Op,
    device: Device,
    inputs: &[&Tensor],
    expected: &[TensorMeta],
) -> Result<Vec<Tensor>> {
    let name = op.name();
    let data: Vec<_> = inputs.iter().map(|t| t.data()).collect();
    let guards: Vec<_> = data
        .iter()
        .map(|d| d.storage.buffer.read().unwrap_or_else(|e| e.into_inner()))
        .collect();
    let mut operands = Vec::with_capacity(inputs.len());
    for (guard, d) in guards.iter().zip(&data) {
        let Storage::Device(buffer) = &**guard else {
            return Err(TensorError::DeviceMismatch {
                op: name,
                lhs: device,
                rhs: d.device,
            });
        };
        operands.push((buffer, &d.layout));
    }
    let Some((first, _)) = operands.first() else {
        return Err(TensorError::invalid(
            &name,
            "an op on a device needs an input there",
        ));
    };
    let backend = first.backend.clone();
    let operands: Vec<DeviceOperand> = operands
        .iter()
        .map(|(buffer, layout)| DeviceOperand {
            memory: buffer.memory.as_ref(),
            layout,
        })
        .collect();
    let memories = backend
        .apply(op, &operands, expected)
        .unwrap_or_else(|| Err(unsupported(&name, device, backend.as_ref())))?;
    drop(operands);
    drop(guards);
    if memories.len() != expected.len() {
        return Err(TensorError::invalid(
            &name,
            format!(
                "the {} backend returned {} outputs where the op has {}",
                backend.name(),
                memories.len(),
                expected.len()
            ),
        ));
    }
    memories
        .into_iter()
        .zip(expected)
        .map(|(memory, meta)| {
            let buffer = DeviceBuffer::new(
                &name,
                memory,
                backend.clone(),
                device,
                meta.dtype,
                meta.numel(),
            )?;
            Ok(Tensor::from_device(buffer, &meta.shape))
        })
        .collect()
}

/// `x` on `device`: the same handle when it is there already, a copy through the backends
/// otherwise (device to device goes through the host), a meta tensor for `Meta`.
pub(crate) fn to_device(x: &Tensor, device: Device) -> Result<Tensor> {
    let from = x.device();
    if from == device {
        return Ok(x.clone());
    }
    let shape = x.shape();
    match device {
        Device::Meta => Ok(Tensor::new_meta(&shape, x.dtype())),
        Device::Cpu => {
            let host = x.with_storage(|s, layout| s.to_host("to_device", layout))?;
            Ok(Tensor::from_cpu(host, &shape))
        }
        _ => {
            let backend = backend_for(device)?;
            let host = x.with_storage(|s, layout| s.to_host("to_device", layout))?;
            let memory = backend.copy_from_cpu(&host, device)?;
            let buffer = DeviceBuffer::new(
                "to_device",
                memory,
                backend,
                device,
                host.dtype(),
                host.len(),
            )?;
            Ok(Tensor::from_device(buffer, &shape))
        }
    }
}
