//! Eager `conv1d`/`conv2d` gradients on CUDA tensors (`conv*_backward_input`,
//! `conv*_backward_weight`) as one standalone implicit GEMM each ([`render_conv_backward`]),
//! so autograd through a convolution stays on the device (the bias gradient is a sum, which
//! the lowering already generates). The gathered operand (the output gradient for the input
//! gradient, the input for the weight gradient) is read packed, copied first when it is a
//! strided view. The other operand is read in place when it is one strided matrix per group
//! (a 1x1 or depthwise weight, a one-image output gradient), else gathered into that matrix by
//! the copy kernel through a permuted view: `[groups, group_in, group_out, kh, kw]` of the
//! weight, `[groups, group_out, n, oh, ow]` of the output gradient. A conv1d is a conv2d of
//! height 1.

use super::builder::OpBuilder;
use super::compile::CompiledOp;
use super::convolution::{four_d, packed_operand};
use super::product::shape_error;
use crate::driver::CudaDriver;
use crate::gemm::{
    ConvBackwardSpec, ConvGradient, GemmOptions, GemmParamRole, StridedOperand, grad_out_matrix,
    render_conv_backward, weight_transposed,
};
use crate::tensor::device_state::DeviceState;
use crate::{CudaError, Result};
use std::sync::Arc;
use tessera_kernel::SlotId;
use tessera_tensor::backend::DeviceOperand;
use tessera_tensor::layout::Layout;
use tessera_tensor::op::ConvParams;
use tessera_tensor::{DType, TensorMeta};

/// The strides of a 3-D (conv1d) or 4-D layout as 4-D: conv1d's missing height has one row.
fn four_d_strides(layout: &Layout) -> Option<[usize; 4]> {
    match *layout.strides {
        [a, b, c] => Some([a, b, 0, c]),
        [a, b, c, d] => Some([a, b, c, d]),
        _ => None,
    }
}

/// Operand `n` (4-D `shape` with 4-D `strides`) read as A: in place through `in_place` (for
/// a packed operand) when it is one strided matrix, else its dims 0 and 1 split by `groups`
/// and permuted by `order` (of `[dim0 / groups-or-groups, .., dim1, dim2, dim3]`, 5 dims)
/// and packed; `None` when the copy is not generated.
fn a_operand(
    b: &mut OpBuilder<'_>,
    inputs: &[DeviceOperand<'_>],
    n: usize,
    in_place: Option<StridedOperand>,
    permuted: (Vec<usize>, Vec<usize>),
) -> Result<Option<(SlotId, StridedOperand)>> {
    let layout = inputs[n].layout;
    if let (Some(at), true) = (in_place, layout.is_contiguous()) {
        let at = StridedOperand {
            offset: layout.offset,
            ..at
        };
        return Ok(Some((b.operand(n), at)));
    }
    let (shape, strides) = permuted;
    let view = Layout {
        shape,
        strides,
        offset: layout.offset,
    };
    // The packed view is `[groups, rows, k...]`: row-major per group.
    let rows = view.shape[1];
    let k: usize = view.shape[2..].iter().product();
    Ok(b.packed(inputs, n, &view)?
        .map(|slot| (slot, StridedOperand::row_major(rows, k))))
}

/// Renders and launches `spec`, reading A from `a`, B from `b_slot`, into a new slot of
/// `numel` elements; `None` when the kernel is not generated for the dtype.
fn launch(
    b: &mut OpBuilder<'_>,
    state: &DeviceState,
    spec: ConvBackwardSpec,
    (a, b_slot): (SlotId, SlotId),
    numel: usize,
) -> Result<Option<SlotId>> {
    let result = b.computed(spec.dtype, numel);
    if numel == 0 {
        return Ok(Some(result));
    }
    let kernel = match render_conv_backward(&spec, &state.target) {
        Ok(k) => k,
        Err(CudaError::Unsupported { .. }) => return Ok(None),
        Err(e) => return Err(e),
    };
    b.launch(kernel, |role| match role {
        GemmParamRole::A => Some(a),
        GemmParamRole::B => Some(b_slot),
        GemmParamRole::C => Some(result),
        GemmParamRole::Bias => None,
    })?;
    Ok(Some(result))
}

fn name(params: ConvParams, gradient: ConvGradient) -> String {
    let base = if params.spatial_dims == 1 {
        "conv1d"
    } else {
        "conv2d"
    };
    match gradient {
        ConvGradient::Input => format!("{base}_backward_input"),
        ConvGradient::Weight => format!("{base}_backward_weight"),
    }
}

/// `params` as the kernel takes them: a conv1d's height is the identity, which a conv2d takes
/// as it is.
fn as_conv2d(params: ConvParams) -> ConvParams {
    ConvParams {
        spatial_dims: 2,
        ..params
    }
}

/// The input gradient of the convolution under `params` from `inputs` = `grad_out, weight`,
/// for an input of spatial size `input_size`.
pub(crate) fn conv_backward_input(
    driver: &Arc<dyn CudaDriver>,
    state: &DeviceState,
    inputs: &[DeviceOperand<'_>],
    outputs: &[TensorMeta],
    params: ConvParams,
    input_size: [usize; 2],
) -> Result<Option<CompiledOp>> {
    let op = name(params, ConvGradient::Input);
    let ([out], [grad_out, weight]) = (outputs, inputs) else {
        return Err(shape_error(&op, inputs, "expects grad_output and weight"));
    };
    let (Some(go_shape), Some(w_shape), Some(ws)) = (
        four_d(&grad_out.layout.shape),
        four_d(&weight.layout.shape),
        four_d_strides(weight.layout),
    ) else {
        return Err(shape_error(&op, inputs, "expects 3-D or 4-D operands"));
    };
    let groups = params.groups.max(1);
    let [c_out, group_in, kh, kw] = w_shape;
    let group_out = c_out / groups;
    let input_shape = [go_shape[0], group_in * groups, input_size[0], input_size[1]];
    let mut b = OpBuilder::new(driver, state, inputs.len());
    // `[groups, group_in, group_out, kh, kw]` of the weight `[groups * group_out, group_in, ..]`.
    let permuted = (
        vec![groups, group_in, group_out, kh, kw],
        vec![ws[0] * group_out, ws[1], ws[0], ws[2], ws[3]],
    );
    let in_place = weight_transposed(w_shape, groups);
    let Some((a, a_at)) = a_operand(&mut b, inputs, 1, in_place, permuted)? else {
        return Ok(None);
    };
    let Some(gathered) = packed_operand(&mut b, inputs, 0)? else {
        return Ok(None);
    };
    let dtype: DType = out.dtype;
    let spec = ConvBackwardSpec {
        name: format!("eager_{op}_{dtype}"),
        dtype,
        gradient: ConvGradient::Input,
        input_shape,
        weight_shape: w_shape,
        params: as_conv2d(params),
        a: a_at,
        options: GemmOptions::default(),
    };
    let Some(result) = launch(&mut b, state, spec, (a, gathered), out.numel())? else {
        return Ok(None);
    };
    Ok(Some(b.finish(vec![result])))
}

/// The weight gradient of the convolution under `params` from `inputs` = `input, grad_out`,
/// for a kernel of spatial size `kernel_size`.
pub(crate) fn conv_backward_weight(
    driver: &Arc<dyn CudaDriver>,
    state: &DeviceState,
    inputs: &[DeviceOperand<'_>],
    outputs: &[TensorMeta],
    params: ConvParams,
    kernel_size: [usize; 2],
) -> Result<Option<CompiledOp>> {
    let op = name(params, ConvGradient::Weight);
    let ([out], [input, grad_out]) = (outputs, inputs) else {
        return Err(shape_error(&op, inputs, "expects input and grad_output"));
    };
    let (Some(x_shape), Some(go_shape), Some(gs)) = (
        four_d(&input.layout.shape),
        four_d(&grad_out.layout.shape),
        four_d_strides(grad_out.layout),
    ) else {
        return Err(shape_error(&op, inputs, "expects 3-D or 4-D operands"));
    };
    let groups = params.groups.max(1);
    let [n, c_out, oh, ow] = go_shape;
    let group_out = c_out / groups;
    let weight_shape = [c_out, x_shape[1] / groups, kernel_size[0], kernel_size[1]];
    let mut b = OpBuilder::new(driver, state, inputs.len());
    // `[groups, group_out, n, oh, ow]` of the output gradient `[n, groups * group_out, ..]`.
    let permuted = (
        vec![groups, group_out, n, oh, ow],
        vec![gs[1] * group_out, gs[1], gs[0], gs[2], gs[3]],
    );
    let in_place = grad_out_matrix(go_shape, groups);
    let Some((a, a_at)) = a_operand(&mut b, inputs, 1, in_place, permuted)? else {
        return Ok(None);
    };
    let Some(gathered) = packed_operand(&mut b, inputs, 0)? else {
        return Ok(None);
    };
    let dtype: DType = out.dtype;
    let spec = ConvBackwardSpec {
        name: format!("eager_{op}_{dtype}"),
        dtype,
        gradient: ConvGradient::Weight,
        input_shape: x_shape,
        weight_shape,
        params: as_conv2d(params),
        a: a_at,
        options: GemmOptions::default(),
    };
    let Some(result) = launch(&mut b, state, spec, (a, gathered), out.numel())? else {
        return Ok(None);
    };
    Ok(Some(b.finish(vec![result])))
}
