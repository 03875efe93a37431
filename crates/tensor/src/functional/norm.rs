//! Normalisation functions (batch_norm, layer_norm, group_norm, instance_norm, rms_norm),
//! including the running-statistic updates of batch and instance norm.

use crate::op::{BatchNormUpdateOp, NormOp, Op};
use crate::trace::write_state;
use crate::{Result, Tensor, TensorError, no_grad};

/// Batch normalisation over dim 1 of `[N, C]`, `[N, C, L]` or `[N, C, H, W]` input.
///
/// In training the batch mean and biased variance normalise, and the running statistics (when
/// given) are updated with `running = (1 - momentum) * running + momentum * batch`, using the
/// unbiased batch variance (see [`batch_norm_tracked`]). Outside training the running
/// statistics normalise and are required.
#[allow(clippy::too_many_arguments)]
pub fn batch_norm(
    input: &Tensor,
    running_mean: Option<&Tensor>,
    running_var: Option<&Tensor>,
    weight: Option<&Tensor>,
    bias: Option<&Tensor>,
    training: bool,
    momentum: f64,
    eps: f64,
) -> Result<Tensor> {
    let running = RunningStats {
        mean: running_mean,
        var: running_var,
        num_batches_tracked: None,
    };
    batch_norm_tracked(input, running, weight, bias, training, Some(momentum), eps)
}

/// The running statistics of a batch norm, as `_BatchNorm` keeps them: the mean and variance
/// (both or neither) and the i64 scalar counting the training batches seen.
#[derive(Debug, Clone, Copy, Default)]
pub struct RunningStats<'a> {
    pub mean: Option<&'a Tensor>,
    pub var: Option<&'a Tensor>,
    pub num_batches_tracked: Option<&'a Tensor>,
}

/// [`batch_norm`] with PyTorch's batch counter, as `BatchNorm1d`/`BatchNorm2d` run it. In
/// training with running statistics, the statistics update is the
/// [`BatchNormUpdateOp`](crate::op::BatchNormUpdateOp) (`num_batches_tracked` goes up by one,
/// and a `momentum` of `None` blends with weight `1 / num_batches_tracked`, a cumulative
/// average); its outputs are written into the running statistics with
/// [`write_state`](crate::trace::write_state): in place eagerly, as buffer mutations of the
/// graph while tracing.
pub fn batch_norm_tracked(
    input: &Tensor,
    running: RunningStats,
    weight: Option<&Tensor>,
    bias: Option<&Tensor>,
    training: bool,
    momentum: Option<f64>,
    eps: f64,
) -> Result<Tensor> {
    let stats = running_pair("batch_norm", running.mean, running.var)?;
    if !training && stats.is_none() {
        return Err(TensorError::invalid(
            "batch_norm",
            "running_mean and running_var must be given outside training",
        ));
    }
    let op = Op::Norm(NormOp::BatchNorm {
        training,
        eps,
        weight: weight.is_some(),
        bias: bias.is_some(),
    });
    let mut inputs = vec![input];
    if let (false, Some((m, v))) = (training, stats) {
        inputs.extend([m, v]);
    }
    inputs.extend(weight);
    inputs.extend(bias);
    let mut outputs = op.apply(&inputs)?;
    if let (true, Some((running_mean, running_var))) = (training, stats) {
        let shape = input.shape();
        let update = BatchNormUpdateOp {
            momentum,
            count: shape[0] * shape[2..].iter().product::<usize>(),
            counted: running.num_batches_tracked.is_some(),
        };
        let mut update_inputs = vec![&outputs[1], &outputs[2], running_mean, running_var];
        update_inputs.extend(running.num_batches_tracked);
        let updated = {
            let _guard = no_grad();
            Op::BatchNormUpdate(update).apply(&update_inputs)?
        };
        let targets = [
            Some(running_mean),
            Some(running_var),
            running.num_batches_tracked,
        ];
        for (target, value) in targets.into_iter().flatten().zip(&updated) {
            write_state(target, value)?;
        }
    }
    Ok(outputs.swap_remove(0))
}

/// Both running statistics or neither.
fn running_pair<'a>(
    op: &str,
    mean: Option<&'a Tensor>,
    var: Option<&'a Tensor>,
) -> Result<Option<(&'a Tensor, &'a Tensor)>> {
    match (mean, var) {
        (Some(m), Some(v)) => Ok(Some((m, v))),
        (None, None) => Ok(None),
        _ => Err(TensorError::invalid(
            op,
            "running_mean and running_var must be given together",
        )),
    }
}

/// Instance normalisation of `[N, C, ...]` input (PyTorch's `F.instance_norm`).
///
/// With `use_input_stats` each sample and channel is normalised by its own mean and biased
/// variance over the spatial dims, and the running statistics (when given) are updated with
/// the batch mean of the per-instance statistics (`running = (1 - momentum) * running +
/// momentum * mean_n(stat)`, the variance unbiased) by the
/// [`BatchNormUpdateOp`](crate::op::BatchNormUpdateOp), written with
/// [`write_state`](crate::trace::write_state): in place eagerly, as buffer mutations of the
/// graph while tracing. Otherwise the running statistics normalise and are required.
#[allow(clippy::too_many_arguments)]
pub fn instance_norm(
    input: &Tensor,
    running_mean: Option<&Tensor>,
    running_var: Option<&Tensor>,
    weight: Option<&Tensor>,
    bias: Option<&Tensor>,
    use_input_stats: bool,
    momentum: f64,
    eps: f64,
) -> Result<Tensor> {
    let running = running_pair("instance_norm", running_mean, running_var)?;
    let mut inputs = vec![input];
    let op = if use_input_stats {
        Op::Norm(NormOp::InstanceNorm {
            eps,
            weight: weight.is_some(),
            bias: bias.is_some(),
        })
    } else {
        let Some((m, v)) = running else {
            return Err(TensorError::invalid(
                "instance_norm",
                "running_mean and running_var must be given when not using input statistics",
            ));
        };
        inputs.extend([m, v]);
        Op::Norm(NormOp::BatchNorm {
            training: false,
            eps,
            weight: weight.is_some(),
            bias: bias.is_some(),
        })
    };
    inputs.extend(weight);
    inputs.extend(bias);
    let mut outputs = op.apply(&inputs)?;
    if let (true, Some((running_mean, running_var))) = (use_input_stats, running) {
        // PyTorch blends each sample's statistics into a copy of the running ones and averages
        // the copies over the batch; blending the batch mean of the statistics is the same
        // update. As batch norm's, it is an op whose outputs are written with `write_state`:
        // in place eagerly, buffer mutations of the graph while tracing.
        let shape = input.shape();
        let (batch, channels) = (shape[0], shape[1]);
        let per_instance = |t: &Tensor| t.reshape(&[batch, channels])?.mean_dims(&[0], false);
        let update = BatchNormUpdateOp {
            momentum: Some(momentum),
            count: shape[2..].iter().product::<usize>(),
            counted: false,
        };
        let updated = {
            let _guard = no_grad();
            let (mean, var) = (per_instance(&outputs[1])?, per_instance(&outputs[2])?);
            Op::BatchNormUpdate(update).apply(&[&mean, &var, running_mean, running_var])?
        };
        for (target, value) in [running_mean, running_var].into_iter().zip(&updated) {
            write_state(target, value)?;
        }
    }
    Ok(outputs.swap_remove(0))
}

/// RMS normalisation over the trailing `normalized_shape` dims (PyTorch's `F.rms_norm`):
/// `x / sqrt(mean(x^2) + eps) * weight`. An `eps` of `None` is the machine epsilon of the
/// input's dtype (`torch.finfo(dtype).eps`).
pub fn rms_norm(
    input: &Tensor,
    normalized_shape: &[usize],
    weight: Option<&Tensor>,
    eps: Option<f64>,
) -> Result<Tensor> {
    let shape = input.shape();
    if !shape.ends_with(normalized_shape) || normalized_shape.is_empty() {
        return Err(TensorError::shapes(
            "rms_norm",
            &shape,
            normalized_shape,
            "normalized_shape must be a non-empty suffix of the input shape",
        ));
    }
    let eps = match eps {
        Some(eps) => eps,
        None => input
            .dtype()
            .epsilon()
            .ok_or_else(|| TensorError::dtype("rms_norm", input.dtype()))?,
    };
    let op = Op::Norm(NormOp::RmsNorm {
        normalized_ndim: normalized_shape.len(),
        eps,
        weight: weight.is_some(),
    });
    let mut inputs = vec![input];
    inputs.extend(weight);
    op.apply1(&inputs)
}

/// Layer normalisation over the trailing `normalized_shape` dims; `weight` and `bias` have
/// that shape.
pub fn layer_norm(
    input: &Tensor,
    normalized_shape: &[usize],
    weight: Option<&Tensor>,
    bias: Option<&Tensor>,
    eps: f64,
) -> Result<Tensor> {
    let shape = input.shape();
    if !shape.ends_with(normalized_shape) || normalized_shape.is_empty() {
        return Err(TensorError::shapes(
            "layer_norm",
            &shape,
            normalized_shape,
            "normalized_shape must be a non-empty suffix of the input shape",
        ));
    }
    let op = Op::Norm(NormOp::LayerNorm {
        normalized_ndim: normalized_shape.len(),
        eps,
        weight: weight.is_some(),
        bias: bias.is_some(),
    });
    let mut inputs = vec![input];
    inputs.extend(weight);
    inputs.extend(bias);
    op.apply1(&inputs)
}

/// Group normalisation of `[N, C, ...]` input: statistics per sample over each of
/// `num_groups` groups of channels; `weight` and `bias` are per channel.
pub fn group_norm(
    input: &Tensor,
    num_groups: usize,
    weight: Option<&Tensor>,
    bias: Option<&Tensor>,
    eps: f64,
) -> Result<Tensor> {
    let op = Op::Norm(NormOp::GroupNorm {
        num_groups,
        eps,
        weight: weight.is_some(),
        bias: bias.is_some(),
    });
    let mut inputs = vec![input];
    inputs.extend(weight);
    inputs.extend(bias);
    op.apply1(&inputs)
}
