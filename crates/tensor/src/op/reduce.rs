//! Reductions over any set of dimensions with `keepdim`: sum, mean, amax/amin, var/std,
//! logsumexp, argmax/argmin, and max/min along one dimension with their indices.

mod integer;

use super::{BackwardCtx, OpDef, OpKind, expect_inputs};
use crate::cpu::{PAR_CHUNK, float_dispatch, tensor_from};
use crate::{DType, Float, Result, Tensor, TensorError, TensorMeta};
use rayon::prelude::*;

/// What a reduction computes per group of reduced elements.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum ReduceKind {
    Sum,
    Mean,
    Amax,
    Amin,
    /// Variance with `correction` (1 = unbiased).
    Var {
        correction: usize,
    },
    /// Standard deviation with `correction` (1 = unbiased).
    Std {
        correction: usize,
    },
    LogSumExp,
    /// Index of the largest element (one dimension); i64.
    ArgMax,
    /// Index of the smallest element (one dimension); i64.
    ArgMin,
    /// Largest values and their i64 indices along one dimension (two outputs).
    MaxWithIndices,
    /// Smallest values and their i64 indices along one dimension (two outputs).
    MinWithIndices,
}

/// A reduction of `dims` (sorted, distinct); an empty list on a 0-dim tensor reduces nothing.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ReduceOp {
    pub kind: ReduceKind,
    pub dims: Vec<usize>,
    pub keepdim: bool,
}

impl ReduceOp {
    fn output_shape(&self, shape: &[usize]) -> Vec<usize> {
        let mut out = Vec::with_capacity(shape.len());
        for (d, &n) in shape.iter().enumerate() {
            if !self.dims.contains(&d) {
                out.push(n);
            } else if self.keepdim {
                out.push(1);
            }
        }
        out
    }

    fn single_dim(&self) -> bool {
        matches!(
            self.kind,
            ReduceKind::ArgMax
                | ReduceKind::ArgMin
                | ReduceKind::MaxWithIndices
                | ReduceKind::MinWithIndices
        )
    }

    /// The input with reduced dims moved last and packed: `(rows, row_len, data)`.
    fn rows<T: crate::storage::StorageElement>(
        &self,
        x: &Tensor,
    ) -> Result<(usize, usize, Vec<T>)> {
        let ndim = x.ndim();
        if ndim == 0 {
            // A 0-d tensor reduced over its dim 0 (PyTorch allows it) is one row of one value.
            return Ok((1, 1, x.to_vec::<T>()?));
        }
        let mut order: Vec<usize> = (0..ndim).filter(|d| !self.dims.contains(d)).collect();
        order.extend(&self.dims);
        let shape = x.shape();
        // Saturating: with a 0 dim elsewhere, the other dims may overflow together.
        let row_len = self
            .dims
            .iter()
            .fold(1usize, |n, &d| n.saturating_mul(shape[d]));
        let rows = (0..shape.len())
            .filter(|d| !self.dims.contains(d))
            .fold(1usize, |n, d| n.saturating_mul(shape[d]));
        let data = if order.iter().enumerate().all(|(i, &d)| i == d) {
            x.to_vec::<T>()?
        } else {
            x.permute(&order)?.to_vec::<T>()?
        };
        Ok((rows, row_len, data))
    }
}

fn per_row<T: Send + Sync + Copy, O: Send + Default + Clone>(
    data: &[T],
    rows: usize,
    row_len: usize,
    f: impl Fn(&[T]) -> O + Sync + Send,
) -> Vec<O> {
    let mut out = vec![O::default(); rows];
    let row_of = |r: usize| &data[r * row_len..(r + 1) * row_len];
    if rows.saturating_mul(row_len) < PAR_CHUNK || rows == 1 {
        out.iter_mut()
            .enumerate()
            .for_each(|(r, o)| *o = f(row_of(r)));
    } else {
        out.par_iter_mut()
            .enumerate()
            .for_each(|(r, o)| *o = f(row_of(r)));
    }
    out
}

#[inline]
fn row_sum<T: Float>(row: &[T]) -> f64 {
    // Eight independent accumulators keep the loop vectorisable and the error small.
    let mut acc = [0.0f64; 8];
    let chunks = row.chunks_exact(8);
    let tail = chunks.remainder();
    for c in chunks {
        for i in 0..8 {
            acc[i] += c[i].as_f64();
        }
    }
    acc.iter().sum::<f64>() + tail.iter().map(|v| v.as_f64()).sum::<f64>()
}

fn float_kernel<T: Float>(op: &ReduceOp, x: &Tensor, out_shape: &[usize]) -> Result<Vec<Tensor>> {
    let (rows, n, data) = op.rows::<T>(x)?;
    let values =
        |f: &(dyn Fn(&[T]) -> T + Sync)| tensor_from(per_row(&data, rows, n, f), out_shape);
    let empty = |what: &str| {
        TensorError::invalid(
            op_name(op),
            format!(
                "cannot compute {what} of an empty dimension (input shape {:?})",
                x.shape()
            ),
        )
    };
    Ok(match op.kind {
        ReduceKind::Sum => vec![values(&|r| T::from_f64(row_sum(r)))],
        ReduceKind::Mean => vec![values(&|r| T::from_f64(row_sum(r) / r.len() as f64))],
        ReduceKind::Amax | ReduceKind::Amin => {
            if n == 0 {
                return Err(empty("max/min"));
            }
            let max = op.kind == ReduceKind::Amax;
            vec![values(&|r| {
                r.iter().copied().fold(r[0], |a, v| {
                    if v.is_nan() || a.is_nan() {
                        T::nan()
                    } else if (v > a) == max && v != a {
                        v
                    } else {
                        a
                    }
                })
            })]
        }
        ReduceKind::Var { correction } | ReduceKind::Std { correction } => {
            let std = matches!(op.kind, ReduceKind::Std { .. });
            vec![values(&|r| {
                let mean = row_sum(r) / r.len() as f64;
                let ss: f64 = r.iter().map(|v| (v.as_f64() - mean).powi(2)).sum();
                let var = ss / (r.len() as f64 - correction as f64).max(0.0);
                T::from_f64(if std { var.sqrt() } else { var })
            })]
        }
        ReduceKind::LogSumExp => vec![values(&|r| {
            let m = r
                .iter()
                .copied()
                .fold(T::neg_infinity(), |a, v| if v > a { v } else { a });
            if m.is_infinite() {
                return m;
            }
            let s: f64 = r.iter().map(|v| (*v - m).as_f64().exp()).sum();
            m + T::from_f64(s.ln())
        })],
        ReduceKind::ArgMax
        | ReduceKind::ArgMin
        | ReduceKind::MaxWithIndices
        | ReduceKind::MinWithIndices => {
            if n == 0 {
                return Err(empty("argmax/argmin"));
            }
            let max = matches!(op.kind, ReduceKind::ArgMax | ReduceKind::MaxWithIndices);
            let best = per_row(&data, rows, n, |r| {
                let mut bi = 0;
                for (i, &v) in r.iter().enumerate() {
                    let b = r[bi];
                    if b.is_nan() {
                        break;
                    }
                    if v.is_nan() || (max && v > b) || (!max && v < b) {
                        bi = i;
                    }
                }
                (bi as i64, r[bi])
            });
            let indices = tensor_from(best.iter().map(|b| b.0).collect::<Vec<i64>>(), out_shape);
            if matches!(op.kind, ReduceKind::ArgMax | ReduceKind::ArgMin) {
                vec![indices]
            } else {
                vec![
                    tensor_from(best.iter().map(|b| b.1).collect::<Vec<T>>(), out_shape),
                    indices,
                ]
            }
        }
    })
}

fn op_name(op: &ReduceOp) -> &'static str {
    match op.kind {
        ReduceKind::Sum => "sum",
        ReduceKind::Mean => "mean",
        ReduceKind::Amax => "amax",
        ReduceKind::Amin => "amin",
        ReduceKind::Var { .. } => "var",
        ReduceKind::Std { .. } => "std",
        ReduceKind::LogSumExp => "logsumexp",
        ReduceKind::ArgMax => "argmax",
        ReduceKind::ArgMin => "argmin",
        ReduceKind::MaxWithIndices => "max",
        ReduceKind::MinWithIndices => "min",
    }
}

impl ReduceOp {
    /// Sum or mean over leading dimensions of a packed tensor (a bias gradient, a batch mean):
    /// rows are added into per-column f64 accumulators, reading the input once in order,
    /// instead of transposing it so that each group is contiguous.
    fn leading_sum<T: Float>(&self, x: &Tensor, out_shape: &[usize]) -> Result<Option<Tensor>> {
        let leading = self.dims.iter().enumerate().all(|(i, &d)| i == d);
        let shape = x.shape();
        if !matches!(self.kind, ReduceKind::Sum | ReduceKind::Mean)
            || !leading
            || self.dims.is_empty()
            // A 0-d tensor reduced over its dim 0 (as PyTorch allows) has fewer dims than that.
            || self.dims.len() >= shape.len()
            || !x.is_contiguous()
        {
            return Ok(None);
        }
        let rows: usize = shape[..self.dims.len()].iter().product();
        let cols: usize = shape[self.dims.len()..].iter().product();
        let scale = if self.kind == ReduceKind::Mean {
            1.0 / rows as f64
        } else {
            1.0
        };
        let sums = x.with_slice(|data: &[T]| {
            let column_block = |start: usize, out: &mut [T]| {
                let mut acc = vec![0.0f64; out.len()];
                for row in data.chunks_exact(cols.max(1)).take(rows) {
                    for (a, &v) in acc.iter_mut().zip(&row[start..start + out.len()]) {
                        *a += v.as_f64();
                    }
                }
                for (o, a) in out.iter_mut().zip(acc) {
                    *o = T::from_f64(a * scale);
                }
            };
            let mut out = vec![T::zero(); cols];
            // Split the columns between threads when there is enough work.
            let block = (PAR_CHUNK / rows.max(1)).clamp(64, cols.max(64));
            if rows * cols < PAR_CHUNK {
                column_block(0, &mut out);
            } else {
                out.par_chunks_mut(block)
                    .enumerate()
                    .for_each(|(i, o)| column_block(i * block, o));
            }
            out
        })?;
        Ok(Some(tensor_from(sums, out_shape)))
    }
}

impl OpDef for ReduceOp {
    op_identity!(attributes: fields, kind: Reduction);

    fn name(&self) -> String {
        op_name(self).into()
    }

    fn meta(&self, inputs: &[TensorMeta]) -> Result<Vec<TensorMeta>> {
        expect_inputs(op_name(self), inputs, 1)?;
        let x = &inputs[0];
        let ndim = x.shape.len();
        if self.dims.iter().any(|&d| d >= ndim.max(1)) || self.dims.windows(2).any(|w| w[0] >= w[1])
        {
            return Err(TensorError::invalid(
                op_name(self),
                format!("invalid dims {:?} for shape {:?}", self.dims, x.shape),
            ));
        }
        if self.single_dim() && self.dims.len() != 1 && ndim > 0 {
            return Err(TensorError::invalid(
                op_name(self),
                "reduces exactly one dimension",
            ));
        }
        let shape = self.output_shape(&x.shape);
        let float_only = !matches!(
            self.kind,
            ReduceKind::Sum
                | ReduceKind::Amax
                | ReduceKind::Amin
                | ReduceKind::ArgMax
                | ReduceKind::ArgMin
        );
        if float_only && !x.dtype.is_float() {
            return Err(TensorError::dtype(op_name(self), x.dtype));
        }
        Ok(match self.kind {
            ReduceKind::ArgMax | ReduceKind::ArgMin => vec![TensorMeta::new(shape, DType::I64)],
            ReduceKind::MaxWithIndices | ReduceKind::MinWithIndices => {
                vec![
                    TensorMeta::new(shape.clone(), x.dtype),
                    TensorMeta::new(shape, DType::I64),
                ]
            }
            ReduceKind::Sum if !x.dtype.is_float() => vec![TensorMeta::new(shape, DType::I64)],
            _ => vec![TensorMeta::new(shape, x.dtype)],
        })
    }

    fn cpu(&self, inputs: &[&Tensor]) -> Result<Vec<Tensor>> {
        let x = inputs[0];
        let out_shape = self.output_shape(&x.shape());
        let dtype = x.dtype();
        if dtype.is_float() {
            return float_dispatch!(dtype, op_name(self), T => {
                if let Some(out) = self.leading_sum::<T>(x, &out_shape)? {
                    return Ok(vec![out]);
                }
                float_kernel::<T>(self, x, &out_shape)
            });
        }
        integer::integer_kernel(self, x, &out_shape)
    }

    fn backward(&self, cx: &BackwardCtx) -> Result<Vec<Option<Tensor>>> {
        let x = &cx.inputs[0];
        let shape = x.shape();
        let count: usize = self.dims.iter().map(|&d| shape[d]).product();
        let kept = |t: &Tensor| -> Result<Tensor> {
            if self.keepdim {
                Ok(t.clone())
            } else {
                t.reshape(
                    &ReduceOp {
                        keepdim: true,
                        ..self.clone()
                    }
                    .output_shape(&shape),
                )
            }
        };
        let g = kept(&cx.grad(0)?)?;
        let y = kept(&cx.outputs[0])?;
        let grad = match self.kind {
            ReduceKind::Sum => g.expand(&shape)?.contiguous()?,
            ReduceKind::Mean => g.div_scalar(count as f64)?.expand(&shape)?.contiguous()?,
            ReduceKind::Amax | ReduceKind::Amin => {
                let hits = x.eq_(&y)?.to_dtype(g.dtype())?;
                let ties = hits.sum_dims(&self.dims, true)?;
                hits.mul(&g.div(&ties)?)?
            }
            ReduceKind::Var { correction } | ReduceKind::Std { correction } => {
                let centered = x.sub(&x.mean_dims(&self.dims, true)?)?;
                let scale = 2.0 / (count as f64 - correction as f64);
                let dvar = centered.mul(&g)?.mul_scalar(scale)?;
                if matches!(self.kind, ReduceKind::Std { .. }) {
                    dvar.div(&y.mul_scalar(2.0)?)?
                } else {
                    dvar
                }
            }
            ReduceKind::LogSumExp => x.sub(&y)?.exp()?.mul(&g)?,
            ReduceKind::MaxWithIndices | ReduceKind::MinWithIndices => {
                let dim = self.dims.first().copied().unwrap_or(0);
                let indices = kept(&cx.outputs[1])?;
                let mut pos_shape = vec![1; shape.len()];
                if !shape.is_empty() {
                    pos_shape[dim] = shape[dim];
                }
                let positions =
                    Tensor::arange(0.0, count as f64, 1.0, DType::I64)?.reshape(&pos_shape)?;
                let hits = positions.eq_(&indices)?;
                Tensor::where_(&hits, &g, &Tensor::zeros(&[], g.dtype())?)?
            }
            ReduceKind::ArgMax | ReduceKind::ArgMin => return Ok(vec![None]),
        };
        Ok(vec![Some(grad)])
    }

    fn output_is_differentiable(&self, index: usize) -> bool {
        index == 0 && !matches!(self.kind, ReduceKind::ArgMax | ReduceKind::ArgMin)
    }
}
