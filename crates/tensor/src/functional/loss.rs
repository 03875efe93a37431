//! Loss functions (mse, l1, cross_entropy, nll, binary_cross_entropy_with_logits).

use crate::op::{LossOp, Op};
use crate::{Result, Tensor};

pub use crate::op::Reduction;

/// Options of [`cross_entropy`] and [`nll_loss`], PyTorch's defaults by `Default`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CrossEntropyOptions {
    pub reduction: Reduction,
    /// Mixes the one-hot target with the uniform distribution: `(1 - s) * onehot + s / C`.
    pub label_smoothing: f64,
    /// Samples with this target contribute nothing and are not counted by the mean.
    pub ignore_index: i64,
}

impl Default for CrossEntropyOptions {
    fn default() -> Self {
        CrossEntropyOptions {
            reduction: Reduction::Mean,
            label_smoothing: 0.0,
            ignore_index: -100,
        }
    }
}

/// Mean squared error `(input - target)^2`, reduced.
pub fn mse_loss(input: &Tensor, target: &Tensor, reduction: Reduction) -> Result<Tensor> {
    Op::Loss(LossOp::Mse { reduction }).apply1(&[input, target])
}

/// Absolute error `|input - target|`, reduced.
pub fn l1_loss(input: &Tensor, target: &Tensor, reduction: Reduction) -> Result<Tensor> {
    Op::Loss(LossOp::L1 { reduction }).apply1(&[input, target])
}

/// Negative log-likelihood of class-index `target` (`[N, d...]`, i64) under log-probabilities
/// `input` (`[N, C, d...]` or `[C]`).
pub fn nll_loss(input: &Tensor, target: &Tensor, options: CrossEntropyOptions) -> Result<Tensor> {
    Op::Loss(LossOp::Nll {
        reduction: options.reduction,
        ignore_index: options.ignore_index,
        label_smoothing: options.label_smoothing,
    })
    .apply1(&[input, target])
}

/// Cross entropy of logits `input` (`[N, C, d...]` or `[C]`) and class-index `target`:
/// `log_softmax` over the class dim followed by [`nll_loss`].
pub fn cross_entropy(
    input: &Tensor,
    target: &Tensor,
    options: CrossEntropyOptions,
) -> Result<Tensor> {
    let class_dim = if input.ndim() == 1 { 0 } else { 1 };
    nll_loss(&input.log_softmax(class_dim)?, target, options)
}

/// Binary cross entropy of logits `input` against float `target` (same shape), computed
/// stably; `pos_weight` (broadcast to the input) weighs the positive term.
pub fn binary_cross_entropy_with_logits(
    input: &Tensor,
    target: &Tensor,
    pos_weight: Option<&Tensor>,
    reduction: Reduction,
) -> Result<Tensor> {
    let op = Op::Loss(LossOp::BceWithLogits {
        reduction,
        pos_weight: pos_weight.is_some(),
    });
    let mut inputs = vec![input, target];
    inputs.extend(pos_weight);
    op.apply1(&inputs)
}

/// Binary cross entropy of probabilities `input` against float `target` (same shape); each
/// log term is floored at -100 and the gradient divides by `max(p * (1 - p), 1e-12)`, as
/// PyTorch's.
pub fn binary_cross_entropy(
    input: &Tensor,
    target: &Tensor,
    reduction: Reduction,
) -> Result<Tensor> {
    Op::Loss(LossOp::Bce { reduction }).apply1(&[input, target])
}
