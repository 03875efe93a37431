//! Eager `conv1d`/`conv2d` on CUDA tensors as one standalone implicit-GEMM convolution
//! ([`render_conv`]: groups, stride, padding, dilation, the bias added per output channel in
//! its store). The kernel reads packed NCHW operands, so an input, weight or bias that is a
//! strided view is packed first by the copy kernel; a conv1d is a conv2d of height 1. The
//! backward ops are in [`super::conv_backward`].

use super::builder::OpBuilder;
use super::compile::CompiledOp;
use super::product::shape_error;
use crate::driver::CudaDriver;
use crate::gemm::{ConvSpec, GemmOptions, GemmParamRole, render_conv};
use crate::tensor::device_state::DeviceState;
use crate::{CudaError, Result};
use std::sync::Arc;
use tessera_kernel::SlotId;
use tessera_tensor::backend::DeviceOperand;
use tessera_tensor::op::ConvParams;
use tessera_tensor::{DType, TensorMeta};

/// `shape` as the 4-D shape the kernel sees: `[N, C, L]` of a conv1d gains a height of 1.
pub(super) fn four_d(shape: &[usize]) -> Option<[usize; 4]> {
    match *shape {
        [n, c, l] => Some([n, c, 1, l]),
        [n, c, h, w] => Some([n, c, h, w]),
        _ => None,
    }
}

/// Operand `n`'s storage when it is packed from element 0, else a packed copy of it; `None`
/// when the copy is not generated.
pub(super) fn packed_operand(
    b: &mut OpBuilder<'_>,
    inputs: &[DeviceOperand<'_>],
    n: usize,
) -> Result<Option<SlotId>> {
    let layout = inputs[n].layout;
    if layout.offset == 0 && layout.is_contiguous() {
        return Ok(Some(b.operand(n)));
    }
    b.packed(inputs, n, layout)
}

/// The forward convolution of `inputs` (`x, w` or `x, w, bias`) under `params`.
pub(crate) fn conv_forward(
    driver: &Arc<dyn CudaDriver>,
    state: &DeviceState,
    inputs: &[DeviceOperand<'_>],
    outputs: &[TensorMeta],
    params: ConvParams,
    bias: bool,
) -> Result<Option<CompiledOp>> {
    let name = if params.spatial_dims == 1 {
        "conv1d"
    } else {
        "conv2d"
    };
    let expected = 2 + usize::from(bias);
    let ([out], true) = (outputs, inputs.len() == expected) else {
        return Err(shape_error(name, inputs, "wrong number of operands"));
    };
    let (Some(input_shape), Some(weight_shape)) = (
        four_d(&inputs[0].layout.shape),
        four_d(&inputs[1].layout.shape),
    ) else {
        return Err(shape_error(name, inputs, "expects 3-D or 4-D operands"));
    };
    let mut b = OpBuilder::new(driver, state, inputs.len());
    let mut slots = Vec::with_capacity(expected);
    for n in 0..expected {
        match packed_operand(&mut b, inputs, n)? {
            Some(slot) => slots.push(slot),
            None => return Ok(None),
        }
    }
    let dtype: DType = out.dtype;
    let result = b.computed(dtype, out.numel());
    if out.numel() > 0 {
        let spec = ConvSpec {
            name: format!("eager_{name}_{dtype}"),
            dtype,
            input_shape,
            weight_shape,
            // The height of a conv1d is the identity, which a conv2d takes as it is.
            params: ConvParams {
                spatial_dims: 2,
                ..params
            },
            bias,
            options: GemmOptions::default(),
        };
        let kernel = match render_conv(&spec, &state.target) {
            Ok(k) => k,
            Err(CudaError::Unsupported { .. }) => return Ok(None),
            Err(e) => return Err(e),
        };
        b.launch(kernel, |role| match role {
            GemmParamRole::B => Some(slots[0]),
            GemmParamRole::A => Some(slots[1]),
            GemmParamRole::C => Some(result),
            GemmParamRole::Bias => slots.get(2).copied(),
        })?;
    }
    Ok(Some(b.finish(vec![result])))
}
