//! Where device implementations of the steps the PTX renderer does not generate from a lowered
//! program plug in. A one-op graph of `matmul`, `linear`, a convolution or one of its two
//! gradients lowers to an external call (a GEMM without an epilogue runs its eager kernel:
//! there is nothing to fuse), so those ops are compiled here instead, as the standalone
//! generated GEMM and implicit-GEMM convolution kernels ([`super::product`],
//! [`super::convolution`], [`super::conv_backward`]). Any other program with an external step
//! (an op the lowering leaves to its eager CPU kernel) is unsupported on the device.

use super::compile::CompiledOp;
use super::{conv_backward, convolution, product};
use crate::Result;
use crate::driver::CudaDriver;
use crate::tensor::device_state::DeviceState;
use std::sync::Arc;
use tessera_kernel::{Kernel, Step};
use tessera_tensor::backend::DeviceOperand;
use tessera_tensor::op::ConvOp;
use tessera_tensor::{Op, TensorMeta};

/// The device kernels of `op` when it is a product or convolution compiled here, or `None`
/// for the ops the lowering handles.
pub(crate) fn compile_call(
    driver: &Arc<dyn CudaDriver>,
    state: &DeviceState,
    op: &Op,
    inputs: &[DeviceOperand<'_>],
    outputs: &[TensorMeta],
) -> Option<Result<Option<CompiledOp>>> {
    Some(match op {
        Op::Matmul => product::matmul(driver, state, inputs, outputs),
        Op::Linear { bias } => product::linear(driver, state, inputs, outputs, *bias),
        Op::Conv(ConvOp::Forward { params, bias }) => {
            convolution::conv_forward(driver, state, inputs, outputs, *params, *bias)
        }
        Op::Conv(ConvOp::BackwardInput { params, input_size }) => {
            conv_backward::conv_backward_input(driver, state, inputs, outputs, *params, *input_size)
        }
        Op::Conv(ConvOp::BackwardWeight {
            params,
            kernel_size,
        }) => conv_backward::conv_backward_weight(
            driver,
            state,
            inputs,
            outputs,
            *params,
            *kernel_size,
        ),
        _ => return None,
    })
}

/// Why `step` cannot run as rendered kernels alone (its external part), or `None` when it
/// can.
pub(crate) fn external_part(step: &Step) -> Option<String> {
    match step {
        Step::Kernel { kernel, .. } => external_call(kernel),
        Step::External { node, call, .. } => {
            Some(format!("%{node} runs an eager kernel ({call:?})"))
        }
    }
}

fn external_call(kernel: &Kernel) -> Option<String> {
    if kernel.gemm.is_some() {
        return Some(format!("{} starts with an external GEMM call", kernel.name));
    }
    if kernel.conv.is_some() {
        return Some(format!(
            "{} starts with an external convolution call",
            kernel.name
        ));
    }
    None
}
