//! Losses composed from the op table's elementwise ops and reductions (smooth_l1, huber,
//! kl_div, margin_ranking), so graphs and compilers see only ordinary ops.

use super::Reduction;
use crate::{Result, Tensor, TensorError};

/// Applies `reduction` to per-element losses.
pub(crate) fn reduce(each: Tensor, reduction: Reduction) -> Result<Tensor> {
    match reduction {
        Reduction::None => Ok(each),
        Reduction::Mean => each.mean_all(),
        Reduction::Sum => each.sum_all(),
    }
}

/// The error of a loss whose input and target shapes differ.
fn check_same_shape(op: &str, input: &Tensor, target: &Tensor) -> Result<()> {
    if input.shape() == target.shape() {
        return Ok(());
    }
    Err(TensorError::shapes(
        op,
        &input.shape(),
        &target.shape(),
        "input and target must have the same shape",
    ))
}

/// `|d| < delta ? 0.5 * d^2 * quadratic_scale : linear_scale * (|d| - 0.5 * delta)` with
/// `d = input - target`, the shape shared by smooth_l1 and huber.
fn piecewise_quadratic(
    input: &Tensor,
    target: &Tensor,
    delta: f64,
    quadratic_scale: f64,
    linear_scale: f64,
) -> Result<Tensor> {
    let d = input.sub(target)?;
    let abs = d.abs()?;
    let quadratic = d.mul(&d)?.mul_scalar(0.5 * quadratic_scale)?;
    let linear = abs.sub_scalar(0.5 * delta)?.mul_scalar(linear_scale)?;
    Tensor::where_(&abs.lt_scalar(delta)?, &quadratic, &linear)
}

/// PyTorch's `smooth_l1_loss`: `0.5 * d^2 / beta` where `|d| < beta`, else `|d| - 0.5 * beta`
/// (`beta = 0` is the L1 loss).
pub fn smooth_l1_loss(
    input: &Tensor,
    target: &Tensor,
    reduction: Reduction,
    beta: f64,
) -> Result<Tensor> {
    check_same_shape("smooth_l1_loss", input, target)?;
    if beta.is_nan() || beta < 0.0 {
        return Err(TensorError::invalid(
            "smooth_l1_loss",
            format!("beta must be non-negative, got {beta}"),
        ));
    }
    if beta == 0.0 {
        return super::l1_loss(input, target, reduction);
    }
    reduce(
        piecewise_quadratic(input, target, beta, 1.0 / beta, 1.0)?,
        reduction,
    )
}

/// PyTorch's `huber_loss`: `0.5 * d^2` where `|d| < delta`, else `delta * (|d| - 0.5 *
/// delta)`; it is `delta * smooth_l1_loss(beta = delta)`.
pub fn huber_loss(
    input: &Tensor,
    target: &Tensor,
    reduction: Reduction,
    delta: f64,
) -> Result<Tensor> {
    check_same_shape("huber_loss", input, target)?;
    if delta.is_nan() || delta <= 0.0 {
        return Err(TensorError::invalid(
            "huber_loss",
            format!("delta must be positive, got {delta}"),
        ));
    }
    reduce(
        piecewise_quadratic(input, target, delta, 1.0, delta)?,
        reduction,
    )
}

/// The reductions of [`kl_div`]: PyTorch's plus `BatchMean` (the sum divided by the batch
/// size, the mathematically correct KL divergence).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KlDivReduction {
    None,
    BatchMean,
    Sum,
    /// The mean over all elements (PyTorch's default, which it warns about).
    #[default]
    Mean,
}

/// PyTorch's `kl_div` of log-probabilities `input` against `target`: pointwise
/// `target * (log(target) - input)` with `0 * log 0 = 0`, or with `log_target`
/// `exp(target) * (target - input)`.
pub fn kl_div(
    input: &Tensor,
    target: &Tensor,
    reduction: KlDivReduction,
    log_target: bool,
) -> Result<Tensor> {
    check_same_shape("kl_div", input, target)?;
    let each = if log_target {
        target.exp()?.mul(&target.sub(input)?)?
    } else {
        // log of target where positive and of 1 elsewhere, so that no -inf enters the graph
        // (the product with a zero target is then 0, and so are its gradients).
        let positive = target.gt_scalar(0.0)?;
        let ones = Tensor::ones_like(target)?;
        let log_target = Tensor::where_(&positive, target, &ones)?.log()?;
        target.mul(&log_target.sub(input)?)?
    };
    match reduction {
        KlDivReduction::None => Ok(each),
        KlDivReduction::Sum => each.sum_all(),
        KlDivReduction::Mean => each.mean_all(),
        KlDivReduction::BatchMean => {
            let batch = input.shape().first().copied().unwrap_or(1);
            each.sum_all()?.div_scalar(batch as f64)
        }
    }
}

/// PyTorch's `margin_ranking_loss`: `max(0, -y * (x1 - x2) + margin)`, `y` being 1 or -1.
pub fn margin_ranking_loss(
    input1: &Tensor,
    input2: &Tensor,
    target: &Tensor,
    margin: f64,
    reduction: Reduction,
) -> Result<Tensor> {
    check_same_shape("margin_ranking_loss", input1, input2)?;
    let each = input1
        .sub(input2)?
        .mul(target)?
        .neg()?
        .add_scalar(margin)?
        .relu()?;
    reduce(each, reduction)
}
