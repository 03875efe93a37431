//! Dropout.

use crate::op::{DropoutOp, Op};
use crate::{Result, Tensor};

/// Zeroes each element with probability `p` when `training` (drawn from the global generator,
/// see `manual_seed`) and scales the rest by `1/(1-p)`; the identity otherwise. `p` must lie
/// in `[0, 1]`.
pub fn dropout(input: &Tensor, p: f64, training: bool) -> Result<Tensor> {
    Op::Dropout(DropoutOp { p, training }).apply1(&[input])
}
