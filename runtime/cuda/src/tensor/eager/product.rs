//! Eager `matmul` and `linear` on CUDA tensors as one standalone generated GEMM
//! ([`render_gemm`]): PyTorch's matmul rules (1-D operands, batch dims broadcast) read as a
//! batched strided product, transposes and other 2-D views read in place through their
//! strides, and the bias of `linear` added in the GEMM's store. An operand whose batch dims do
//! not collapse into one stride (a broadcast against a real batch dim, a permuted batch) or
//! whose rows are not one strided matrix is first packed by the copy kernel.
//! Convolutions are in [`super::convolution`].

use super::builder::OpBuilder;
use crate::driver::CudaDriver;
use crate::gemm::{GemmOptions, GemmParamRole, GemmSpec, StridedOperand, render_gemm};
use crate::tensor::device_state::DeviceState;
use crate::{CudaError, Result};
use std::sync::Arc;
use tessera_kernel::SlotId;
use tessera_tensor::backend::DeviceOperand;
use tessera_tensor::layout::{Layout, broadcast_layout, broadcast_shapes};
use tessera_tensor::op::view_strides;
use tessera_tensor::{DType, TensorMeta};

/// The one stride that walks `shape` (with `strides`) in row-major order, if there is one:
/// dims of size 1 do not count, and a dim all of whose steps stay in place has stride 0.
pub(crate) fn collapsed_stride(shape: &[usize], strides: &[usize]) -> Option<usize> {
    let mut dims = shape
        .iter()
        .zip(strides)
        .rev()
        .filter(|(size, _)| **size != 1);
    let Some((&size, &inner)) = dims.next() else {
        return Some(0);
    };
    let mut reach = inner * size;
    for (&size, &stride) in dims {
        if stride != reach {
            return None;
        }
        reach = stride * size;
    }
    Some(inner)
}

/// `layout` (1-D or more) as a matrix: a vector is a row (`as_row`) or a column of stride 0
/// in the dim it lacks.
fn as_matrix(layout: &Layout, as_row: bool) -> Layout {
    let mut l = layout.clone();
    if l.ndim() == 1 {
        if as_row {
            l.shape.insert(0, 1);
            l.strides.insert(0, 0);
        } else {
            l.shape.push(1);
            l.strides.push(0);
        }
    }
    l
}

/// Where the GEMM reads one operand.
struct Read {
    slot: SlotId,
    at: StridedOperand,
}

/// Operand `n` seen through `layout` (`batch + [rows, cols]`) as one strided batched matrix,
/// packed first when its batch dims do not collapse; `None` when the copy is not generated.
fn batched_read(
    b: &mut OpBuilder<'_>,
    inputs: &[DeviceOperand<'_>],
    n: usize,
    layout: &Layout,
) -> Result<Option<Read>> {
    let nb = layout.ndim() - 2;
    let (rows, cols) = (layout.shape[nb], layout.shape[nb + 1]);
    if let Some(batch_stride) = collapsed_stride(&layout.shape[..nb], &layout.strides[..nb]) {
        return Ok(Some(Read {
            slot: b.operand(n),
            at: StridedOperand {
                offset: layout.offset,
                batch_stride,
                row_stride: layout.strides[nb],
                col_stride: layout.strides[nb + 1],
            },
        }));
    }
    Ok(b.packed(inputs, n, layout)?.map(|slot| Read {
        slot,
        at: StridedOperand::row_major(rows, cols),
    }))
}

/// The spec's name: the op and the element type (the cache keys the rest).
fn spec_name(op: &str, dtype: DType) -> String {
    format!("eager_{op}_{dtype}")
}

/// Appends the product `c = a @ b (+ bias)` of `batch` `m x k` by `k x n` matrices into a
/// new packed slot, returned; an empty result launches nothing.
#[allow(clippy::too_many_arguments)]
fn product(
    b: &mut OpBuilder<'_>,
    state: &DeviceState,
    name: &str,
    dtype: DType,
    (batch, m, n, k): (usize, usize, usize, usize),
    a: Read,
    w: Read,
    bias: Option<(SlotId, usize, usize)>,
) -> Result<Option<SlotId>> {
    let out = b.computed(dtype, batch * m * n);
    if batch * m * n == 0 {
        return Ok(Some(out));
    }
    let spec = GemmSpec {
        name: spec_name(name, dtype),
        dtype,
        batch,
        m,
        n,
        k,
        a: a.at,
        b: w.at,
        c: StridedOperand::row_major(m, n),
        bias: bias.map(|(_, offset, stride)| (offset, stride)),
        options: GemmOptions::default(),
    };
    let kernel = match render_gemm(&spec, &state.target) {
        Ok(k) => k,
        Err(CudaError::Unsupported { .. }) => return Ok(None),
        Err(e) => return Err(e),
    };
    b.launch(kernel, |role| match role {
        GemmParamRole::A => Some(a.slot),
        GemmParamRole::B => Some(w.slot),
        GemmParamRole::C => Some(out),
        GemmParamRole::Bias => bias.map(|(slot, _, _)| slot),
    })?;
    Ok(Some(out))
}

pub(crate) fn shape_error(op: &str, inputs: &[DeviceOperand<'_>], why: &str) -> CudaError {
    CudaError::Tensor(tessera_tensor::TensorError::InvalidArgument {
        op: op.to_string(),
        msg: format!(
            "{why} ({:?})",
            inputs.iter().map(|x| &x.layout.shape).collect::<Vec<_>>()
        ),
    })
}

/// `matmul(a, b)` with PyTorch's 1-D and batch broadcasting rules.
pub(crate) fn matmul(
    driver: &Arc<dyn CudaDriver>,
    state: &DeviceState,
    inputs: &[DeviceOperand<'_>],
    outputs: &[TensorMeta],
) -> Result<Option<super::compile::CompiledOp>> {
    let (Some(x), Some(y), [out]) = (inputs.first(), inputs.get(1), outputs) else {
        return Err(shape_error("matmul", inputs, "expects two operands"));
    };
    if x.layout.ndim() == 0 || y.layout.ndim() == 0 {
        return Err(shape_error(
            "matmul",
            inputs,
            "needs 1-D or larger operands",
        ));
    }
    let (la, lb) = (as_matrix(x.layout, true), as_matrix(y.layout, false));
    let (ra, rb) = (la.ndim(), lb.ndim());
    let (m, k, n) = (la.shape[ra - 2], la.shape[ra - 1], lb.shape[rb - 1]);
    if lb.shape[rb - 2] != k {
        return Err(shape_error("matmul", inputs, "inner dims differ"));
    }
    let batch = broadcast_shapes("matmul", &la.shape[..ra - 2], &lb.shape[..rb - 2])?;
    let full = |rows: usize, cols: usize| {
        let mut s = batch.clone();
        s.extend([rows, cols]);
        s
    };
    let la = broadcast_layout("matmul", &la, &full(m, k))?;
    let lb = broadcast_layout("matmul", &lb, &full(k, n))?;
    let count: usize = batch.iter().product();
    let mut b = OpBuilder::new(driver, state, inputs.len());
    let Some(a) = batched_read(&mut b, inputs, 0, &la)? else {
        return Ok(None);
    };
    let Some(w) = batched_read(&mut b, inputs, 1, &lb)? else {
        return Ok(None);
    };
    let shape = (count, m, n, k);
    let Some(c) = product(&mut b, state, "matmul", out.dtype, shape, a, w, None)? else {
        return Ok(None);
    };
    Ok(Some(b.finish(vec![c])))
}

/// `linear(x, w, bias)`: `x [.., k] @ w^T` (`w` is `[n, k]`) plus the bias per column.
pub(crate) fn linear(
    driver: &Arc<dyn CudaDriver>,
    state: &DeviceState,
    inputs: &[DeviceOperand<'_>],
    outputs: &[TensorMeta],
    with_bias: bool,
) -> Result<Option<super::compile::CompiledOp>> {
    let (Some(x), Some(wt), [out]) = (inputs.first(), inputs.get(1), outputs) else {
        return Err(shape_error(
            "linear",
            inputs,
            "expects an input and a weight",
        ));
    };
    let (xl, wl) = (x.layout, wt.layout);
    let (Some((&k, lead)), [n, wk]) = (xl.shape.split_last(), wl.shape.as_slice()) else {
        return Err(shape_error(
            "linear",
            inputs,
            "needs a [.., k] input and a 2-D weight",
        ));
    };
    if *wk != k {
        return Err(shape_error("linear", inputs, "in_features differ"));
    }
    let (n, rows) = (*n, lead.iter().product::<usize>());
    let mut b = OpBuilder::new(driver, state, inputs.len());
    let a = match view_strides(xl, &[rows, k]) {
        Some(st) => Read {
            slot: b.operand(0),
            at: StridedOperand {
                offset: xl.offset,
                batch_stride: 0,
                row_stride: st[0],
                col_stride: st[1],
            },
        },
        None => match b.packed(inputs, 0, xl)? {
            Some(slot) => Read {
                slot,
                at: StridedOperand::row_major(rows, k),
            },
            None => return Ok(None),
        },
    };
    // `w^T`: element `(k, n)` is `w[n, k]`.
    let w = Read {
        slot: b.operand(1),
        at: StridedOperand {
            offset: wl.offset,
            batch_stride: 0,
            row_stride: wl.strides[1],
            col_stride: wl.strides[0],
        },
    };
    let bias = match (with_bias, inputs.get(2)) {
        (false, _) => None,
        (true, Some(bias)) if bias.layout.shape == [n] => {
            Some((b.operand(2), bias.layout.offset, bias.layout.strides[0]))
        }
        (true, _) => {
            return Err(shape_error(
                "linear",
                inputs,
                "the bias is not [out_features]",
            ));
        }
    };
    let shape = (1, rows, n, k);
    let Some(c) = product(&mut b, state, "linear", out.dtype, shape, a, w, bias)? else {
        return Ok(None);
    };
    Ok(Some(b.finish(vec![c])))
}

#[cfg(test)]
mod tests {
    use super::collapsed_stride;

    #[test]
    fn batch_dims_collapse_when_one_stride_walks_them() {
        assert_eq!(collapsed_stride(&[], &[]), Some(0));
        assert_eq!(collapsed_stride(&[2, 3], &[30, 10]), Some(10));
        assert_eq!(collapsed_stride(&[2, 1, 3], &[30, 7, 10]), Some(10));
        assert_eq!(collapsed_stride(&[2, 3], &[0, 0]), Some(0));
        assert_eq!(collapsed_stride(&[1, 1], &[5, 9]), Some(0));
        // A broadcast against a real batch dim, and a permuted batch.
        assert_eq!(collapsed_stride(&[2, 3], &[12, 0]), None);
        assert_eq!(collapsed_stride(&[2, 3], &[10, 30]), None);
    }
}
