//! Fake quantization, the op quantization-aware training runs: `x` rounded to the grid of an
//! affine quantization and back to float,
//! `(clamp(nearbyint(x * (1/scale)) + zp, qmin, qmax) - zp) * scale` in f32 (PyTorch's
//! `fake_quantize_per_tensor_affine` and
//! `fake_quantize_per_channel_affine`), with the straight-through estimator as backward: the
//! gradient passes where the rounded value lies in `[qmin, qmax]` and is 0 elsewhere. The
//! learnable variants (PyTorch's `_fake_quantize_learnable_per_tensor_affine` and
//! `_fake_quantize_learnable_per_channel_affine`, LSQ) also give gradients to a float scale
//! and zero point, exactly as PyTorch's CPU kernels compute them.

use super::quant::round_half_even;
use super::{BackwardCtx, Op, OpDef, OpKind, expect_inputs};
use crate::{DType, Result, Tensor, TensorError, TensorMeta};

/// One fake-quantize op. Inputs are `x` (f32), `scale` (f32) and `zero_point` (i64, or f32
/// for the learnable ops), one element for the per-tensor ops and one per index of `axis`
/// for the per-channel ones.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum FakeQuantOp {
    /// One scale and integer zero point; gradient to `x` only.
    PerTensor { quant_min: i64, quant_max: i64 },
    /// A scale and integer zero point per index of `axis`; gradient to `x` only.
    PerChannel {
        axis: usize,
        quant_min: i64,
        quant_max: i64,
    },
    /// A float scale and zero point that receive gradients, scaled by `grad_factor`.
    LearnablePerTensor {
        quant_min: i64,
        quant_max: i64,
        grad_factor: f64,
    },
    /// Per-channel learnable scale and zero point along `axis`.
    LearnablePerChannel {
        axis: usize,
        quant_min: i64,
        quant_max: i64,
        grad_factor: f64,
    },
}

variant_names!(FakeQuantOp {
    PerTensor => "fake_quantize_per_tensor_affine",
    PerChannel => "fake_quantize_per_channel_affine",
    LearnablePerTensor => "fake_quantize_learnable_per_tensor_affine",
    LearnablePerChannel => "fake_quantize_learnable_per_channel_affine",
});

/// The scale, its f32 reciprocal and the integer zero point of each channel.
struct Grid {
    scale: Vec<f32>,
    inv_scale: Vec<f32>,
    zero_point: Vec<i64>,
    /// Elements per step of the channel index (the product of the dims after `axis`).
    inner: usize,
}

impl Grid {
    fn channel(&self, i: usize) -> usize {
        (i / self.inner) % self.scale.len()
    }
}

impl FakeQuantOp {
    fn range(&self) -> (i64, i64) {
        match *self {
            FakeQuantOp::PerTensor {
                quant_min,
                quant_max,
            }
            | FakeQuantOp::PerChannel {
                quant_min,
                quant_max,
                ..
            }
            | FakeQuantOp::LearnablePerTensor {
                quant_min,
                quant_max,
                ..
            }
            | FakeQuantOp::LearnablePerChannel {
                quant_min,
                quant_max,
                ..
            } => (quant_min, quant_max),
        }
    }

    fn axis(&self) -> Option<usize> {
        match *self {
            FakeQuantOp::PerChannel { axis, .. }
            | FakeQuantOp::LearnablePerChannel { axis, .. } => Some(axis),
            _ => None,
        }
    }

    fn learnable(&self) -> Option<f64> {
        match *self {
            FakeQuantOp::LearnablePerTensor { grad_factor, .. }
            | FakeQuantOp::LearnablePerChannel { grad_factor, .. } => Some(grad_factor),
            _ => None,
        }
    }

    /// How many scales `x` takes: 1, or the size of dimension `axis`.
    fn channels(&self, x: &TensorMeta) -> Result<usize> {
        let Some(axis) = self.axis() else {
            return Ok(1);
        };
        x.shape.get(axis).copied().ok_or_else(|| {
            TensorError::invalid(
                self.op_name(),
                format!(
                    "axis {axis} is out of range for an input of shape {:?}",
                    x.shape
                ),
            )
        })
    }

    /// The integer zero points the kernels use. A learnable float zero point is rounded as
    /// PyTorch does: in the forward, `nearbyint` then clamped (per tensor) or `round` then
    /// clamped (per channel); in the per-tensor backward, `zp + 0.5` clamped and truncated.
    fn zero_points(&self, zero_point: &Tensor, backward: bool) -> Result<Vec<i64>> {
        let (qmin, qmax) = self.range();
        if self.learnable().is_none() {
            let zps = zero_point.to_vec::<i64>()?;
            if let Some(z) = zps.iter().find(|z| **z < qmin || **z > qmax) {
                return Err(TensorError::invalid(
                    self.op_name(),
                    format!("zero point {z} is outside [quant_min, quant_max] = [{qmin}, {qmax}]"),
                ));
            }
            return Ok(zps);
        }
        let (lo, hi) = (qmin as f32, qmax as f32);
        let per_tensor_backward = backward && self.axis().is_none();
        Ok(zero_point
            .to_vec::<f32>()?
            .into_iter()
            .map(|z| {
                if per_tensor_backward {
                    (z + 0.5).clamp(lo, hi) as i64
                } else {
                    z.round_ties_even().clamp(lo, hi) as i64
                }
            })
            .collect())
    }

    fn grid(
        &self,
        x: &Tensor,
        scale: &Tensor,
        zero_point: &Tensor,
        backward: bool,
    ) -> Result<Grid> {
        let scale = scale.to_vec::<f32>()?;
        let inner = match self.axis() {
            Some(axis) => x.shape().get(axis + 1..).map_or(1, |s| s.iter().product()),
            None => x.numel(),
        };
        Ok(Grid {
            inv_scale: scale.iter().map(|s| 1.0 / s).collect(),
            scale,
            zero_point: self.zero_points(zero_point, backward)?,
            inner: inner.max(1),
        })
    }

    /// The op's forward, element by element.
    fn forward(&self, x: &Tensor, scale: &Tensor, zero_point: &Tensor) -> Result<Tensor> {
        let grid = self.grid(x, scale, zero_point, false)?;
        let (qmin, qmax) = self.range();
        let out: Vec<f32> = x.with_slice(|v: &[f32]| {
            v.iter()
                .enumerate()
                .map(|(i, &x)| {
                    let c = grid.channel(i);
                    let zp = grid.zero_point[c];
                    // Saturating: an infinite or huge `x / scale` rounds to the end of i64, which
                    // the clamp then maps to the end of the range.
                    let q = round_half_even(x * grid.inv_scale[c])
                        .saturating_add(zp)
                        .clamp(qmin, qmax);
                    (q - zp) as f32 * grid.scale[c]
                })
                .collect()
        })?;
        Tensor::from_vec(out, &x.shape())
    }

    /// `dX` (the straight-through estimator), and for the learnable ops `dScale` and
    /// `dZeroPoint` summed over each channel, as PyTorch's `fake_quantize_learnable_*_grad`
    /// CPU kernels.
    /// The kernel of [`FakeQuantBackwardOp`]: `dX`, then for the learnable ops `dScale` and
    /// `dZeroPoint`.
    fn gradients(
        &self,
        dy: &Tensor,
        x: &Tensor,
        scale: &Tensor,
        zero_point: &Tensor,
    ) -> Result<Vec<Tensor>> {
        let dy = dy.to_dtype(DType::F32)?.to_vec::<f32>()?;
        let grid = self.grid(x, scale, zero_point, true)?;
        let (qmin, qmax) = self.range();
        let grad_factor = self.learnable().unwrap_or(1.0) as f32;
        let channels = grid.scale.len();
        let (mut dscale, mut dzero) = (vec![0f64; channels], vec![0f64; channels]);
        let dx: Vec<f32> = x.with_slice(|v: &[f32]| {
            v.iter()
                .zip(&dy)
                .enumerate()
                .map(|(i, (&x, &dy))| {
                    let c = grid.channel(i);
                    let (s, inv, zp) = (grid.scale[c], grid.inv_scale[c], grid.zero_point[c]);
                    // The learnable kernels round `zp + x / scale`; the others keep the mask of
                    // the forward, which rounds `x / scale` before adding `zp`.
                    let q = if self.learnable().is_some() {
                        round_half_even(zp as f32 + x * inv)
                    } else {
                        round_half_even(x * inv).saturating_add(zp)
                    };
                    let inside = (qmin..=qmax).contains(&q);
                    let (ds, dz) = if inside {
                        let fq = (q - zp) as f32 * s;
                        (dy * (fq - x) * inv * grad_factor, 0.0)
                    } else {
                        let end = if q < qmin { qmin } else { qmax };
                        (dy * (end - zp) as f32 * grad_factor, -dy * s * grad_factor)
                    };
                    dscale[c] += f64::from(ds);
                    dzero[c] += f64::from(dz);
                    if inside { dy } else { 0.0 }
                })
                .collect()
        })?;
        let dx = Tensor::from_vec(dx, &x.shape())?;
        if self.learnable().is_none() {
            return Ok(vec![dx]);
        }
        let summed = |sums: Vec<f64>, like: &Tensor| {
            Tensor::from_vec(sums.into_iter().map(|v| v as f32).collect(), &like.shape())
        };
        Ok(vec![dx, summed(dscale, scale)?, summed(dzero, zero_point)?])
    }
}

/// The gradients of a fake-quantize op (inputs `grad, x, scale, zero_point`): `dX` by the
/// straight-through estimator, and for the learnable ops `dScale` and `dZeroPoint` summed per
/// channel, as PyTorch's CPU kernels compute them.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct FakeQuantBackwardOp(pub(crate) FakeQuantOp);

impl OpDef for FakeQuantBackwardOp {
    fn name(&self) -> String {
        format!("{}_backward", self.0.op_name())
    }

    fn attributes(&self) -> Option<String> {
        self.0.attributes()
    }

    fn kind(&self) -> OpKind {
        OpKind::Quantized
    }

    fn meta(&self, inputs: &[TensorMeta]) -> Result<Vec<TensorMeta>> {
        let name = self.name();
        expect_inputs(&name, inputs, 4)?;
        let forward = self.0.meta(&inputs[1..])?;
        if inputs[0] != forward[0] {
            return Err(TensorError::shapes(
                name,
                &inputs[0].shape,
                &forward[0].shape,
                "grad must have the shape and dtype (f32) of the fake-quantized input",
            ));
        }
        let mut outputs = forward;
        if self.0.learnable().is_some() {
            outputs.push(inputs[2].clone());
            outputs.push(inputs[3].clone());
        }
        Ok(outputs)
    }

    fn cpu(&self, inputs: &[&Tensor]) -> Result<Vec<Tensor>> {
        self.0.gradients(inputs[0], inputs[1], inputs[2], inputs[3])
    }

    /// `dX` is linear in the grad with a mask that is constant almost everywhere in `x`,
    /// `scale` and `zero_point`, so its own gradient is itself; the learnable gradients have
    /// none defined here.
    fn backward(&self, cx: &BackwardCtx) -> Result<Vec<Option<Tensor>>> {
        if self.0.learnable().is_some() {
            return Err(TensorError::NoDoubleBackward {
                op: self.name(),
                input: 0,
            });
        }
        let upstream = cx.grad(0)?;
        let (x, scale, zero_point) = (&cx.inputs[1], &cx.inputs[2], &cx.inputs[3]);
        let grad =
            Op::FakeQuantBackward(self.0.clone()).apply1(&[&upstream, x, scale, zero_point])?;
        Ok(vec![cx.needs[0].then_some(grad), None, None, None])
    }

    fn computes_half_in_f32(&self) -> bool {
        false
    }
}

/// The fake-quantize backward op that prints as `name` with `attrs`.
pub(crate) fn decode_backward(
    name: &str,
    attrs: Option<&serde_json::Value>,
) -> Option<FakeQuantOp> {
    let base = name.strip_suffix("_backward")?;
    super::text::decode_variant::<FakeQuantOp>(base, attrs)
}

impl OpDef for FakeQuantOp {
    op_identity!(name: op_name, attributes: variant, kind: Quantized);

    fn meta(&self, inputs: &[TensorMeta]) -> Result<Vec<TensorMeta>> {
        let op = self.op_name();
        expect_inputs(op, inputs, 3)?;
        let (x, scale, zero_point) = (&inputs[0], &inputs[1], &inputs[2]);
        if x.dtype != DType::F32 {
            return Err(TensorError::dtype(op, x.dtype));
        }
        let (qmin, qmax) = self.range();
        if qmin > qmax {
            return Err(TensorError::invalid(
                op,
                format!("quant_min {qmin} must not exceed quant_max {qmax}"),
            ));
        }
        let channels = self.channels(x)?;
        let zp_dtype = if self.learnable().is_some() {
            DType::F32
        } else {
            DType::I64
        };
        for (what, meta, dtype) in [
            ("scale", scale, DType::F32),
            ("zero_point", zero_point, zp_dtype),
        ] {
            if meta.dtype != dtype || meta.shape.len() > 1 || meta.numel() != channels {
                return Err(TensorError::invalid(
                    op,
                    format!(
                        "{what} must be {dtype} of shape [{channels}] for an input of shape {:?}, got {} of shape {:?}",
                        x.shape, meta.dtype, meta.shape
                    ),
                ));
            }
        }
        Ok(vec![x.clone()])
    }

    fn cpu(&self, inputs: &[&Tensor]) -> Result<Vec<Tensor>> {
        Ok(vec![self.forward(inputs[0], inputs[1], inputs[2])?])
    }

    fn backward(&self, cx: &BackwardCtx) -> Result<Vec<Option<Tensor>>> {
        let (x, scale, zero_point) = (&cx.inputs[0], &cx.inputs[1], &cx.inputs[2]);
        let mut grads = Op::FakeQuantBackward(self.clone())
            .apply(&[&cx.grad(0)?, x, scale, zero_point])?
            .into_iter()
            .enumerate()
            .map(|(i, g)| cx.needs[i].then_some(g));
        let dx = grads.next().flatten();
        Ok(vec![dx, grads.next().flatten(), grads.next().flatten()])
    }
}

/// PyTorch's `fake_quantize_per_tensor_affine(x, scale, zero_point, quant_min, quant_max)`
/// with tensor parameters: `scale` f32 and `zero_point` i64, one element each.
pub fn fake_quantize_per_tensor_affine(
    x: &Tensor,
    scale: &Tensor,
    zero_point: &Tensor,
    quant_min: i64,
    quant_max: i64,
) -> Result<Tensor> {
    Op::FakeQuant(FakeQuantOp::PerTensor {
        quant_min,
        quant_max,
    })
    .apply1(&[x, scale, zero_point])
}

/// PyTorch's `fake_quantize_per_channel_affine(x, scale, zero_point, axis, quant_min,
/// quant_max)`: `scale` f32 and `zero_point` i64 of shape `[x.shape[axis]]`.
pub fn fake_quantize_per_channel_affine(
    x: &Tensor,
    scale: &Tensor,
    zero_point: &Tensor,
    axis: usize,
    quant_min: i64,
    quant_max: i64,
) -> Result<Tensor> {
    Op::FakeQuant(FakeQuantOp::PerChannel {
        axis,
        quant_min,
        quant_max,
    })
    .apply1(&[x, scale, zero_point])
}

/// PyTorch's `_fake_quantize_learnable_per_tensor_affine`: `scale` and `zero_point` are f32
/// of one element and receive gradients multiplied by `grad_factor`.
pub fn fake_quantize_learnable_per_tensor_affine(
    x: &Tensor,
    scale: &Tensor,
    zero_point: &Tensor,
    quant_min: i64,
    quant_max: i64,
    grad_factor: f64,
) -> Result<Tensor> {
    Op::FakeQuant(FakeQuantOp::LearnablePerTensor {
        quant_min,
        quant_max,
        grad_factor,
    })
    .apply1(&[x, scale, zero_point])
}

/// PyTorch's `_fake_quantize_learnable_per_channel_affine` along `axis`.
pub fn fake_quantize_learnable_per_channel_affine(
    x: &Tensor,
    scale: &Tensor,
    zero_point: &Tensor,
    axis: usize,
    quant_min: i64,
    quant_max: i64,
    grad_factor: f64,
) -> Result<Tensor> {
    Op::FakeQuant(FakeQuantOp::LearnablePerChannel {
        axis,
        quant_min,
        quant_max,
        grad_factor,
    })
    .apply1(&[x, scale, zero_point])
}
