//! Normalisation (batch, layer, group, instance and RMS norm): one kernel normalises `x` viewed
//! as `[outer, channels, inner]` by per-group statistics and applies a per-channel affine; the
//! running-statistic updates of train-mode batch and instance norm are left to
//! `functional::batch_norm` and `functional::instance_norm`.

use super::{BackwardCtx, OpDef, OpKind, expect_float};
use crate::cpu::{float_dispatch, tensor_from};
use crate::{DType, Float, Result, Tensor, TensorError, TensorMeta};
use rayon::prelude::*;

/// A normalisation layer. Inputs are `x`, then (eval-mode batch norm only) `running_mean,
/// running_var`, then `weight` and `bias` where present. Outputs are `y` and the mean and
/// biased variance used (flat, one per statistic group; not differentiable). RMS norm does not
/// centre: its mean output is zero and its variance output is the mean square.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum NormOp {
    /// Per-channel (dim 1) statistics over the batch and spatial dims, or the running
    /// statistics (given as inputs) when not `training`.
    BatchNorm {
        training: bool,
        eps: f64,
        weight: bool,
        bias: bool,
    },
    /// Statistics over the trailing `normalized_ndim` dims; weight and bias have that shape.
    LayerNorm {
        normalized_ndim: usize,
        eps: f64,
        weight: bool,
        bias: bool,
    },
    /// Statistics per sample over each of `num_groups` channel groups; per-channel affine.
    GroupNorm {
        num_groups: usize,
        eps: f64,
        weight: bool,
        bias: bool,
    },
    /// Statistics per sample and channel of `[N, C, ...]` input over the spatial dims;
    /// per-channel affine (eval mode with running statistics is `BatchNorm` eval).
    InstanceNorm { eps: f64, weight: bool, bias: bool },
    /// `x / sqrt(mean(x^2) + eps) * weight` over the trailing `normalized_ndim` dims (no
    /// centring, no bias); weight has that shape.
    RmsNorm {
        normalized_ndim: usize,
        eps: f64,
        weight: bool,
    },
}

/// `x` seen as `[outer, channels, inner]`, with which statistic each `(outer, channel)` reads.
/// Layer norm is `[rows, normalized elements, 1]`: its affine is per normalised element.
#[derive(Debug, Clone, Copy)]
struct NormLayout {
    outer: usize,
    channels: usize,
    inner: usize,
    /// Channels per statistic group along dim 1; `None` for batch norm (one per channel).
    group_size: Option<usize>,
}

impl NormLayout {
    fn stat_count(&self) -> usize {
        match self.group_size {
            None => self.channels,
            // No channels make no groups (g is 0 then).
            Some(g) => self
                .outer
                .saturating_mul(self.channels.checked_div(g).unwrap_or(0)),
        }
    }

    #[inline]
    fn stat_of(&self, o: usize, c: usize) -> usize {
        match self.group_size {
            None => c,
            Some(g) => o * (self.channels / g) + c / g,
        }
    }

    /// Elements per statistic.
    fn stat_len(&self) -> usize {
        match self.group_size {
            None => self.outer.saturating_mul(self.inner),
            Some(g) => g.saturating_mul(self.inner),
        }
    }
}

impl NormOp {
    fn eps(&self) -> f64 {
        match *self {
            NormOp::BatchNorm { eps, .. }
            | NormOp::LayerNorm { eps, .. }
            | NormOp::GroupNorm { eps, .. }
            | NormOp::InstanceNorm { eps, .. }
            | NormOp::RmsNorm { eps, .. } => eps,
        }
    }

    /// Whether the statistics subtract the mean (all but RMS norm).
    fn centred(&self) -> bool {
        !matches!(self, NormOp::RmsNorm { .. })
    }

    fn affine(&self) -> (bool, bool) {
        match *self {
            NormOp::BatchNorm { weight, bias, .. }
            | NormOp::LayerNorm { weight, bias, .. }
            | NormOp::GroupNorm { weight, bias, .. }
            | NormOp::InstanceNorm { weight, bias, .. } => (weight, bias),
            NormOp::RmsNorm { weight, .. } => (weight, false),
        }
    }

    fn uses_running_stats(&self) -> bool {
        matches!(
            self,
            NormOp::BatchNorm {
                training: false,
                ..
            }
        )
    }

    /// Positions of the optional inputs: `(running stats, weight, bias)`.
    fn input_slots(&self) -> (Option<usize>, Option<usize>, Option<usize>) {
        let mut next = 1;
        let mut take = |present: bool, width: usize| {
            present.then(|| {
                let at = next;
                next += width;
                at
            })
        };
        let running = take(self.uses_running_stats(), 2);
        let (w, b) = self.affine();
        let w = take(w, 1);
        let b = take(b, 1);
        (running, w, b)
    }

    fn input_count(&self) -> usize {
        let (w, b) = self.affine();
        1 + 2 * self.uses_running_stats() as usize + w as usize + b as usize
    }

    /// The layout of `x`, and the shape weight, bias and running stats must have.
    fn layout(&self, shape: &[usize]) -> Result<(NormLayout, Vec<usize>)> {
        let name = self.name();
        match *self {
            NormOp::BatchNorm { .. } | NormOp::GroupNorm { .. } | NormOp::InstanceNorm { .. } => {
                if shape.len() < 2 {
                    return Err(TensorError::invalid(
                        name,
                        format!("expected an input of shape [N, C, ...], got {shape:?}"),
                    ));
                }
                let (outer, channels) = (shape[0], shape[1]);
                // Saturating: a meta's other dims may overflow together when one is 0; the
                // outputs' sizes are checked after.
                let inner = crate::size::saturating_numel(&shape[2..]);
                let group_size = match *self {
                    NormOp::GroupNorm { num_groups, .. } => {
                        if num_groups == 0 || channels % num_groups != 0 {
                            return Err(TensorError::invalid(
                                name,
                                format!(
                                    "{channels} channels (input {shape:?}) cannot be split into {num_groups} groups"
                                ),
                            ));
                        }
                        Some(channels / num_groups)
                    }
                    NormOp::InstanceNorm { .. } => Some(1),
                    _ => None,
                };
                let layout = NormLayout {
                    outer,
                    channels,
                    inner,
                    group_size,
                };
                Ok((layout, vec![channels]))
            }
            NormOp::LayerNorm {
                normalized_ndim, ..
            }
            | NormOp::RmsNorm {
                normalized_ndim, ..
            } => {
                if normalized_ndim == 0 || normalized_ndim > shape.len() {
                    return Err(TensorError::invalid(
                        name,
                        format!(
                            "cannot normalise the last {normalized_ndim} dims of an input of shape {shape:?}"
                        ),
                    ));
                }
                let split = shape.len() - normalized_ndim;
                let channels = crate::size::saturating_numel(&shape[split..]);
                let layout = NormLayout {
                    outer: crate::size::saturating_numel(&shape[..split]),
                    channels,
                    inner: 1,
                    group_size: Some(channels.max(1)),
                };
                Ok((layout, shape[split..].to_vec()))
            }
        }
    }

    fn kernel<T: Float>(&self, inputs: &[&Tensor]) -> Result<Vec<Tensor>> {
        let _guard = crate::no_grad();
        let x = inputs[0];
        let (layout, _) = self.layout(&x.shape())?;
        let (running, w, b) = self.input_slots();
        // Borrow the input when it is packed; the output comes from the buffer cache.
        let (out, mean, var) =
            x.with_slice(|data: &[T]| -> Result<(Vec<T>, Vec<f64>, Vec<f64>)> {
                let (mean, var) = match running {
                    Some(r) => (inputs[r].to_vec_f64()?, inputs[r + 1].to_vec_f64()?),
                    None => statistics(data, &layout, self.centred()),
                };
                let weight = w.map(|i| inputs[i].to_vec_f64()).transpose()?;
                let bias = b.map(|i| inputs[i].to_vec_f64()).transpose()?;
                let invstd: Vec<f64> = var.iter().map(|v| 1.0 / (v + self.eps()).sqrt()).collect();
                let mut out = crate::cpu::try_uninit_buffer::<T>("norm", data.len())?;
                let fill_row = |row: usize, dst: &mut [T]| {
                    let (o, c) = (row / layout.channels, row % layout.channels);
                    let s = layout.stat_of(o, c);
                    let (mut scale, mut shift) = (invstd[s], -mean[s] * invstd[s]);
                    if let Some(w) = &weight {
                        scale *= w[c];
                        shift *= w[c];
                    }
                    if let Some(b) = &bias {
                        shift += b[c];
                    }
                    let (scale, shift) = (T::from_f64(scale), T::from_f64(shift));
                    let src = &data[row * layout.inner..(row + 1) * layout.inner];
                    for (d, &v) in dst.iter_mut().zip(src) {
                        *d = v * scale + shift;
                    }
                };
                let inner = layout.inner.max(1);
                if data.len() < crate::cpu::PAR_CHUNK {
                    out.chunks_mut(inner)
                        .enumerate()
                        .for_each(|(r, d)| fill_row(r, d));
                } else {
                    out.par_chunks_mut(inner)
                        .enumerate()
                        .for_each(|(r, d)| fill_row(r, d));
                }
                Ok((out, mean, var))
            })??;
        let stats_dtype = stats_dtype(x.dtype());
        let to_stat = |v: Vec<f64>| -> Result<Tensor> {
            Tensor::from_vec(v, &[layout.stat_count()])?.to_dtype(stats_dtype)
        };
        Ok(vec![
            tensor_from(out, &x.shape()),
            to_stat(mean)?,
            to_stat(var)?,
        ])
    }
}

/// Statistics are kept in f32 for half inputs, as the kernels compute them.
fn stats_dtype(dtype: DType) -> DType {
    match dtype {
        DType::F16 | DType::BF16 => DType::F32,
        other => other,
    }
}

/// Per-group mean and biased variance, two-pass in f64: a batch-norm channel is one strided
/// slice per sample, a layer- or group-norm statistic one contiguous slab. Without `centred`
/// the mean is taken as zero, so the variance is the mean square (RMS norm).
fn statistics<T: Float>(data: &[T], layout: &NormLayout, centred: bool) -> (Vec<f64>, Vec<f64>) {
    let (channels, inner) = (layout.channels, layout.inner);
    let moments_of = |s: usize| match layout.group_size {
        None => moments(
            (0..layout.outer).map(|o| {
                let start = (o * channels + s) * inner;
                &data[start..start + inner]
            }),
            centred,
        ),
        Some(_) => {
            let len = layout.stat_len();
            moments(std::iter::once(&data[s * len..(s + 1) * len]), centred)
        }
    };
    let stats = 0..layout.stat_count();
    if data.len() < crate::cpu::PAR_CHUNK {
        stats.map(moments_of).unzip()
    } else {
        stats.into_par_iter().map(moments_of).unzip()
    }
}

/// Mean and biased variance of the elements of `slices` (NaN when there are none); without
/// `centred`, zero and the mean square.
fn moments<'a, T: Float>(
    slices: impl Iterator<Item = &'a [T]> + Clone,
    centred: bool,
) -> (f64, f64) {
    let (mut sum, mut n) = (0.0f64, 0usize);
    for s in slices.clone() {
        sum += s.iter().map(|v| v.as_f64()).sum::<f64>();
        n += s.len();
    }
    let mean = if centred { sum / n as f64 } else { 0.0 };
    let squares: f64 = slices
        .map(|s| s.iter().map(|v| (v.as_f64() - mean).powi(2)).sum::<f64>())
        .sum();
    (mean, squares / n as f64)
}

variant_names!(NormOp {
    BatchNorm => "batch_norm",
    LayerNorm => "layer_norm",
    GroupNorm => "group_norm",
    InstanceNorm => "instance_norm",
    RmsNorm => "rms_norm",
});

impl OpDef for NormOp {
    op_identity!(name: op_name, attributes: variant, kind: Normalization);

    fn meta(&self, inputs: &[TensorMeta]) -> Result<Vec<TensorMeta>> {
        let name = self.name();
        if inputs.len() != self.input_count() {
            return Err(TensorError::invalid(
                &name,
                format!(
                    "expected {} inputs for {self:?}, got {}",
                    self.input_count(),
                    inputs.len()
                ),
            ));
        }
        let x = &inputs[0];
        expect_float(&name, x)?;
        // The layout multiplies dims: an input whose size overflows is an error first.
        crate::size::checked_len(&name, &x.shape, x.dtype)?;
        let (layout, param_shape) = self.layout(&x.shape)?;
        let (running, w, b) = self.input_slots();
        let stat_shape = match running {
            Some(_) => param_shape.clone(),
            None => vec![layout.stat_count()],
        };
        let check = |i: Option<usize>, what: &str, shape: &[usize]| -> Result<()> {
            let Some(i) = i else { return Ok(()) };
            expect_float(&name, &inputs[i])?;
            if inputs[i].shape != shape {
                return Err(TensorError::shapes(
                    &name,
                    &x.shape,
                    &inputs[i].shape,
                    format!("{what} must have shape {shape:?}"),
                ));
            }
            Ok(())
        };
        check(running, "running_mean", &param_shape)?;
        check(running.map(|r| r + 1), "running_var", &param_shape)?;
        check(w, "weight", &param_shape)?;
        check(b, "bias", &param_shape)?;
        if matches!(self, NormOp::InstanceNorm { .. }) && layout.stat_len() <= 1 {
            return Err(TensorError::invalid(
                &name,
                format!(
                    "expected more than 1 spatial element when training, got input of shape {:?}",
                    x.shape
                ),
            ));
        }
        if matches!(self, NormOp::BatchNorm { training: true, .. }) && layout.stat_len() <= 1 {
            return Err(TensorError::invalid(
                &name,
                format!(
                    "expected more than 1 value per channel when training, got input of shape {:?}",
                    x.shape
                ),
            ));
        }
        let stats = TensorMeta::new(stat_shape, stats_dtype(x.dtype));
        Ok(vec![x.clone(), stats.clone(), stats])
    }

    fn cpu(&self, inputs: &[&Tensor]) -> Result<Vec<Tensor>> {
        float_dispatch!(inputs[0].dtype(), self.name(), T => self.kernel::<T>(inputs))
    }

    fn backward(&self, cx: &BackwardCtx) -> Result<Vec<Option<Tensor>>> {
        let x = &cx.inputs[0];
        let shape = x.shape();
        let (layout, param_shape) = self.layout(&shape)?;
        let (running, w, b) = self.input_slots();
        let g = cx.grad(0)?;
        let invstd = cx.outputs[2].add_scalar(self.eps())?.rsqrt()?;
        // Statistics broadcast against `x` in the grouped view `[outer, stats, rest]`.
        let (grouped, stat_dims): (Vec<usize>, Vec<usize>) = match layout.group_size {
            None => (
                vec![layout.outer, layout.channels, layout.inner],
                vec![0, 2],
            ),
            Some(_) => {
                let per_outer = layout.stat_count() / layout.outer.max(1);
                let rest = layout.stat_len();
                (vec![layout.outer, per_outer, rest], vec![2])
            }
        };
        let stat_shape: Vec<usize> = match layout.group_size {
            None => vec![1, layout.channels, 1],
            Some(_) => vec![grouped[0], grouped[1], 1],
        };
        let mean = cx.outputs[1].reshape(&stat_shape)?;
        let invstd = invstd.reshape(&stat_shape)?;
        let xg = x.reshape(&grouped)?;
        let gg = g.reshape(&grouped)?;
        let xhat = xg.sub(&mean)?.mul(&invstd)?;
        // The affine acts per channel of `[outer, channels, inner]`.
        let affine_shape = [layout.outer, layout.channels, layout.inner];
        let affine_dims = [0, 2];
        let param_view = [1, layout.channels, 1];
        let param_grad = |t: &Tensor, like: &Tensor| -> Result<Tensor> {
            t.reshape(&affine_shape)?
                .sum_dims(&affine_dims, false)?
                .reshape(&param_shape)?
                .to_dtype(like.dtype())
        };
        let mut grads = vec![None; cx.inputs.len()];
        if let Some(i) = w.filter(|&i| cx.needs[i]) {
            grads[i] = Some(param_grad(&gg.mul(&xhat)?, &cx.inputs[i])?);
        }
        if let Some(i) = b.filter(|&i| cx.needs[i]) {
            grads[i] = Some(param_grad(&gg, &cx.inputs[i])?);
        }
        if cx.needs[0] {
            let gw = match w {
                Some(i) => g
                    .reshape(&affine_shape)?
                    .mul(&cx.inputs[i].reshape(&param_view)?)?
                    .reshape(&grouped)?,
                None => gg,
            };
            let dx = if running.is_some() {
                gw.mul(&invstd)?
            } else {
                // d/dx of (x - mean) * invstd with batch statistics:
                // invstd * (g - mean(g) - xhat * mean(g * xhat)); without centring (RMS norm)
                // the mean(g) term is absent.
                let centred = if self.centred() {
                    gw.sub(&gw.mean_dims(&stat_dims, true)?)?
                } else {
                    gw.clone()
                };
                let along = xhat.mul(&gw.mul(&xhat)?.mean_dims(&stat_dims, true)?)?;
                centred.sub(&along)?.mul(&invstd)?
            };
            grads[0] = Some(dx.reshape(&shape)?.to_dtype(x.dtype())?);
        }
        Ok(grads)
    }

    fn output_is_differentiable(&self, index: usize) -> bool {
        index == 0
    }
}
