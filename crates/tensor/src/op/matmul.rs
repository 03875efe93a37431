//! Matrix products on the `gemm` crate: `matmul` with PyTorch's 1-D, batching and broadcasting
//! rules, and `linear` (`x @ w^T + b`) with the bias folded into the GEMM's destination.

use super::{BackwardCtx, OpDef, OpKind, expect_inputs};
use crate::cpu::{float_dispatch, offset_of, tensor_from};
use crate::layout::{Layout, broadcast_layout, broadcast_shapes};
use crate::storage::StorageElement;
use crate::{Float, Result, Tensor, TensorError, TensorMeta};
use rayon::prelude::*;

/// Below this many multiply-adds a GEMM runs on one thread.
const PARALLEL_GEMM_WORK: usize = 48 * 48 * 48;

/// One strided matrix operand: `rows x cols` at `offset` with row and column strides.
#[derive(Debug, Clone, Copy)]
pub(crate) struct MatrixRef {
    pub(crate) offset: usize,
    pub(crate) row_stride: usize,
    pub(crate) col_stride: usize,
}

/// Whether a `rows x cols` matrix view lies inside a slice of `len` elements (its last element's
/// index computed without overflow), with strides that fit in `isize`. Empty views always fit.
fn view_fits(len: usize, view: MatrixRef, rows: usize, cols: usize) -> bool {
    if rows == 0 || cols == 0 {
        return true;
    }
    let strides_fit =
        view.row_stride <= isize::MAX as usize && view.col_stride <= isize::MAX as usize;
    let last = (rows - 1)
        .checked_mul(view.row_stride)
        .and_then(|r| {
            (cols - 1)
                .checked_mul(view.col_stride)
                .and_then(|c| r.checked_add(c))
        })
        .and_then(|i| i.checked_add(view.offset));
    strides_fit && last.is_some_and(|i| i < len)
}

/// `dst[m x n] (+)= lhs[m x k] * rhs[k x n]` on raw storage; `dst` is packed row-major.
/// `accumulate` keeps what `dst` holds (used to add a bias).
#[allow(clippy::too_many_arguments)] // mirrors the GEMM call it wraps
pub(crate) fn gemm_into<T: Float>(
    dst: &mut [T],
    lhs: &[T],
    a: MatrixRef,
    rhs: &[T],
    b: MatrixRef,
    (m, n, k): (usize, usize, usize),
    accumulate: bool,
    parallel: bool,
) {
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        if !accumulate {
            dst.iter_mut().for_each(|v| *v = T::zero());
        }
        return;
    }
    let threads = rayon::current_num_threads();
    let parallelism = if parallel && threads > 1 && m * n * k >= PARALLEL_GEMM_WORK {
        gemm::Parallelism::Rayon(threads)
    } else {
        gemm::Parallelism::None
    };
    // The preconditions of the raw GEMM call below, checked rather than trusted: an operand
    // view reaching past its slice would read or write out of bounds. Shapes are checked for
    // overflow when tensors are made, so a failure here is a bug in a caller, never input.
    assert!(
        view_fits(lhs.len(), a, m, k) && view_fits(rhs.len(), b, k, n),
        "gemm_into: an operand view ({m}x{k} at {a:?} in {}, {k}x{n} at {b:?} in {}) leaves its slice",
        lhs.len(),
        rhs.len()
    );
    assert!(
        m.checked_mul(n).is_some_and(|mn| dst.len() >= mn) && n <= isize::MAX as usize,
        "gemm_into: a {m}x{n} output does not fit {} elements",
        dst.len()
    );
    // SAFETY: checked above: both operand views lie inside their slices, dst holds m*n
    // elements, every stride fits in isize, and gemm reads/writes only through the given
    // strides within those extents.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst.as_mut_ptr(),
            1,
            n as isize,
            accumulate,
            lhs.as_ptr().add(a.offset),
            a.col_stride as isize,
            a.row_stride as isize,
            rhs.as_ptr().add(b.offset),
            b.col_stride as isize,
            b.row_stride as isize,
            T::one(),
            T::one(),
            false,
            false,
            false,
            parallelism,
        );
    }
}

/// The sizes of a matmul: broadcast batch dims, `m x k` times `k x n`, and the output shape.
struct MatmulShapes {
    batch: Vec<usize>,
    m: usize,
    k: usize,
    n: usize,
    output: Vec<usize>,
}

fn matmul_shapes(a: &[usize], b: &[usize]) -> Result<MatmulShapes> {
    if a.is_empty() || b.is_empty() {
        return Err(TensorError::shapes(
            "matmul",
            a,
            b,
            "both arguments need at least 1 dimension",
        ));
    }
    let (m, ka) = if a.len() == 1 {
        (1, a[0])
    } else {
        (a[a.len() - 2], a[a.len() - 1])
    };
    let (kb, n) = if b.len() == 1 {
        (b[0], 1)
    } else {
        (b[b.len() - 2], b[b.len() - 1])
    };
    if ka != kb {
        return Err(TensorError::shapes(
            "matmul",
            a,
            b,
            format!("mat1 and mat2 shapes cannot be multiplied ({m}x{ka} and {kb}x{n})"),
        ));
    }
    let batch_a = &a[..a.len().saturating_sub(2)];
    let batch_b = &b[..b.len().saturating_sub(2)];
    let batch = broadcast_shapes("matmul", batch_a, batch_b)?;
    let mut out = batch.clone();
    if a.len() >= 2 {
        out.push(m);
    }
    if b.len() >= 2 {
        out.push(n);
    }
    Ok(MatmulShapes {
        batch,
        m,
        k: ka,
        n,
        output: out,
    })
}

/// The layout of a matmul operand seen as `batch + [rows, cols]`.
fn as_batched(layout: &Layout, batch: &[usize], vector_is_row: bool) -> Result<Layout> {
    let mut l = layout.clone();
    if l.ndim() == 1 {
        if vector_is_row {
            l.shape.insert(0, 1);
            l.strides.insert(0, 0);
        } else {
            l.shape.push(1);
            l.strides.push(0);
        }
    }
    let r = l.ndim();
    let mut full = batch.to_vec();
    full.extend(&l.shape[r - 2..]);
    broadcast_layout("matmul", &l, &full)
}

fn matmul_kernel<T: Float + StorageElement>(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    let MatmulShapes {
        batch,
        m,
        k,
        n,
        output: out_shape,
    } = matmul_shapes(&a.shape(), &b.shape())?;
    // An empty output needs no kernel, and its other dimensions may multiply past `usize`
    // (`[2, 0] @ [0, 0, 2^64 - 1]`); a non-empty one fits memory, as its meta checked.
    if crate::size::saturating_numel(&out_shape) == 0 {
        return Ok(tensor_from(Vec::<T>::new(), &out_shape));
    }
    let (la, lb) = (
        as_batched(&a.layout(), &batch, true)?,
        as_batched(&b.layout(), &batch, false)?,
    );
    let batch_count = crate::size::saturating_numel(&batch);
    let batch_layout = |l: &Layout| Layout {
        shape: batch.clone(),
        strides: l.strides[..batch.len()].to_vec(),
        offset: l.offset,
    };
    let (ba, bb) = (batch_layout(&la), batch_layout(&lb));
    let nd = la.ndim();
    let mut out = crate::cpu::try_uninit_buffer::<T>("matmul", batch_count * m * n)?;
    a.with_storage(|sa, _| -> Result<()> {
        b.with_storage(|sb, _| -> Result<()> {
            let (sa, sb) = (
                T::slice(sa.cpu("matmul")?).expect("dtype"),
                T::slice(sb.cpu("matmul")?).expect("dtype"),
            );
            let operand = |l: &Layout, bl: &Layout, i: usize| MatrixRef {
                offset: offset_of(bl, i),
                row_stride: l.strides[nd - 2],
                col_stride: l.strides[nd - 1],
            };
            let run = |i: usize, dst: &mut [T], parallel: bool| {
                gemm_into(
                    dst,
                    sa,
                    operand(&la, &ba, i),
                    sb,
                    operand(&lb, &bb, i),
                    (m, n, k),
                    false,
                    parallel,
                )
            };
            // Batches in parallel, each GEMM on one thread, when each is small or there are at
            // least four per thread to share out (on 2 threads, attention's 32 products of
            // 128x64x128 ran one after another, each split across threads at a fraction of the
            // GEMM's rate).
            let small = m.saturating_mul(n).saturating_mul(k) < (1 << 20);
            let many = batch_count >= 4 * rayon::current_num_threads();
            if batch_count > 1 && (small || many) {
                out.par_chunks_mut((m * n).max(1))
                    .enumerate()
                    .for_each(|(i, dst)| run(i, dst, false));
            } else {
                out.chunks_mut((m * n).max(1))
                    .enumerate()
                    .for_each(|(i, dst)| run(i, dst, true));
            }
            Ok(())
        })
    })?;
    Ok(tensor_from(out, &out_shape))
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct MatmulOp;

impl OpDef for MatmulOp {
    op_identity!(name: "matmul", attributes: none, kind: Gemm);

    fn meta(&self, inputs: &[TensorMeta]) -> Result<Vec<TensorMeta>> {
        expect_inputs("matmul", inputs, 2)?;
        if inputs[0].dtype != inputs[1].dtype {
            return Err(TensorError::DTypeMismatch {
                op: "matmul".into(),
                expected: inputs[0].dtype,
                got: inputs[1].dtype,
            });
        }
        super::expect_float("matmul", &inputs[0])?;
        let out = matmul_shapes(&inputs[0].shape, &inputs[1].shape)?.output;
        Ok(vec![TensorMeta::new(out, inputs[0].dtype)])
    }

    fn cpu(&self, inputs: &[&Tensor]) -> Result<Vec<Tensor>> {
        Ok(vec![
            float_dispatch!(inputs[0].dtype(), "matmul", T => matmul_kernel::<T>(inputs[0], inputs[1])?),
        ])
    }

    fn backward(&self, cx: &BackwardCtx) -> Result<Vec<Option<Tensor>>> {
        let (a, b) = (&cx.inputs[0], &cx.inputs[1]);
        let (a_nd, b_nd) = (a.ndim(), b.ndim());
        let a2 = if a_nd == 1 {
            a.unsqueeze(0)?
        } else {
            a.clone()
        };
        let b2 = if b_nd == 1 {
            b.unsqueeze(1)?
        } else {
            b.clone()
        };
        // The gradient with the vector dimensions matmul removed put back.
        let mut g = cx.grad(0)?;
        if a_nd == 1 {
            g = g.unsqueeze(if b_nd == 1 { 0 } else { -2 })?;
        }
        if b_nd == 1 {
            g = g.unsqueeze(-1)?;
        }
        let ga = if cx.needs[0] {
            Some(
                g.matmul(&b2.transpose(-1, -2)?)?
                    .sum_to_shape(&a2.shape())?
                    .reshape(&a.shape())?,
            )
        } else {
            None
        };
        let gb = if cx.needs[1] {
            Some(
                a2.transpose(-1, -2)?
                    .matmul(&g)?
                    .sum_to_shape(&b2.shape())?
                    .reshape(&b.shape())?,
            )
        } else {
            None
        };
        Ok(vec![ga, gb])
    }
}

/// Adds `bias` to every row of the packed matrix `out` (rows of `bias.len()`).
pub(crate) fn add_bias_rows<T: Float>(out: &mut [T], bias: &[T]) {
    if bias.is_empty() {
        return;
    }
    let add = |rows: &mut [T]| {
        for row in rows.chunks_mut(bias.len()) {
            row.iter_mut().zip(bias).for_each(|(o, &b)| *o = *o + b);
        }
    };
    let rows_per_task = (crate::cpu::PAR_CHUNK / bias.len().max(1)).max(1);
    if out.len() < crate::cpu::PAR_CHUNK || bias.is_empty() {
        add(out);
    } else {
        out.par_chunks_mut(rows_per_task * bias.len()).for_each(add);
    }
}

#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub(crate) struct LinearOp {
    pub(crate) bias: bool,
}

fn linear_kernel<T: Float + StorageElement>(
    x: &Tensor,
    w: &Tensor,
    b: Option<&Tensor>,
) -> Result<Tensor> {
    let x_shape = x.shape();
    let k = *x_shape.last().expect("meta checked");
    let n = w.shape()[0];
    // Rows are the leading dims' product (not numel / k, which is 0 when k is 0).
    let m = crate::size::saturating_numel(&x_shape[..x_shape.len() - 1]);
    let x2 = x.reshape(&[m, k])?;
    let mut out = crate::cpu::try_uninit_buffer::<T>("matmul", m * n)?;
    let (lx, lw) = (x2.layout(), w.layout());
    x2.with_storage(|sx, _| -> Result<()> {
        w.with_storage(|sw, _| -> Result<()> {
            let (sx, sw) = (
                T::slice(sx.cpu("linear")?).expect("dtype"),
                T::slice(sw.cpu("linear")?).expect("dtype"),
            );
            let xa = MatrixRef {
                offset: lx.offset,
                row_stride: lx.strides[0],
                col_stride: lx.strides[1],
            };
            // w^T: element (k, n) of the transposed weight is w[n, k].
            let wt = MatrixRef {
                offset: lw.offset,
                row_stride: lw.strides[1],
                col_stride: lw.strides[0],
            };
            gemm_into(&mut out, sx, xa, sw, wt, (m, n, k), false, true);
            Ok(())
        })
    })?;
    // Adding the bias afterwards is cheaper than GEMM's accumulate path (measured 1.5x
    // slower for 256x784x256).
    if let Some(b) = b {
        b.with_slice(|bias: &[T]| add_bias_rows(&mut out, bias))?;
    }
    let mut out_shape = x_shape;
    *out_shape.last_mut().expect("meta checked") = n;
    Ok(tensor_from(out, &out_shape))
}

impl OpDef for LinearOp {
    op_identity!(name: "linear", attributes: fields, kind: Gemm);

    fn meta(&self, inputs: &[TensorMeta]) -> Result<Vec<TensorMeta>> {
        expect_inputs("linear", inputs, if self.bias { 3 } else { 2 })?;
        let (x, w) = (&inputs[0], &inputs[1]);
        super::expect_float("linear", x)?;
        if let Some(other) = inputs.iter().find(|t| t.dtype != x.dtype) {
            let dtypes: Vec<String> = inputs.iter().map(|t| t.dtype.to_string()).collect();
            return Err(TensorError::DTypeMismatch {
                op: format!(
                    "linear (input, weight{}: {})",
                    if self.bias { ", bias" } else { "" },
                    dtypes.join(", ")
                ),
                expected: x.dtype,
                got: other.dtype,
            });
        }
        if x.shape.is_empty() || w.shape.len() != 2 || x.shape[x.shape.len() - 1] != w.shape[1] {
            return Err(TensorError::shapes(
                "linear",
                &x.shape,
                &w.shape,
                "input's last dimension must equal weight's in_features (weight is [out_features, in_features])",
            ));
        }
        if self.bias && inputs[2].shape != [w.shape[0]] {
            return Err(TensorError::shapes(
                "linear",
                &inputs[2].shape,
                &w.shape,
                "bias must be [out_features]",
            ));
        }
        let mut shape = x.shape.clone();
        *shape.last_mut().expect("checked non-empty") = w.shape[0];
        Ok(vec![TensorMeta::new(shape, x.dtype)])
    }

    fn cpu(&self, inputs: &[&Tensor]) -> Result<Vec<Tensor>> {
        let b = inputs.get(2).copied();
        Ok(vec![
            float_dispatch!(inputs[0].dtype(), "linear", T => linear_kernel::<T>(inputs[0], inputs[1], b)?),
        ])
    }

    fn backward(&self, cx: &BackwardCtx) -> Result<Vec<Option<Tensor>>> {
        let (x, w) = (&cx.inputs[0], &cx.inputs[1]);
        let k = w.shape()[1];
        let n = w.shape()[0];
        let g = cx.grad(0)?;
        let m = g.numel() / n.max(1);
        let g2 = g.reshape(&[m, n])?;
        let gx = if cx.needs[0] {
            Some(g2.matmul(w)?.reshape(&x.shape())?)
        } else {
            None
        };
        let gw = if cx.needs[1] {
            Some(g2.transpose(0, 1)?.matmul(&x.reshape(&[m, k])?)?)
        } else {
            None
        };
        let mut grads = vec![gx, gw];
        if self.bias {
            grads.push(if cx.needs[2] {
                Some(g2.sum_dims(&[0], false)?)
            } else {
                None
            });
        }
        Ok(grads)
    }
}
