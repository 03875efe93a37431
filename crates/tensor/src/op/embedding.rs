//! Embedding lookup: rows of a `[num, dim]` weight gathered by integer indices of any shape;
//! backward scatter-adds into a zero weight gradient, skipping the padding row.

use super::{BackwardCtx, Op, OpDef, OpKind, expect_float, expect_inputs};
use crate::cpu::{float_dispatch, tensor_from};
use crate::{DType, Float, Result, Tensor, TensorError, TensorMeta};

/// `weight[indices]`; inputs `weight, indices`. The row `padding_idx` gets no gradient.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct EmbeddingOp {
    pub padding_idx: Option<usize>,
}

/// The indices as `usize`, each checked against the table size.
fn rows(indices: &Tensor, num: usize) -> Result<Vec<usize>> {
    let values: Vec<i64> = match indices.dtype() {
        DType::I64 => indices.to_vec::<i64>()?,
        DType::I32 => indices
            .to_vec::<i32>()?
            .into_iter()
            .map(i64::from)
            .collect(),
        other => return Err(TensorError::dtype("embedding", other)),
    };
    values
        .into_iter()
        .map(|i| {
            usize::try_from(i).ok().filter(|&r| r < num).ok_or_else(|| {
                TensorError::invalid(
                    "embedding",
                    format!("index {i} is out of range for a table of {num} rows"),
                )
            })
        })
        .collect()
}

impl EmbeddingOp {
    fn lookup<T: Float>(&self, weight: &Tensor, indices: &Tensor) -> Result<Tensor> {
        let (num, dim) = (weight.shape()[0], weight.shape()[1]);
        let rows = rows(indices, num)?;
        let table = weight.to_vec::<T>()?;
        let mut out = Vec::with_capacity(rows.len() * dim);
        for r in rows {
            out.extend_from_slice(&table[r * dim..(r + 1) * dim]);
        }
        let mut shape = indices.shape();
        shape.push(dim);
        Ok(tensor_from(out, &shape))
    }

    fn scatter<T: Float>(&self, g: &Tensor, indices: &Tensor, num: usize) -> Result<Tensor> {
        let dim = g.shape().last().copied().unwrap_or(0);
        let rows = rows(indices, num)?;
        let grad = g.to_vec::<T>()?;
        let mut out = vec![T::zero(); num * dim];
        for (k, r) in rows.into_iter().enumerate() {
            if Some(r) == self.padding_idx {
                continue;
            }
            let dst = &mut out[r * dim..(r + 1) * dim];
            for (d, &v) in dst.iter_mut().zip(&grad[k * dim..(k + 1) * dim]) {
                *d = *d + v;
            }
        }
        Ok(tensor_from(out, &[num, dim]))
    }
}

impl OpDef for EmbeddingOp {
    op_identity!(name: "embedding", attributes: fields, kind: Indexing);

    fn meta(&self, inputs: &[TensorMeta]) -> Result<Vec<TensorMeta>> {
        expect_inputs("embedding", inputs, 2)?;
        let (weight, indices) = (&inputs[0], &inputs[1]);
        expect_float("embedding", weight)?;
        if !matches!(indices.dtype, DType::I64 | DType::I32) {
            return Err(TensorError::invalid(
                "embedding",
                format!("indices must be i64 or i32, got {}", indices.dtype),
            ));
        }
        if weight.shape.len() != 2 {
            return Err(TensorError::shapes(
                "embedding",
                &weight.shape,
                &indices.shape,
                "weight must be 2-D [num_embeddings, embedding_dim]",
            ));
        }
        if let Some(p) = self.padding_idx.filter(|&p| p >= weight.shape[0]) {
            return Err(TensorError::invalid(
                "embedding",
                format!(
                    "padding_idx {p} is out of range for a table of {} rows",
                    weight.shape[0]
                ),
            ));
        }
        let mut shape = indices.shape.clone();
        shape.push(weight.shape[1]);
        Ok(vec![TensorMeta::new(shape, weight.dtype)])
    }

    fn cpu(&self, inputs: &[&Tensor]) -> Result<Vec<Tensor>> {
        let (weight, indices) = (inputs[0], inputs[1]);
        Ok(vec![
            float_dispatch!(weight.dtype(), "embedding", T => self.lookup::<T>(weight, indices)?),
        ])
    }

    fn backward(&self, cx: &BackwardCtx) -> Result<Vec<Option<Tensor>>> {
        let (weight, indices) = (&cx.inputs[0], &cx.inputs[1]);
        if !cx.needs[0] {
            return Ok(vec![None, None]);
        }
        let backward = EmbeddingBackwardOp {
            num_weights: weight.shape()[0],
            padding_idx: self.padding_idx,
        };
        let grad = Op::EmbeddingBackward(backward).apply1(&[&cx.grad(0)?, indices])?;
        Ok(vec![Some(grad.to_dtype(weight.dtype())?), None])
    }
}

/// The gradient of an embedding with respect to its weight: the rows of `grad` added into a
/// zero `[num_weights, dim]` table at their indices, the padding row left zero. Inputs
/// `grad, indices`.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct EmbeddingBackwardOp {
    pub num_weights: usize,
    pub padding_idx: Option<usize>,
}

impl OpDef for EmbeddingBackwardOp {
    op_identity!(name: "embedding_backward", attributes: fields, kind: Indexing);

    fn meta(&self, inputs: &[TensorMeta]) -> Result<Vec<TensorMeta>> {
        let name = "embedding_backward";
        expect_inputs(name, inputs, 2)?;
        let (grad, indices) = (&inputs[0], &inputs[1]);
        expect_float(name, grad)?;
        if !matches!(indices.dtype, DType::I64 | DType::I32) {
            return Err(TensorError::invalid(
                name,
                format!("indices must be i64 or i32, got {}", indices.dtype),
            ));
        }
        let (lead, dim) = grad.shape.split_at(grad.shape.len().saturating_sub(1));
        if grad.shape.is_empty() || lead != indices.shape.as_slice() {
            return Err(TensorError::shapes(
                name,
                &grad.shape,
                &indices.shape,
                "grad must be the indices' shape plus the embedding dimension",
            ));
        }
        if let Some(p) = self.padding_idx.filter(|&p| p >= self.num_weights) {
            return Err(TensorError::invalid(
                name,
                format!(
                    "padding_idx {p} is out of range for a table of {} rows",
                    self.num_weights
                ),
            ));
        }
        Ok(vec![TensorMeta::new(
            vec![self.num_weights, dim[0]],
            grad.dtype,
        )])
    }

    fn cpu(&self, inputs: &[&Tensor]) -> Result<Vec<Tensor>> {
        let (grad, indices) = (inputs[0], inputs[1]);
        let lookup = EmbeddingOp {
            padding_idx: self.padding_idx,
        };
        Ok(vec![
            float_dispatch!(grad.dtype(), "embedding_backward", T => lookup.scatter::<T>(grad, indices, self.num_weights)?),
        ])
    }

    /// Linear in `grad`: its adjoint looks the upstream rows up again, zero at the padding
    /// index.
    fn backward(&self, cx: &BackwardCtx) -> Result<Vec<Option<Tensor>>> {
        if !cx.needs[0] {
            return Ok(vec![None, None]);
        }
        let indices = &cx.inputs[1];
        let upstream = cx.grad(0)?;
        let rows =
            Op::Embedding(EmbeddingOp { padding_idx: None }).apply1(&[&upstream, indices])?;
        let rows = match self.padding_idx {
            None => rows,
            Some(p) => {
                let kept = indices.ne_scalar(p as f64)?.unsqueeze(-1)?;
                Tensor::where_(&kept, &rows, &super::zeros(&[], rows.dtype())?)?
            }
        };
        Ok(vec![Some(rows), None])
    }
}
