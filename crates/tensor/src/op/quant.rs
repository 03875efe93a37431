//! Quantized ops for int8 inference: affine quantize/dequantize per tensor and per channel
//! (PyTorch's `q = clamp(round_half_even(x / scale) + zero_point, qmin, qmax)`), the dynamic
//! int8 linear (weights int8, activations quantized per call), the static int8 linear and
//! conv2d (u8 in, u8 out, optional fused ReLU), and the static int8 add of residual
//! connections. The matrix products run on the int8 GEMM of [`gemm_i8`]. Quantized ops are inference-only: their backward is an error.

mod add;
mod affine;
mod conv;
mod direct_conv;
pub mod gemm_i8;
mod linear;
mod pool;
mod quantize_u8;
mod weights;

pub(crate) use affine::round_half_even;
pub use affine::{QParams, affine_qparams, dynamic_qparams, symmetric_qparams};
pub use gemm_i8::{Int8Kernel, PackedInt8, gemm_u8i8, gemm_u8i8_packed, gemm_u8i8_with};

use super::{BackwardCtx, ConvParams, OpDef, OpKind, PoolOp};
use crate::{DType, Result, Tensor, TensorError, TensorMeta};

/// One quantized op with its attributes. Quantization parameters of activations are
/// attributes; those of weights (per channel) are tensor inputs.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum QuantOp {
    /// Float `x` to `dtype` (u8, i8 or i32) with one scale and zero point.
    QuantizePerTensor {
        scale: f64,
        zero_point: i64,
        dtype: DType,
    },
    /// Float `x` to `dtype`; inputs `x, scales (f32 [C]), zero_points (i64 [C])`, one per
    /// index of dimension `axis`.
    QuantizePerChannel { axis: usize, dtype: DType },
    /// Integer `q` to f32: `(q - zero_point) * scale`.
    DequantizePerTensor { scale: f64, zero_point: i64 },
    /// Integer `q` to f32; inputs `q, scales, zero_points` along `axis`.
    DequantizePerChannel { axis: usize },
    /// `x @ dequant(w)^T (+ b)` with `x` quantized per call to u8 (range `[0, 255]`, or
    /// `[0, 127]` with `reduce_range`) as PyTorch's fbgemm dynamic linear; inputs
    /// `x (f32 [.., K]), w (i8 [N, K]), w_scale (f32 [N] or [1]), w_zero_point (i64, same)`
    /// and `bias (f32 [N])` when `bias`.
    LinearDynamic { bias: bool, reduce_range: bool },
    /// Static int8 linear: u8 `x` with `x_scale`/`x_zero_point` times int8 weights (inputs as
    /// `LinearDynamic`), requantized to u8 with `out_scale`/`out_zero_point`, ReLU fused.
    Linear {
        x_scale: f64,
        x_zero_point: i64,
        out_scale: f64,
        out_zero_point: i64,
        relu: bool,
        bias: bool,
    },
    /// Static int8 conv2d (groups 1) of u8 `x [N, C, H, W]` with int8 weights
    /// `[C_out, C, kH, kW]`, requantized to u8, ReLU fused; other inputs as `Linear`.
    Conv2d {
        params: ConvParams,
        x_scale: f64,
        x_zero_point: i64,
        out_scale: f64,
        out_zero_point: i64,
        relu: bool,
        bias: bool,
    },
    /// Static int8 add of two u8 tensors of one shape with their own parameters, requantized
    /// to u8 with `out_scale`/`out_zero_point`, ReLU fused (PyTorch's `quantized::add` and
    /// `quantized::add_relu`).
    Add {
        a_scale: f64,
        a_zero_point: i64,
        b_scale: f64,
        b_zero_point: i64,
        out_scale: f64,
        out_zero_point: i64,
        relu: bool,
    },
    /// A u8 average pool (`pool` is `AvgPool2d` without counted padding, or
    /// `AdaptiveAvgPool2d`) of values whose zero point is `zero_point`, rounding
    /// `mean - zero_point` as PyTorch's quantized kernels; the output keeps the input's scale
    /// and zero point.
    AvgPool { pool: PoolOp, zero_point: i64 },
}

/// The representable range of a quantized dtype.
pub fn qrange(op: &str, dtype: DType) -> Result<(i64, i64)> {
    match dtype {
        DType::U8 => Ok((0, 255)),
        DType::I8 => Ok((-128, 127)),
        DType::I32 => Ok((i32::MIN as i64, i32::MAX as i64)),
        other => Err(TensorError::invalid(
            op,
            format!("quantized dtype must be u8, i8 or i32, got {other}"),
        )),
    }
}

/// An error unless `scale` is positive and finite and `zero_point` lies in `dtype`'s range.
fn check_qparams(op: &str, scale: f64, zero_point: i64, dtype: DType) -> Result<()> {
    if !(scale.is_finite() && scale > 0.0) {
        return Err(TensorError::invalid(
            op,
            format!("scale must be positive and finite, got {scale}"),
        ));
    }
    let (lo, hi) = qrange(op, dtype)?;
    if zero_point < lo || zero_point > hi {
        return Err(TensorError::invalid(
            op,
            format!("zero_point {zero_point} is outside {dtype}'s range [{lo}, {hi}]"),
        ));
    }
    Ok(())
}

fn expect_count(op: &str, inputs: &[TensorMeta], n: usize) -> Result<()> {
    super::expect_inputs(op, inputs, n)
}

fn expect_dtype(op: &str, what: &str, meta: &TensorMeta, dtypes: &[DType]) -> Result<()> {
    if dtypes.contains(&meta.dtype) {
        return Ok(());
    }
    let names: Vec<String> = dtypes.iter().map(|d| d.to_string()).collect();
    Err(TensorError::invalid(
        op,
        format!(
            "{what} must be {}, got {} of shape {:?}",
            names.join(" or "),
            meta.dtype,
            meta.shape
        ),
    ))
}

/// Checks per-channel scales and zero points: 1-D of `channels` elements (or one element
/// when `allow_one`).
fn check_channel_params(
    op: &str,
    scales: &TensorMeta,
    zero_points: &TensorMeta,
    channels: usize,
    allow_one: bool,
) -> Result<()> {
    expect_dtype(op, "scales", scales, &[DType::F32])?;
    expect_dtype(op, "zero_points", zero_points, &[DType::I64])?;
    for (what, m) in [("scales", scales), ("zero_points", zero_points)] {
        let n = m.numel();
        let fits = m.shape.len() <= 1 && (n == channels || (allow_one && n == 1));
        if !fits {
            return Err(TensorError::invalid(
                op,
                format!(
                    "{what} of shape {:?} do not fit {channels} channels (expected [{channels}]{})",
                    m.shape,
                    if allow_one { " or [1]" } else { "" }
                ),
            ));
        }
    }
    Ok(())
}

/// Checks the weight inputs shared by the int8 linears and conv: `w` i8 with `out` rows
/// along dim 0, scales and zero points per tensor or per output channel, and the bias.
fn check_weight_inputs(op: &str, inputs: &[TensorMeta], bias: bool) -> Result<usize> {
    expect_count(op, inputs, if bias { 5 } else { 4 })?;
    let w = &inputs[1];
    expect_dtype(op, "weight", w, &[DType::I8])?;
    let out = w.shape.first().copied().unwrap_or(0);
    check_channel_params(op, &inputs[2], &inputs[3], out, true)?;
    if bias {
        let b = &inputs[4];
        expect_dtype(op, "bias", b, &[DType::F32])?;
        if b.shape != [out] {
            return Err(TensorError::shapes(
                op,
                &w.shape,
                &b.shape,
                format!("bias must be [{out}], one per output channel"),
            ));
        }
    }
    Ok(out)
}

/// The inputs of a static int8 op: weights as [`check_weight_inputs`], a u8 input, and the
/// input's and output's u8 quantization parameters.
fn check_static_inputs(
    op: &str,
    inputs: &[TensorMeta],
    bias: bool,
    (x_scale, x_zero_point): (f64, i64),
    (out_scale, out_zero_point): (f64, i64),
) -> Result<()> {
    check_weight_inputs(op, inputs, bias)?;
    expect_dtype(op, "input", &inputs[0], &[DType::U8])?;
    check_qparams(op, x_scale, x_zero_point, DType::U8)?;
    check_qparams(op, out_scale, out_zero_point, DType::U8)
}

impl QuantOp {
    /// The `(scale, zero_point)` of an add's `a`, `b` and output (zeros for other ops).
    fn add_params(&self) -> [(f64, i64); 3] {
        match self {
            QuantOp::Add {
                a_scale,
                a_zero_point,
                b_scale,
                b_zero_point,
                out_scale,
                out_zero_point,
                ..
            } => [
                (*a_scale, *a_zero_point),
                (*b_scale, *b_zero_point),
                (*out_scale, *out_zero_point),
            ],
            _ => [(0.0, 0); 3],
        }
    }

    fn op_name(&self) -> &'static str {
        match self {
            QuantOp::QuantizePerTensor { .. } => "quantize_per_tensor",
            QuantOp::QuantizePerChannel { .. } => "quantize_per_channel",
            QuantOp::DequantizePerTensor { .. } => "dequantize",
            QuantOp::DequantizePerChannel { .. } => "dequantize_per_channel",
            QuantOp::LinearDynamic { .. } => "linear_dynamic_int8",
            QuantOp::Linear { relu: false, .. } => "quantized_linear",
            QuantOp::Linear { relu: true, .. } => "quantized_linear_relu",
            QuantOp::Conv2d { relu: false, .. } => "quantized_conv2d",
            QuantOp::Conv2d { relu: true, .. } => "quantized_conv2d_relu",
            QuantOp::Add { relu: false, .. } => "quantized_add",
            QuantOp::Add { relu: true, .. } => "quantized_add_relu",
            QuantOp::AvgPool {
                pool: PoolOp::AdaptiveAvgPool2d { .. },
                ..
            } => "quantized_adaptive_avg_pool2d",
            QuantOp::AvgPool { .. } => "quantized_avg_pool2d",
        }
    }
}

impl OpDef for QuantOp {
    op_identity!(name: op_name, attributes: variant, kind: Quantized);

    fn meta(&self, inputs: &[TensorMeta]) -> Result<Vec<TensorMeta>> {
        let op = self.op_name();
        let out = match self {
            QuantOp::QuantizePerTensor {
                scale,
                zero_point,
                dtype,
            } => {
                expect_count(op, inputs, 1)?;
                super::expect_float(op, &inputs[0])?;
                check_qparams(op, *scale, *zero_point, *dtype)?;
                TensorMeta::new(inputs[0].shape.clone(), *dtype)
            }
            QuantOp::QuantizePerChannel { axis, dtype } => {
                expect_count(op, inputs, 3)?;
                super::expect_float(op, &inputs[0])?;
                qrange(op, *dtype)?;
                let channels = channel_count(op, &inputs[0], *axis)?;
                check_channel_params(op, &inputs[1], &inputs[2], channels, false)?;
                TensorMeta::new(inputs[0].shape.clone(), *dtype)
            }
            QuantOp::DequantizePerTensor { scale, zero_point } => {
                expect_count(op, inputs, 1)?;
                expect_dtype(op, "input", &inputs[0], &[DType::U8, DType::I8, DType::I32])?;
                check_qparams(op, *scale, *zero_point, inputs[0].dtype)?;
                TensorMeta::new(inputs[0].shape.clone(), DType::F32)
            }
            QuantOp::DequantizePerChannel { axis } => {
                expect_count(op, inputs, 3)?;
                expect_dtype(op, "input", &inputs[0], &[DType::U8, DType::I8, DType::I32])?;
                let channels = channel_count(op, &inputs[0], *axis)?;
                check_channel_params(op, &inputs[1], &inputs[2], channels, false)?;
                TensorMeta::new(inputs[0].shape.clone(), DType::F32)
            }
            QuantOp::LinearDynamic { bias, .. } => {
                check_weight_inputs(op, inputs, *bias)?;
                expect_dtype(op, "input", &inputs[0], &[DType::F32])?;
                TensorMeta::new(linear_output(op, &inputs[0], &inputs[1])?, DType::F32)
            }
            QuantOp::Linear {
                x_scale,
                x_zero_point,
                out_scale,
                out_zero_point,
                bias,
                ..
            } => {
                check_static_inputs(
                    op,
                    inputs,
                    *bias,
                    (*x_scale, *x_zero_point),
                    (*out_scale, *out_zero_point),
                )?;
                TensorMeta::new(linear_output(op, &inputs[0], &inputs[1])?, DType::U8)
            }
            QuantOp::Conv2d {
                params,
                x_scale,
                x_zero_point,
                out_scale,
                out_zero_point,
                bias,
                ..
            } => {
                check_static_inputs(
                    op,
                    inputs,
                    *bias,
                    (*x_scale, *x_zero_point),
                    (*out_scale, *out_zero_point),
                )?;
                let g = conv::geometry(op, params, &inputs[0].shape, &inputs[1].shape)?;
                if g.c_in == 0 {
                    // The int8 GEMM and its zero-point corrections take whole patches.
                    return Err(TensorError::shapes(
                        op,
                        &inputs[0].shape,
                        &inputs[1].shape,
                        "an int8 conv2d needs at least one input channel",
                    ));
                }
                TensorMeta::new(g.output_shape(), DType::U8)
            }
            QuantOp::Add { .. } => {
                let [
                    (a_scale, a_zero_point),
                    (b_scale, b_zero_point),
                    (out_scale, out_zero_point),
                ] = self.add_params();
                expect_count(op, inputs, 2)?;
                for (what, (x, scale, zero_point)) in [
                    ("a", (&inputs[0], a_scale, a_zero_point)),
                    ("b", (&inputs[1], b_scale, b_zero_point)),
                    ("output", (&inputs[0], out_scale, out_zero_point)),
                ] {
                    expect_dtype(op, what, x, &[DType::U8])?;
                    check_qparams(op, scale, zero_point, DType::U8)?;
                }
                if inputs[0].shape != inputs[1].shape {
                    return Err(TensorError::shapes(
                        op,
                        &inputs[0].shape,
                        &inputs[1].shape,
                        "quantized add takes two tensors of one shape",
                    ));
                }
                TensorMeta::new(inputs[0].shape.clone(), DType::U8)
            }
            QuantOp::AvgPool { pool, zero_point } => pool::meta(op, pool, *zero_point, inputs)?,
        };
        Ok(vec![out])
    }

    fn cpu(&self, inputs: &[&Tensor]) -> Result<Vec<Tensor>> {
        let out = match self {
            QuantOp::QuantizePerTensor {
                scale,
                zero_point,
                dtype,
            } => affine::quantize_per_tensor(inputs[0], *scale, *zero_point, *dtype)?,
            QuantOp::QuantizePerChannel { axis, dtype } => {
                affine::quantize_per_channel(inputs[0], inputs[1], inputs[2], *axis, *dtype)?
            }
            QuantOp::DequantizePerTensor { scale, zero_point } => {
                affine::dequantize_per_tensor(inputs[0], *scale, *zero_point)?
            }
            QuantOp::DequantizePerChannel { axis } => {
                affine::dequantize_per_channel(inputs[0], inputs[1], inputs[2], *axis)?
            }
            QuantOp::LinearDynamic { reduce_range, .. } => {
                linear::linear_dynamic(inputs, *reduce_range)?
            }
            QuantOp::Linear {
                x_scale,
                x_zero_point,
                out_scale,
                out_zero_point,
                relu,
                ..
            } => linear::linear_static(
                inputs,
                QParams::new(*x_scale as f32, *x_zero_point),
                QParams::new(*out_scale as f32, *out_zero_point),
                *relu,
            )?,
            QuantOp::Conv2d {
                params,
                x_scale,
                x_zero_point,
                out_scale,
                out_zero_point,
                relu,
                ..
            } => conv::conv2d_static(
                inputs,
                params,
                QParams::new(*x_scale as f32, *x_zero_point),
                QParams::new(*out_scale as f32, *out_zero_point),
                *relu,
            )?,
            QuantOp::Add { relu, .. } => {
                let [a, b, out] = self.add_params().map(|(s, z)| QParams::new(s as f32, z));
                add::add_static(self.op_name(), (inputs[0], a), (inputs[1], b), out, *relu)?
            }
            QuantOp::AvgPool { pool, zero_point } => {
                super::pool::average_u8(pool, inputs[0], *zero_point)?
            }
        };
        Ok(vec![out])
    }

    fn backward(&self, _cx: &BackwardCtx) -> Result<Vec<Option<Tensor>>> {
        Err(TensorError::invalid(
            self.op_name(),
            "quantized ops are inference-only and have no backward; quantize a trained model",
        ))
    }

    fn output_is_differentiable(&self, _index: usize) -> bool {
        false
    }
}

/// The size of dimension `axis` of `x`, or an error naming the op.
fn channel_count(op: &str, x: &TensorMeta, axis: usize) -> Result<usize> {
    x.shape.get(axis).copied().ok_or_else(|| {
        TensorError::invalid(
            op,
            format!(
                "axis {axis} is out of range for a tensor of shape {:?}",
                x.shape
            ),
        )
    })
}

/// `[.., N]` for `x [.., K]` and `w [N, K]`.
fn linear_output(op: &str, x: &TensorMeta, w: &TensorMeta) -> Result<Vec<usize>> {
    let k = x.shape.last().copied();
    if w.shape.len() != 2 || x.shape.is_empty() || k != Some(w.shape[1]) {
        return Err(TensorError::shapes(
            op,
            &x.shape,
            &w.shape,
            "expected input [.., in_features] and weight [out_features, in_features]",
        ));
    }
    if k == Some(0) {
        // The int8 GEMM and its zero-point corrections take whole rows of features.
        return Err(TensorError::shapes(
            op,
            &x.shape,
            &w.shape,
            "an int8 linear needs at least one input feature",
        ));
    }
    let mut out = x.shape.clone();
    if let Some(last) = out.last_mut() {
        *last = w.shape[0];
    }
    Ok(out)
}

/// `quantize_per_tensor(x, scale, zero_point, dtype)`.
pub fn quantize_per_tensor(x: &Tensor, q: QParams, dtype: DType) -> Result<Tensor> {
    Op::Quant(QuantOp::QuantizePerTensor {
        scale: f64::from(q.scale),
        zero_point: q.zero_point,
        dtype,
    })
    .apply1(&[x])
}

/// `quantize_per_channel(x, scales, zero_points, axis, dtype)`.
pub fn quantize_per_channel(
    x: &Tensor,
    scales: &Tensor,
    zero_points: &Tensor,
    axis: usize,
    dtype: DType,
) -> Result<Tensor> {
    Op::Quant(QuantOp::QuantizePerChannel { axis, dtype }).apply1(&[x, scales, zero_points])
}

/// `(q - zero_point) * scale` as f32.
pub fn dequantize(q: &Tensor, params: QParams) -> Result<Tensor> {
    Op::Quant(QuantOp::DequantizePerTensor {
        scale: f64::from(params.scale),
        zero_point: params.zero_point,
    })
    .apply1(&[q])
}

/// `(q - zero_points[c]) * scales[c]` as f32, `c` the index along `axis`.
pub fn dequantize_per_channel(
    q: &Tensor,
    scales: &Tensor,
    zero_points: &Tensor,
    axis: usize,
) -> Result<Tensor> {
    Op::Quant(QuantOp::DequantizePerChannel { axis }).apply1(&[q, scales, zero_points])
}

/// Int8 weights with their scales (f32) and zero points (i64), one per output channel or
/// one for the whole tensor.
#[derive(Debug, Clone)]
pub struct QuantizedWeight {
    pub weight: Tensor,
    pub scales: Tensor,
    pub zero_points: Tensor,
    pub per_channel: bool,
}

impl QuantizedWeight {
    /// Quantizes a float weight `[C_out, ..]` to i8 as PyTorch's default weight observers do:
    /// symmetric (zero point 0, `scale = max|w| / 127.5`), per output channel
    /// (`per_channel_symmetric` on axis 0) or per tensor (`per_tensor_symmetric`).
    pub fn symmetric(weight: &Tensor, per_channel: bool) -> Result<QuantizedWeight> {
        let op = "quantize_weight";
        if !weight.dtype().is_float() || weight.ndim() == 0 {
            return Err(TensorError::invalid(
                op,
                format!(
                    "expected a float weight with an output-channel dimension, got {} of shape {:?}",
                    weight.dtype(),
                    weight.shape()
                ),
            ));
        }
        let w = weight.detach().to_dtype(DType::F32)?;
        let values = w.to_vec::<f32>()?;
        let channels = if per_channel { w.shape()[0] } else { 1 };
        let per = values.len().checked_div(channels).unwrap_or(0);
        let range = qrange(op, DType::I8)?;
        let params: Vec<QParams> = (0..channels)
            .map(|c| {
                let (lo, hi) = affine::min_max(&values[c * per..(c + 1) * per]);
                let (lo, hi) = if lo <= hi { (lo, hi) } else { (0.0, 0.0) };
                symmetric_qparams(lo, hi, range)
            })
            .collect();
        let scales = Tensor::from_vec(params.iter().map(|p| p.scale).collect(), &[channels])?;
        let zero_points =
            Tensor::from_vec(params.iter().map(|p| p.zero_point).collect(), &[channels])?;
        let q = if per_channel {
            quantize_per_channel(&w, &scales, &zero_points, 0, DType::I8)?
        } else {
            quantize_per_tensor(&w, params[0], DType::I8)?
        };
        Ok(QuantizedWeight {
            weight: q,
            scales,
            zero_points,
            per_channel,
        })
    }

    /// Quantizes a float weight `[C_out, ..]` to i8 with given scales (f32) and zero points
    /// (i64), one per output channel or one for the whole tensor, as quantization-aware
    /// training's weight fake quantization rounded it.
    pub fn with_qparams(
        weight: &Tensor,
        scales: &Tensor,
        zero_points: &Tensor,
    ) -> Result<QuantizedWeight> {
        let w = weight.detach().to_dtype(DType::F32)?;
        let per_channel = scales.numel() != 1;
        let q = if per_channel {
            quantize_per_channel(&w, scales, zero_points, 0, DType::I8)?
        } else {
            let (scale, zero_point) = (scales.to_vec::<f32>()?, zero_points.to_vec::<i64>()?);
            quantize_per_tensor(&w, QParams::new(scale[0], zero_point[0]), DType::I8)?
        };
        // Copies, so that the quantized module keeps these parameters when the fake quantizer
        // that chose them observes again.
        let n = scales.numel();
        Ok(QuantizedWeight {
            weight: q,
            scales: Tensor::from_vec(scales.to_vec::<f32>()?, &[n])?,
            zero_points: Tensor::from_vec(zero_points.to_vec::<i64>()?, &[n])?,
            per_channel,
        })
    }

    /// The float weight the int8 one stands for.
    pub fn dequantize(&self) -> Result<Tensor> {
        dequantize_per_channel(
            &self.weight,
            &self.broadcast_scales()?,
            &self.broadcast_zero_points()?,
            0,
        )
    }

    fn broadcast_scales(&self) -> Result<Tensor> {
        let n = self.weight.shape().first().copied().unwrap_or(0);
        self.scales.expand(&[n])?.contiguous()
    }

    fn broadcast_zero_points(&self) -> Result<Tensor> {
        let n = self.weight.shape().first().copied().unwrap_or(0);
        self.zero_points.expand(&[n])?.contiguous()
    }
}

/// PyTorch's `quantized::linear_dynamic`: `x` (f32) quantized per call to u8, times the int8
/// weight, dequantized to f32, plus `bias`.
pub fn linear_dynamic_int8(
    x: &Tensor,
    weight: &QuantizedWeight,
    bias: Option<&Tensor>,
    reduce_range: bool,
) -> Result<Tensor> {
    let op = Op::Quant(QuantOp::LinearDynamic {
        bias: bias.is_some(),
        reduce_range,
    });
    let mut inputs = vec![x, &weight.weight, &weight.scales, &weight.zero_points];
    inputs.extend(bias);
    op.apply1(&inputs)
}

use super::Op;
