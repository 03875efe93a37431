//! Softmax and log-softmax along one dimension, computed stably (max subtracted first).

use super::{BackwardCtx, OpDef, OpKind, expect_float, expect_inputs};
use crate::cpu::{PAR_CHUNK, float_dispatch, tensor_from};
use crate::{Float, Result, Tensor, TensorError, TensorMeta};
use rayon::prelude::*;

#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub(crate) struct SoftmaxOp {
    pub(crate) dim: usize,
    pub(crate) log: bool,
}

impl SoftmaxOp {
    fn kernel<T: Float>(&self, x: &Tensor) -> Result<Tensor> {
        let shape = x.shape();
        let ndim = shape.len();
        // Move `dim` last, normalise rows, move it back.
        let mut order: Vec<usize> = (0..ndim).filter(|&d| d != self.dim).collect();
        if ndim > 0 {
            order.push(self.dim);
        }
        let moved = x.permute(&order)?;
        let moved_shape = moved.shape();
        let n = moved_shape.last().copied().unwrap_or(1).max(1);
        let log = self.log;
        let mut inverse = vec![0; ndim];
        for (i, &d) in order.iter().enumerate() {
            inverse[d] = i;
        }
        if T::DTYPE == crate::DType::F32
            && let Some(rows) =
                moved.with_slice(|src: &[f32]| super::softmax_rows::rows(src, n, log))??
        {
            return tensor_from(rows, &moved_shape)
                .permute(&inverse)?
                .contiguous();
        }
        let mut data = moved.to_vec::<T>()?;
        let normalise = |row: &mut [T]| {
            let m = row
                .iter()
                .copied()
                .fold(T::neg_infinity(), |a, v| if v > a { v } else { a });
            let m = if m.is_infinite() { T::zero() } else { m };
            let mut sum = T::zero();
            for v in row.iter_mut() {
                let e = (*v - m).exp();
                sum = sum + e;
                if !log {
                    *v = e;
                }
            }
            if log {
                let lse = m + sum.ln();
                row.iter_mut().for_each(|v| *v = *v - lse);
            } else {
                let inv = sum.recip();
                row.iter_mut().for_each(|v| *v = *v * inv);
            }
        };
        if data.len() < PAR_CHUNK {
            data.chunks_mut(n).for_each(normalise);
        } else {
            data.par_chunks_mut(n).for_each(normalise);
        }
        tensor_from(data, &moved_shape)
            .permute(&inverse)?
            .contiguous()
    }
}

impl OpDef for SoftmaxOp {
    op_identity!(attributes: fields, kind: Normalization);

    fn backward_reads_output(&self) -> bool {
        true
    }

    fn name(&self) -> String {
        if self.log { "log_softmax" } else { "softmax" }.into()
    }

    fn meta(&self, inputs: &[TensorMeta]) -> Result<Vec<TensorMeta>> {
        expect_inputs(&self.name(), inputs, 1)?;
        expect_float(&self.name(), &inputs[0])?;
        if self.dim >= inputs[0].shape.len().max(1) {
            return Err(TensorError::invalid(
                self.name(),
                format!(
                    "dim {} out of range for shape {:?}",
                    self.dim, inputs[0].shape
                ),
            ));
        }
        Ok(vec![inputs[0].clone()])
    }

    fn cpu(&self, inputs: &[&Tensor]) -> Result<Vec<Tensor>> {
        Ok(vec![
            float_dispatch!(inputs[0].dtype(), self.name(), T => self.kernel::<T>(inputs[0])?),
        ])
    }

    fn backward(&self, cx: &BackwardCtx) -> Result<Vec<Option<Tensor>>> {
        let (g, y) = (cx.grad(0)?, &cx.outputs[0]);
        let dims = if y.ndim() == 0 {
            vec![]
        } else {
            vec![self.dim]
        };
        let grad = if self.log {
            // d/dx log_softmax: g - softmax * sum(g)
            g.sub(&y.exp()?.mul(&g.sum_dims(&dims, true)?)?)?
        } else {
            // d/dx softmax: y * (g - sum(g * y))
            y.mul(&g.sub(&g.mul(y)?.sum_dims(&dims, true)?)?)?
        };
        Ok(vec![Some(grad)])
    }
}
