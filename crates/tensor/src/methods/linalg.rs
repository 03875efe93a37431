//! Matrix products.

use crate::op::Op;
use crate::{Result, Tensor};

impl Tensor {
    /// Matrix product with PyTorch's rules: 1-D operands are vectors, leading dimensions are
    /// batch dimensions and broadcast.
    pub fn matmul(&self, other: &Tensor) -> Result<Tensor> {
        Op::Matmul.apply1(&[self, other])
    }

    /// `self @ weight^T + bias`, with `weight` of shape `[out_features, in_features]`.
    pub fn linear(&self, weight: &Tensor, bias: Option<&Tensor>) -> Result<Tensor> {
        match bias {
            Some(b) => Op::Linear { bias: true }.apply1(&[self, weight, b]),
            None => Op::Linear { bias: false }.apply1(&[self, weight]),
        }
    }
}
