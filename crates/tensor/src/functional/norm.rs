//! Normalisation functions (batch_norm, layer_norm, group_norm), including batch norm's
//! in-place running-statistic update in training mode.

use crate::op::{NormOp, Op};
use crate::{Result, Tensor, TensorError, no_grad};

/// Batch normalisation over dim 1 of `[N, C]`, `[N, C, L]` or `[N, C, H, W]` input.
///
/// In training the batch mean and biased variance normalise, and the running statistics (when
/// given) are updated in place with `running = (1 - momentum) * running + momentum * batch`,
/// using the unbiased batch variance. Outside training the running statistics normalise and
/// are required.
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
    let running = match (running_mean, running_var) {
        (Some(m), Some(v)) => Some((m, v)),
        (None, None) => None,
        _ => {
            return Err(TensorError::invalid(
                "batch_norm",
                "running_mean and running_var must be given together",
            ));
        }
    };
    if !training && running.is_none() {
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
    if let (false, Some((m, v))) = (training, running) {
        inputs.extend([m, v]);
    }
    inputs.extend(weight);
    inputs.extend(bias);
    let mut outputs = op.apply(&inputs)?;
    // A meta (traced) input has no statistics to blend: the update is a side effect tracing
    // does not record.
    if let (true, Some((running_mean, running_var)), false) = (training, running, input.is_meta()) {
        let (mean, var) = (&outputs[1], &outputs[2]);
        let n = (input.numel() / input.shape()[1]) as f64;
        let _guard = no_grad();
        let blend = |running: &Tensor, batch: &Tensor| -> Result<()> {
            let batch = batch.to_dtype(running.dtype())?;
            let updated = running
                .mul_scalar(1.0 - momentum)?
                .add(&batch.mul_scalar(momentum)?)?;
            running.copy_(&updated)?;
            Ok(())
        };
        blend(running_mean, mean)?;
        blend(running_var, &var.mul_scalar(n / (n - 1.0))?)?;
    }
    Ok(outputs.swap_remove(0))
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
