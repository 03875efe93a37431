//! Pooling over the last two dimensions of `[C, H, W]` or `[N, C, H, W]` tensors (max with
//! indices, average, adaptive average and max) and the backward ops that scatter gradients back; the
//! window arithmetic and kernels live in [`windows`]. The forward ops also take u8 (static
//! int8 activations, whose scale and zero point the output keeps); they have no backward.

mod channels_last;
mod windows;

use super::{BackwardCtx, Op, OpDef, OpKind, expect_float};
use crate::cpu::{float_dispatch, tensor_from};
use crate::{DType, Result, Tensor, TensorError, TensorMeta};
use windows::{Planes, Window};

/// Kernel, stride, padding and dilation of a 2-D pooling window, as `[height, width]` pairs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Pool2dParams {
    pub kernel: [usize; 2],
    pub stride: [usize; 2],
    pub padding: [usize; 2],
    pub dilation: [usize; 2],
    /// Rounds the output size up, so that a last partial window is kept.
    pub ceil_mode: bool,
}

/// A pooling op or one of their gradients.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum PoolOp {
    /// Largest value per window, and its i64 index into the input's `H * W` plane.
    MaxPool2d(Pool2dParams),
    /// Largest value per window without indices (what inference needs); its backward
    /// recomputes the argmax from the saved input.
    MaxPool2dValues(Pool2dParams),
    /// Scatters `grad_out` to the input positions named by `indices`; inputs `grad_out, indices`.
    /// `window` is the forward's windows when known (autograd gives those of `max_pool2d`;
    /// adaptive max pooling has none): the eager kernel scatters by index and ignores it, a
    /// generated kernel gathers each input element over the windows that cover it (an index
    /// outside its window, which the forward never saves, then adds nothing).
    MaxPool2dBackward {
        input_size: [usize; 2],
        #[serde(default, skip_serializing_if = "Option::is_none")]
        window: Option<Pool2dParams>,
    },
    /// Mean per window (dilation must be 1); with `count_include_pad` padding counts as zeros.
    AvgPool2d {
        params: Pool2dParams,
        count_include_pad: bool,
    },
    /// Spreads `grad_out` evenly over each window; input `grad_out`.
    AvgPool2dBackward {
        params: Pool2dParams,
        count_include_pad: bool,
        input_size: [usize; 2],
    },
    /// Mean over PyTorch's adaptive bins `floor(i*H/oh) .. ceil((i+1)*H/oh)`.
    AdaptiveAvgPool2d { output_size: [usize; 2] },
    /// Spreads `grad_out` evenly over each adaptive bin; input `grad_out`.
    AdaptiveAvgPool2dBackward { input_size: [usize; 2] },
    /// Largest value over PyTorch's adaptive bins (which overlap when the sizes do not
    /// divide), and its i64 index into the input's `H * W` plane; the first maximum wins.
    AdaptiveMaxPool2d { output_size: [usize; 2] },
}

/// The `[H, W]` of a 3-D or 4-D tensor, or an error naming the op and shape.
fn plane_size(op: &str, shape: &[usize]) -> Result<[usize; 2]> {
    if shape.len() != 3 && shape.len() != 4 {
        return Err(TensorError::invalid(
            op,
            format!("expected a 3-D [C, H, W] or 4-D [N, C, H, W] input, got shape {shape:?}"),
        ));
    }
    Ok([shape[shape.len() - 2], shape[shape.len() - 1]])
}

/// `shape` with its last two sizes replaced by `plane`.
fn with_plane(shape: &[usize], plane: [usize; 2]) -> Vec<usize> {
    let mut s = shape[..shape.len() - 2].to_vec();
    s.extend(plane);
    s
}

impl PoolOp {
    /// Max pooling with indices.
    pub fn max_pool2d(
        kernel: [usize; 2],
        stride: [usize; 2],
        padding: [usize; 2],
        dilation: [usize; 2],
        ceil_mode: bool,
    ) -> Self {
        PoolOp::MaxPool2d(Pool2dParams {
            kernel,
            stride,
            padding,
            dilation,
            ceil_mode,
        })
    }

    /// Max pooling without indices.
    pub fn max_pool2d_values(
        kernel: [usize; 2],
        stride: [usize; 2],
        padding: [usize; 2],
        dilation: [usize; 2],
        ceil_mode: bool,
    ) -> Self {
        let PoolOp::MaxPool2d(params) =
            Self::max_pool2d(kernel, stride, padding, dilation, ceil_mode)
        else {
            unreachable!("max_pool2d builds MaxPool2d")
        };
        PoolOp::MaxPool2dValues(params)
    }

    /// Average pooling.
    pub fn avg_pool2d(
        kernel: [usize; 2],
        stride: [usize; 2],
        padding: [usize; 2],
        ceil_mode: bool,
        count_include_pad: bool,
    ) -> Self {
        let params = Pool2dParams {
            kernel,
            stride,
            padding,
            dilation: [1, 1],
            ceil_mode,
        };
        PoolOp::AvgPool2d {
            params,
            count_include_pad,
        }
    }

    /// The output plane for an input plane of `size`, checking the params without building
    /// the windows (O(1) whatever the sizes, so meta functions cost nothing per element).
    fn output_plane(&self, op: &str, size: [usize; 2]) -> Result<[usize; 2]> {
        if size.contains(&0) {
            return Err(TensorError::invalid(
                op,
                format!("expected a non-empty input plane, got {size:?}"),
            ));
        }
        let axis = |a: usize| -> Result<usize> {
            match self {
                PoolOp::MaxPool2d(p) | PoolOp::MaxPool2dValues(p) => {
                    Window::strided_len(op, p, a, size, true)
                }
                PoolOp::AvgPool2d { params, .. } | PoolOp::AvgPool2dBackward { params, .. } => {
                    Window::strided_len(op, params, a, size, false)
                }
                PoolOp::AdaptiveAvgPool2d { output_size }
                | PoolOp::AdaptiveMaxPool2d { output_size } => Ok(output_size[a]),
                PoolOp::MaxPool2dBackward { .. } | PoolOp::AdaptiveAvgPool2dBackward { .. } => Err(
                    TensorError::invalid(op, "backward ops take their windows from the forward op"),
                ),
            }
        };
        Ok([axis(0)?, axis(1)?])
    }

    /// The windows along height and width for an input plane of `size`, checking the params.
    fn windows(&self, op: &str, size: [usize; 2]) -> Result<[Vec<Window>; 2]> {
        let axis = |a: usize| -> Result<Vec<Window>> {
            match self {
                PoolOp::MaxPool2d(p) | PoolOp::MaxPool2dValues(p) => {
                    Window::strided(op, p, a, size, true)
                }
                PoolOp::AvgPool2d { params, .. } | PoolOp::AvgPool2dBackward { params, .. } => {
                    Window::strided(op, params, a, size, false)
                }
                PoolOp::AdaptiveAvgPool2d { output_size }
                | PoolOp::AdaptiveMaxPool2d { output_size } => {
                    Window::adaptive(op, size[a], output_size[a])
                }
                PoolOp::MaxPool2dBackward { .. } | PoolOp::AdaptiveAvgPool2dBackward { .. } => Err(
                    TensorError::invalid(op, "backward ops take their windows from the forward op"),
                ),
            }
        };
        if size.contains(&0) {
            return Err(TensorError::invalid(
                op,
                format!("expected a non-empty input plane, got {size:?}"),
            ));
        }
        Ok([axis(0)?, axis(1)?])
    }

    /// Checks the inputs and returns the output shape.
    fn output_shape(&self, inputs: &[TensorMeta]) -> Result<Vec<usize>> {
        let op = self.name();
        let count = if matches!(self, PoolOp::MaxPool2dBackward { .. }) {
            2
        } else {
            1
        };
        if inputs.len() != count {
            return Err(TensorError::invalid(
                &op,
                format!("expected {count} inputs, got {}", inputs.len()),
            ));
        }
        self.expect_dtype(&op, &inputs[0])?;
        let shape = &inputs[0].shape;
        let size = plane_size(&op, shape)?;
        match self {
            PoolOp::MaxPool2d(_)
            | PoolOp::MaxPool2dValues(_)
            | PoolOp::AvgPool2d { .. }
            | PoolOp::AdaptiveAvgPool2d { .. }
            | PoolOp::AdaptiveMaxPool2d { .. } => {
                Ok(with_plane(shape, self.output_plane(&op, size)?))
            }
            PoolOp::MaxPool2dBackward { input_size, window } => {
                let indices = &inputs[1];
                if indices.dtype != DType::I64 || &indices.shape != shape {
                    return Err(TensorError::shapes(
                        &op,
                        shape,
                        &indices.shape,
                        format!(
                            "indices must be i64 (got {}) with grad_output's shape",
                            indices.dtype
                        ),
                    ));
                }
                if let Some(p) = window {
                    let forward = PoolOp::MaxPool2d(*p).output_plane(&op, *input_size)?;
                    expect_grad_plane(&op, shape, forward)?;
                }
                Ok(with_plane(shape, *input_size))
            }
            PoolOp::AvgPool2dBackward {
                params,
                count_include_pad,
                input_size,
            } => {
                let forward = PoolOp::AvgPool2d {
                    params: *params,
                    count_include_pad: *count_include_pad,
                };
                expect_grad_plane(&op, shape, forward.output_plane(&op, *input_size)?)?;
                Ok(with_plane(shape, *input_size))
            }
            PoolOp::AdaptiveAvgPool2dBackward { input_size } => {
                if input_size.contains(&0) {
                    return Err(TensorError::invalid(
                        &op,
                        format!("expected a non-empty input plane, got {input_size:?}"),
                    ));
                }
                Ok(with_plane(shape, *input_size))
            }
        }
    }
}

impl PoolOp {
    /// Floats for every op; u8 for the forward ops, except an average whose padding would
    /// count in the divisor (a padded zero is the zero point, which u8 tensors do not carry).
    fn expect_dtype(&self, op: &str, input: &TensorMeta) -> Result<()> {
        if input.dtype != DType::U8 {
            return expect_float(op, input);
        }
        match self {
            PoolOp::MaxPool2d(_)
            | PoolOp::MaxPool2dValues(_)
            | PoolOp::AdaptiveAvgPool2d { .. } => Ok(()),
            PoolOp::AvgPool2d {
                params,
                count_include_pad,
            } if !count_include_pad || params.padding == [0, 0] => Ok(()),
            PoolOp::AvgPool2d { .. } => Err(TensorError::invalid(
                op,
                "u8 input with padding needs count_include_pad=false: padded zeros would be \
                 the zero point, which a u8 tensor does not carry",
            )),
            _ => Err(TensorError::dtype(op, input.dtype)),
        }
    }

    /// The forward ops on u8: the max exactly, the mean rounded half to even.
    fn cpu_u8(
        &self,
        op: &str,
        planes: &Planes,
        x: &Tensor,
        out_shape: &[usize],
    ) -> Result<Vec<Tensor>> {
        let [rows, cols] = self.windows(op, plane_size(op, &x.shape())?)?;
        // Channels-last views (quantized convolutions' outputs) pool in place.
        let in_place = match self {
            PoolOp::MaxPool2dValues(_) => channels_last::max_values_u8(x, &rows, &cols)?,
            PoolOp::AvgPool2d { .. } | PoolOp::AdaptiveAvgPool2d { .. } => {
                channels_last::avg_values_u8(x, &rows, &cols, 0)?
            }
            _ => None,
        };
        if let Some(y) = in_place {
            return Ok(vec![y]);
        }
        let x = x.to_vec::<u8>()?;
        Ok(match self {
            PoolOp::MaxPool2d(_) => {
                let (values, indices) = windows::max_forward(planes, &rows, &cols, &x)?;
                vec![
                    tensor_from(values, out_shape),
                    tensor_from(indices, out_shape),
                ]
            }
            PoolOp::MaxPool2dValues(_) => {
                vec![tensor_from(
                    windows::max_values(planes, &rows, &cols, &x)?,
                    out_shape,
                )]
            }
            // Without a zero point the mean of the stored values is rounded (PyTorch's
            // contiguous NCHW kernel); `quantized_avg_pool` passes the input's.
            PoolOp::AvgPool2d { .. } | PoolOp::AdaptiveAvgPool2d { .. } => {
                vec![tensor_from(
                    windows::avg_forward_u8(planes, &rows, &cols, &x, 0),
                    out_shape,
                )]
            }
            _ => return Err(TensorError::dtype(op, DType::U8)),
        })
    }
}

/// The u8 average (`AvgPool2d` or `AdaptiveAvgPool2d`) of `x` whose zero point is
/// `zero_point`, rounding `mean - zero_point` as PyTorch's quantized kernels do; other pools
/// are an error.
pub(crate) fn average_u8(pool: &PoolOp, x: &Tensor, zero_point: i64) -> Result<Tensor> {
    let op = pool.name();
    if !matches!(
        pool,
        PoolOp::AvgPool2d { .. } | PoolOp::AdaptiveAvgPool2d { .. }
    ) {
        return Err(TensorError::invalid(
            &op,
            "only average pools take a zero point",
        ));
    }
    let out_shape = pool.output_shape(&[x.meta()])?;
    let shape = x.shape();
    let count: usize = shape[..shape.len() - 2].iter().product();
    if count == 0 {
        return Tensor::zeros(&out_shape, DType::U8);
    }
    let in_size = plane_size(&op, &shape)?;
    let planes = Planes::new(count, in_size, plane_size(&op, &out_shape)?);
    let [rows, cols] = pool.windows(&op, in_size)?;
    if let Some(y) = channels_last::avg_values_u8(x, &rows, &cols, zero_point)? {
        return Ok(y);
    }
    let values = x.to_vec::<u8>()?;
    let y = windows::avg_forward_u8(&planes, &rows, &cols, &values, zero_point);
    Ok(tensor_from(y, &out_shape))
}

/// Requires `grad_out` to have the pooled plane size.
fn expect_grad_plane(op: &str, grad_out: &[usize], plane: [usize; 2]) -> Result<()> {
    if grad_out[grad_out.len() - 2..] != plane {
        return Err(TensorError::shapes(
            op,
            grad_out,
            &plane,
            "grad_output's last two sizes must be the pooled output size",
        ));
    }
    Ok(())
}

variant_names!(PoolOp {
    MaxPool2d => "max_pool2d_with_indices",
    MaxPool2dValues => "max_pool2d",
    MaxPool2dBackward => "max_pool2d_backward",
    AvgPool2d => "avg_pool2d",
    AvgPool2dBackward => "avg_pool2d_backward",
    AdaptiveAvgPool2d => "adaptive_avg_pool2d",
    AdaptiveAvgPool2dBackward => "adaptive_avg_pool2d_backward",
    AdaptiveMaxPool2d => "adaptive_max_pool2d",
});

impl OpDef for PoolOp {
    op_identity!(name: op_name, attributes: variant, kind: Pooling);

    fn meta(&self, inputs: &[TensorMeta]) -> Result<Vec<TensorMeta>> {
        let shape = self.output_shape(inputs)?;
        let dtype = inputs[0].dtype;
        let mut metas = vec![TensorMeta::new(shape.clone(), dtype)];
        if matches!(
            self,
            PoolOp::MaxPool2d(_) | PoolOp::AdaptiveMaxPool2d { .. }
        ) {
            metas.push(TensorMeta::new(shape, DType::I64));
        }
        Ok(metas)
    }

    fn cpu(&self, inputs: &[&Tensor]) -> Result<Vec<Tensor>> {
        let op = self.name();
        let metas: Vec<TensorMeta> = inputs.iter().map(|t| t.meta()).collect();
        let out_shape = self.output_shape(&metas)?;
        let shape = inputs[0].shape();
        let count: usize = shape[..shape.len() - 2].iter().product();
        if count == 0 {
            // No planes: the outputs are empty, whatever their plane sizes (which need not fit
            // in memory, so no window is built).
            return self
                .meta(&metas)?
                .iter()
                .map(|m| Tensor::zeros(&m.shape, m.dtype))
                .collect();
        }
        let in_size = plane_size(&op, &shape)?;
        let out_size = plane_size(&op, &out_shape)?;
        // Every kernel reads planes of `in_size` and writes planes of `out_size`; backward ops
        // take the forward's windows over their (larger) output plane.
        let planes = Planes::new(count, in_size, out_size);
        let forward_windows = |forward: PoolOp| forward.windows(&op, out_size);
        if inputs[0].dtype() == DType::U8 {
            return self.cpu_u8(&op, &planes, inputs[0], &out_shape);
        }
        float_dispatch!(inputs[0].dtype(), &op, T => {
            let x = inputs[0].to_vec::<T>()?;
            Ok(match self {
                PoolOp::MaxPool2d(_) | PoolOp::AdaptiveMaxPool2d { .. } => {
                    let [rows, cols] = self.windows(&op, in_size)?;
                    let (values, indices) = windows::max_forward(&planes, &rows, &cols, &x)?;
                    vec![tensor_from(values, &out_shape), tensor_from(indices, &out_shape)]
                }
                PoolOp::MaxPool2dValues(_) => {
                    let [rows, cols] = self.windows(&op, in_size)?;
                    vec![tensor_from(windows::max_values(&planes, &rows, &cols, &x)?, &out_shape)]
                }
                PoolOp::MaxPool2dBackward { .. } => {
                    let indices = inputs[1].to_vec::<i64>()?;
                    let dx = windows::max_backward(&op, &planes, &x, &indices)?;
                    vec![tensor_from(dx, &out_shape)]
                }
                PoolOp::AvgPool2d { count_include_pad, .. } => {
                    let [rows, cols] = self.windows(&op, in_size)?;
                    let y = windows::avg_forward(&planes, &rows, &cols, *count_include_pad, &x);
                    vec![tensor_from(y, &out_shape)]
                }
                PoolOp::AdaptiveAvgPool2d { .. } => {
                    let [rows, cols] = self.windows(&op, in_size)?;
                    let y = windows::avg_forward(&planes, &rows, &cols, false, &x);
                    vec![tensor_from(y, &out_shape)]
                }
                PoolOp::AvgPool2dBackward { params, count_include_pad, .. } => {
                    let forward = PoolOp::AvgPool2d {
                        params: *params,
                        count_include_pad: *count_include_pad,
                    };
                    let [rows, cols] = forward_windows(forward)?;
                    let dx = windows::avg_backward(&planes, &rows, &cols, *count_include_pad, &x);
                    vec![tensor_from(dx, &out_shape)]
                }
                PoolOp::AdaptiveAvgPool2dBackward { .. } => {
                    let forward = PoolOp::AdaptiveAvgPool2d { output_size: in_size };
                    let [rows, cols] = forward_windows(forward)?;
                    let dx = windows::avg_backward(&planes, &rows, &cols, false, &x);
                    vec![tensor_from(dx, &out_shape)]
                }
            })
        })
    }

    fn backward(&self, cx: &BackwardCtx) -> Result<Vec<Option<Tensor>>> {
        if !cx.needs[0] {
            return Ok(vec![None; cx.inputs.len()]);
        }
        let x = &cx.inputs[0];
        if !x.dtype().is_float() {
            return Err(TensorError::invalid(
                self.name(),
                format!("no gradient flows through {} pooling", x.dtype()),
            ));
        }
        let grad = cx.grad(0)?;
        let size = plane_size(&self.name(), &x.shape())?;
        let pool = |op: PoolOp| Op::Pool(op).apply1(&[&grad]);
        let dx = match self {
            PoolOp::MaxPool2d(params) => Op::Pool(PoolOp::MaxPool2dBackward {
                input_size: size,
                window: Some(*params),
            })
            .apply1(&[&grad, &cx.outputs[1]])?,
            PoolOp::AdaptiveMaxPool2d { .. } => Op::Pool(PoolOp::MaxPool2dBackward {
                input_size: size,
                window: None,
            })
            .apply1(&[&grad, &cx.outputs[1]])?,
            PoolOp::MaxPool2dValues(params) => {
                let indices = Op::Pool(PoolOp::MaxPool2d(*params)).apply(&[x])?.remove(1);
                Op::Pool(PoolOp::MaxPool2dBackward {
                    input_size: size,
                    window: Some(*params),
                })
                .apply1(&[&grad, &indices])?
            }
            PoolOp::AvgPool2d {
                params,
                count_include_pad,
            } => pool(PoolOp::AvgPool2dBackward {
                params: *params,
                count_include_pad: *count_include_pad,
                input_size: size,
            })?,
            PoolOp::AdaptiveAvgPool2d { .. } => {
                pool(PoolOp::AdaptiveAvgPool2dBackward { input_size: size })?
            }
            // The backward ops are linear maps whose adjoints are the forward ops.
            PoolOp::AvgPool2dBackward {
                params,
                count_include_pad,
                ..
            } => pool(PoolOp::AvgPool2d {
                params: *params,
                count_include_pad: *count_include_pad,
            })?,
            PoolOp::AdaptiveAvgPool2dBackward { .. } => {
                pool(PoolOp::AdaptiveAvgPool2d { output_size: size })?
            }
            PoolOp::MaxPool2dBackward { .. } => {
                return Err(TensorError::invalid(
                    self.name(),
                    "double backward through max_pool2d is not supported",
                ));
            }
        };
        let mut grads = vec![Some(dx)];
        grads.resize(cx.inputs.len(), None);
        Ok(grads)
    }

    fn output_is_differentiable(&self, index: usize) -> bool {
        index == 0
    }
}
