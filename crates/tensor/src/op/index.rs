//! Indexing and joining ops (cat, index_select, index_add, gather, scatter_add, one_hot): their
//! meta functions, kernels over every dtype, and backward formulas. Index values are checked by
//! the kernels, since only they see the data; splitting is left to narrow views.

use super::{BackwardCtx, OpDef, OpKind};
use crate::cpu::{any_dispatch, tensor_from};
use crate::layout::contiguous_strides;
use crate::storage::StorageElement;
use crate::{DType, Result, Tensor, TensorError, TensorMeta};

/// Indexing, joining and one-hot encoding.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum IndexOp {
    /// Concatenation of any number of inputs along `dim`, promoted to one dtype. A 1-D input
    /// of size 0 is skipped whatever its rank (PyTorch's legacy rule).
    Cat { dim: usize },
    /// Inputs `(x, index)`: the slices `index` (1-D or 0-dim, i64/i32) of `x` along `dim`.
    IndexSelect { dim: usize },
    /// Inputs `(x, index, src)`: `x` with slice `j` of `src` added to slice `index[j]`.
    IndexAdd { dim: usize },
    /// Inputs `(x, index)`: `out[p] = x[p with p[dim] = index[p]]`, shaped like `index`.
    Gather { dim: usize },
    /// Inputs `(x, index, src)`: `x` with `src[p]` added at `p with p[dim] = index[p]`.
    ScatterAdd { dim: usize },
    /// Integer classes to i64 rows with a 1 at the class, `num_classes` wide.
    OneHot { num_classes: usize },
}

variant_names!(IndexOp {
    Cat => "cat",
    IndexSelect => "index_select",
    IndexAdd => "index_add",
    Gather => "gather",
    ScatterAdd => "scatter_add",
    OneHot => "one_hot",
});

/// True for a 1-D tensor of size 0, which `cat` skips whatever the other inputs' shapes.
fn is_legacy_empty(shape: &[usize]) -> bool {
    shape == [0]
}

/// The input whose shape the others must match in `cat`: the first that is not legacy-empty.
fn cat_reference(shapes: &[&[usize]]) -> usize {
    shapes.iter().position(|s| !is_legacy_empty(s)).unwrap_or(0)
}

/// The shape a kernel walks: 0-dim tensors are treated as one element along one dimension.
fn padded(shape: &[usize]) -> Vec<usize> {
    if shape.is_empty() {
        vec![1]
    } else {
        shape.to_vec()
    }
}

/// `(outer, size, inner)`: the products of the dims before `dim`, `dim` itself, and after it.
fn split_at_dim(shape: &[usize], dim: usize) -> (usize, usize, usize) {
    (
        shape[..dim].iter().product(),
        shape[dim],
        shape[dim + 1..].iter().product(),
    )
}

fn expect_count(op: &str, inputs: &[TensorMeta], n: usize) -> Result<()> {
    if inputs.len() != n {
        return Err(TensorError::invalid(
            op,
            format!("expected {n} inputs, got {}", inputs.len()),
        ));
    }
    Ok(())
}

fn expect_dim(op: &str, dim: usize, shape: &[usize]) -> Result<()> {
    if dim >= shape.len().max(1) {
        return Err(TensorError::invalid(
            op,
            format!("dimension {dim} is out of range for shape {shape:?}"),
        ));
    }
    Ok(())
}

fn expect_index_dtype(op: &str, index: &TensorMeta) -> Result<()> {
    if !matches!(index.dtype, DType::I64 | DType::I32) {
        return Err(TensorError::invalid(
            op,
            format!("index must be int64 or int32, got {}", index.dtype),
        ));
    }
    Ok(())
}

fn expect_same_dtype(op: &str, x: &TensorMeta, src: &TensorMeta) -> Result<()> {
    if x.dtype != src.dtype {
        return Err(TensorError::DTypeMismatch {
            op: op.into(),
            expected: x.dtype,
            got: src.dtype,
        });
    }
    Ok(())
}

/// Checks one index value against the size of the dimension it indexes.
fn checked_index(op: &str, value: i64, dim: usize, size: usize) -> Result<usize> {
    if value < 0 || value as u64 >= size as u64 {
        return Err(TensorError::invalid(
            op,
            format!("index {value} is out of bounds for dimension {dim} with size {size}"),
        ));
    }
    Ok(value as usize)
}

/// The index values of an i64/i32 tensor, each checked against `size`.
fn read_index(op: &str, index: &Tensor, dim: usize, size: usize) -> Result<Vec<usize>> {
    index
        .detach()
        .to_dtype(DType::I64)?
        .to_vec::<i64>()?
        .into_iter()
        .map(|v| checked_index(op, v, dim, size))
        .collect()
}

/// `gather`/`scatter_add` shape rule: `index` has the rank of `x` (and of `src`), fits in `src`
/// everywhere and in `x` away from `dim`.
fn check_scatter_shapes(
    op: &str,
    dim: usize,
    x: &[usize],
    index: &[usize],
    src: Option<&[usize]>,
) -> Result<()> {
    if index.len() != x.len() {
        return Err(TensorError::shapes(
            op,
            x,
            index,
            format!("index must have as many dimensions as the input (dim {dim})"),
        ));
    }
    let (x, index) = (padded(x), padded(index));
    if let Some(d) = (0..x.len()).find(|&d| d != dim && index[d] > x[d]) {
        return Err(TensorError::shapes(
            op,
            &x,
            &index,
            format!("index is larger than the input in dimension {d} (apart from dim {dim})"),
        ));
    }
    if let Some(src) = src {
        let src = padded(src);
        if src.len() != index.len() {
            return Err(TensorError::shapes(
                op,
                &index,
                &src,
                format!("index and src must have the same number of dimensions (dim {dim})"),
            ));
        }
        if let Some(d) = (0..src.len()).find(|&d| index[d] > src[d]) {
            return Err(TensorError::shapes(
                op,
                &index,
                &src,
                format!("index is larger than src in dimension {d} (dim {dim})"),
            ));
        }
    }
    Ok(())
}

/// Runs `$body` with `$T` bound to the element type of `$dtype` and `$add` to its addition
/// (wrapping for integers, `or` for bool).
macro_rules! add_dispatch {
    ($dtype:expr, $T:ident, $add:ident => $body:expr) => {
        match $dtype {
            DType::Bool => {
                type $T = bool;
                let $add = |a: bool, b: bool| a | b;
                $body
            }
            DType::U8 => {
                type $T = u8;
                let $add = u8::wrapping_add;
                $body
            }
            DType::I8 => {
                type $T = i8;
                let $add = i8::wrapping_add;
                $body
            }
            DType::I32 => {
                type $T = i32;
                let $add = i32::wrapping_add;
                $body
            }
            DType::I64 => {
                type $T = i64;
                let $add = i64::wrapping_add;
                $body
            }
            DType::F16 => {
                type $T = half::f16;
                let $add = |a: $T, b: $T| a + b;
                $body
            }
            DType::BF16 => {
                type $T = half::bf16;
                let $add = |a: $T, b: $T| a + b;
                $body
            }
            DType::F32 => {
                type $T = f32;
                let $add = |a: $T, b: $T| a + b;
                $body
            }
            DType::F64 => {
                type $T = f64;
                let $add = |a: $T, b: $T| a + b;
                $body
            }
        }
    };
}

/// Calls `f(position)` for every row-major position of `shape` (nothing when it is empty).
fn for_each_position(shape: &[usize], mut f: impl FnMut(&[usize])) {
    if shape.contains(&0) {
        return;
    }
    let mut pos = vec![0; shape.len()];
    loop {
        f(&pos);
        let mut d = shape.len();
        loop {
            if d == 0 {
                return;
            }
            d -= 1;
            pos[d] += 1;
            if pos[d] < shape[d] {
                break;
            }
            pos[d] = 0;
        }
    }
}

fn dot(pos: &[usize], strides: &[usize]) -> usize {
    pos.iter().zip(strides).map(|(p, s)| p * s).sum()
}

fn cat_kernel<T: StorageElement>(
    inputs: &[&Tensor],
    dim: usize,
    out_shape: &[usize],
) -> Result<Tensor> {
    let (outer, _, inner) = split_at_dim(out_shape, dim);
    let mut out = Vec::with_capacity(out_shape.iter().product());
    let parts: Vec<(Vec<T>, usize)> = inputs
        .iter()
        .filter(|t| !is_legacy_empty(&t.shape()) || is_legacy_empty(out_shape))
        .map(|t| Ok((t.to_vec::<T>()?, t.shape()[dim] * inner)))
        .collect::<Result<_>>()?;
    for o in 0..outer {
        for (data, block) in &parts {
            out.extend_from_slice(&data[o * block..(o + 1) * block]);
        }
    }
    Ok(tensor_from(out, out_shape))
}

fn index_select_kernel<T: StorageElement>(
    x: &Tensor,
    dim: usize,
    index: &[usize],
    out_shape: &[usize],
) -> Result<Tensor> {
    let (outer, n, inner) = split_at_dim(&padded(&x.shape()), dim);
    let data = x.to_vec::<T>()?;
    let mut out = Vec::with_capacity(outer * index.len() * inner);
    for o in 0..outer {
        for &i in index {
            let start = (o * n + i) * inner;
            out.extend_from_slice(&data[start..start + inner]);
        }
    }
    Ok(tensor_from(out, out_shape))
}

fn index_add_kernel<T: StorageElement>(
    x: &Tensor,
    dim: usize,
    index: &[usize],
    src: &Tensor,
    add: impl Fn(T, T) -> T,
) -> Result<Tensor> {
    let shape = x.shape();
    let (outer, n, inner) = split_at_dim(&padded(&shape), dim);
    let mut out = x.to_vec::<T>()?;
    let src = src.to_vec::<T>()?;
    let k = index.len();
    for o in 0..outer {
        for (j, &i) in index.iter().enumerate() {
            let (dst, from) = ((o * n + i) * inner, (o * k + j) * inner);
            for e in 0..inner {
                out[dst + e] = add(out[dst + e], src[from + e]);
            }
        }
    }
    Ok(tensor_from(out, &shape))
}

/// The storage positions of a gather/scatter: for each position `p` of `index`, the offset
/// of `p` in a tensor of `other_shape` and the offset of `p` with `p[dim] = index[p]` in `x`.
fn scatter_offsets(
    op: &str,
    dim: usize,
    x_shape: &[usize],
    index: &Tensor,
    other_shape: &[usize],
) -> Result<Vec<(usize, usize)>> {
    let x_shape = padded(x_shape);
    let values = index.detach().to_dtype(DType::I64)?.to_vec::<i64>()?;
    let (x_strides, other_strides) = (
        contiguous_strides(&x_shape),
        contiguous_strides(&padded(other_shape)),
    );
    let mut offsets = Vec::with_capacity(values.len());
    let mut error = None;
    let mut k = 0;
    for_each_position(&padded(&index.shape()), |pos| {
        if error.is_some() {
            return;
        }
        match checked_index(op, values[k], dim, x_shape[dim]) {
            Ok(i) => {
                let at_x = dot(pos, &x_strides) - pos[dim] * x_strides[dim] + i * x_strides[dim];
                offsets.push((dot(pos, &other_strides), at_x));
            }
            Err(e) => error = Some(e),
        }
        k += 1;
    });
    match error {
        Some(e) => Err(e),
        None => Ok(offsets),
    }
}

impl OpDef for IndexOp {
    op_identity!(name: op_name, attributes: variant, kind: Indexing);

    fn meta(&self, inputs: &[TensorMeta]) -> Result<Vec<TensorMeta>> {
        let op = self.op_name();
        match *self {
            IndexOp::Cat { dim } => {
                if inputs.is_empty() {
                    return Err(TensorError::invalid(
                        op,
                        "expected a non-empty list of tensors",
                    ));
                }
                let shapes: Vec<&[usize]> = inputs.iter().map(|m| m.shape.as_slice()).collect();
                let r = cat_reference(&shapes);
                let reference = shapes[r];
                if let Some(i) = shapes.iter().position(|s| s.is_empty()) {
                    return Err(TensorError::invalid(
                        op,
                        format!("zero-dimensional tensor (at position {i}) cannot be concatenated"),
                    ));
                }
                expect_dim(op, dim, reference)?;
                let mut out_shape = reference.to_vec();
                out_shape[dim] = 0;
                for (i, s) in shapes.iter().enumerate() {
                    if is_legacy_empty(s) && !is_legacy_empty(reference) {
                        continue;
                    }
                    let fits = s.len() == reference.len()
                        && (0..s.len()).all(|d| d == dim || s[d] == reference[d]);
                    if !fits {
                        return Err(TensorError::shapes(
                            op,
                            reference,
                            s,
                            format!(
                                "sizes of tensors must match except in dimension {dim}; tensor {i} differs from tensor {r}"
                            ),
                        ));
                    }
                    out_shape[dim] = out_shape[dim].checked_add(s[dim]).ok_or_else(|| {
                        TensorError::shapes(
                            op,
                            reference,
                            s,
                            "the joined size overflows".to_string(),
                        )
                    })?;
                }
                let dtype = inputs
                    .iter()
                    .map(|m| m.dtype)
                    .reduce(DType::promote)
                    .unwrap_or(DType::F32);
                Ok(vec![TensorMeta::new(out_shape, dtype)])
            }
            IndexOp::IndexSelect { dim } => {
                expect_count(op, inputs, 2)?;
                let (x, index) = (&inputs[0], &inputs[1]);
                expect_dim(op, dim, &x.shape)?;
                expect_index_dtype(op, index)?;
                if index.shape.len() > 1 {
                    return Err(TensorError::invalid(
                        op,
                        format!("index must be 1-D or 0-dim, got shape {:?}", index.shape),
                    ));
                }
                let shape = if x.shape.is_empty() {
                    if index.numel() != 1 {
                        return Err(TensorError::invalid(
                            op,
                            format!(
                                "a 0-dim input takes exactly one index, got {}",
                                index.numel()
                            ),
                        ));
                    }
                    vec![]
                } else {
                    let mut shape = x.shape.clone();
                    shape[dim] = index.numel();
                    shape
                };
                Ok(vec![TensorMeta::new(shape, x.dtype)])
            }
            IndexOp::IndexAdd { dim } => {
                expect_count(op, inputs, 3)?;
                let (x, index, src) = (&inputs[0], &inputs[1], &inputs[2]);
                expect_dim(op, dim, &x.shape)?;
                expect_index_dtype(op, index)?;
                expect_same_dtype(op, x, src)?;
                let mut expected = padded(&x.shape);
                expected[dim] = index.numel();
                if index.shape.len() > 1 || padded(&src.shape) != expected {
                    return Err(TensorError::shapes(
                        op,
                        &x.shape,
                        &src.shape,
                        format!(
                            "src must match the input except in dim {dim}, where it has one slice per index ({} indices, index shape {:?})",
                            index.numel(),
                            index.shape
                        ),
                    ));
                }
                Ok(vec![x.clone()])
            }
            IndexOp::Gather { dim } => {
                expect_count(op, inputs, 2)?;
                let (x, index) = (&inputs[0], &inputs[1]);
                expect_dim(op, dim, &x.shape)?;
                expect_index_dtype(op, index)?;
                check_scatter_shapes(op, dim, &x.shape, &index.shape, None)?;
                Ok(vec![TensorMeta::new(index.shape.clone(), x.dtype)])
            }
            IndexOp::ScatterAdd { dim } => {
                expect_count(op, inputs, 3)?;
                let (x, index, src) = (&inputs[0], &inputs[1], &inputs[2]);
                expect_dim(op, dim, &x.shape)?;
                expect_index_dtype(op, index)?;
                expect_same_dtype(op, x, src)?;
                check_scatter_shapes(op, dim, &x.shape, &index.shape, Some(&src.shape))?;
                Ok(vec![x.clone()])
            }
            IndexOp::OneHot { num_classes } => {
                expect_count(op, inputs, 1)?;
                let x = &inputs[0];
                if !x.dtype.is_int() {
                    return Err(TensorError::invalid(
                        op,
                        format!("class values must be an integer tensor, got {}", x.dtype),
                    ));
                }
                let mut shape = x.shape.clone();
                shape.push(num_classes);
                Ok(vec![TensorMeta::new(shape, DType::I64)])
            }
        }
    }

    fn cpu(&self, inputs: &[&Tensor]) -> Result<Vec<Tensor>> {
        let op = self.op_name();
        let metas: Vec<TensorMeta> = inputs.iter().map(|t| t.meta()).collect();
        let out = self.meta(&metas)?.remove(0);
        let x = inputs[0].detach();
        let dtype = out.dtype;
        let result = match *self {
            IndexOp::Cat { dim } => {
                let converted: Vec<Tensor> = inputs
                    .iter()
                    .map(|t| t.detach().to_dtype(dtype))
                    .collect::<Result<_>>()?;
                let refs: Vec<&Tensor> = converted.iter().collect();
                any_dispatch!(dtype, T => cat_kernel::<T>(&refs, dim, &out.shape)?)
            }
            IndexOp::IndexSelect { dim } => {
                let size = padded(&x.shape())[dim];
                let index = read_index(op, inputs[1], dim, size)?;
                any_dispatch!(dtype, T => index_select_kernel::<T>(&x, dim, &index, &out.shape)?)
            }
            IndexOp::IndexAdd { dim } => {
                let size = padded(&x.shape())[dim];
                let index = read_index(op, inputs[1], dim, size)?;
                add_dispatch!(dtype, T, add => index_add_kernel::<T>(&x, dim, &index, inputs[2], add)?)
            }
            IndexOp::Gather { dim } => {
                let offsets = scatter_offsets(op, dim, &x.shape(), inputs[1], &out.shape)?;
                any_dispatch!(dtype, T => {
                    let data = x.to_vec::<T>()?;
                    let values: Vec<T> = offsets.iter().map(|&(_, at_x)| data[at_x]).collect();
                    tensor_from(values, &out.shape)
                })
            }
            IndexOp::ScatterAdd { dim } => {
                let src = inputs[2].detach();
                let offsets = scatter_offsets(op, dim, &x.shape(), inputs[1], &src.shape())?;
                add_dispatch!(dtype, T, add => {
                    let mut data = x.to_vec::<T>()?;
                    let values = src.to_vec::<T>()?;
                    for &(at_src, at_x) in &offsets {
                        data[at_x] = add(data[at_x], values[at_src]);
                    }
                    tensor_from(data, &out.shape)
                })
            }
            IndexOp::OneHot { num_classes } => {
                let classes = x.to_dtype(DType::I64)?.to_vec::<i64>()?;
                let last = x.ndim();
                let mut data = vec![0i64; classes.len() * num_classes];
                for (row, &c) in classes.iter().enumerate() {
                    let c = checked_index(op, c, last, num_classes).map_err(|_| {
                        TensorError::invalid(
                            op,
                            format!("class value {c} is out of range for {num_classes} classes"),
                        )
                    })?;
                    data[row * num_classes + c] = 1;
                }
                tensor_from(data, &out.shape)
            }
        };
        Ok(vec![result])
    }

    fn backward(&self, cx: &BackwardCtx) -> Result<Vec<Option<Tensor>>> {
        let g = cx.grad(0)?;
        let float = |i: usize| cx.needs[i] && cx.inputs[i].dtype().is_float();
        let in_dtype = |t: Tensor, i: usize| -> Result<Tensor> {
            let dtype = cx.inputs[i].dtype();
            if t.dtype() == dtype {
                Ok(t)
            } else {
                t.to_dtype(dtype)
            }
        };
        Ok(match *self {
            IndexOp::Cat { dim } => {
                let out_shape = g.shape();
                let mut start = 0;
                let mut grads = Vec::with_capacity(cx.inputs.len());
                for (i, x) in cx.inputs.iter().enumerate() {
                    let shape = x.shape();
                    if is_legacy_empty(&shape) && !is_legacy_empty(&out_shape) {
                        grads.push(
                            float(i)
                                .then(|| super::zeros(&shape, x.dtype()))
                                .transpose()?,
                        );
                        continue;
                    }
                    let len = shape[dim];
                    grads.push(if float(i) {
                        Some(in_dtype(g.narrow(dim as isize, start, len)?, i)?)
                    } else {
                        None
                    });
                    start += len;
                }
                grads
            }
            IndexOp::IndexSelect { dim } => {
                let x = &cx.inputs[0];
                let gx = if float(0) {
                    let zeros = super::zeros(&padded(&x.shape()), g.dtype())?;
                    let g = g.reshape(&padded(&g.shape()))?;
                    Some(
                        zeros
                            .index_add(dim as isize, &cx.inputs[1], &g)?
                            .reshape(&x.shape())?,
                    )
                } else {
                    None
                };
                vec![gx, None]
            }
            IndexOp::IndexAdd { dim } => {
                let gsrc = if float(2) {
                    let src_shape = cx.inputs[2].shape();
                    let g = g.reshape(&padded(&g.shape()))?;
                    Some(
                        g.index_select(dim as isize, &cx.inputs[1])?
                            .reshape(&src_shape)?,
                    )
                } else {
                    None
                };
                vec![float(0).then_some(g), None, gsrc]
            }
            IndexOp::Gather { dim } => {
                let x = &cx.inputs[0];
                let gx = if float(0) {
                    let zeros = super::zeros(&x.shape(), g.dtype())?;
                    Some(zeros.scatter_add(dim as isize, &cx.inputs[1], &g)?)
                } else {
                    None
                };
                vec![gx, None]
            }
            IndexOp::ScatterAdd { dim } => {
                let gsrc = if float(2) {
                    let (index, src) = (&cx.inputs[1], &cx.inputs[2]);
                    let picked = g.gather(dim as isize, index)?;
                    // `picked` fills the leading corner of the index's shape; the rest of
                    // `src` received nothing.
                    let mut grad = picked;
                    for (d, (&n, &full)) in index.shape().iter().zip(&src.shape()).enumerate() {
                        grad = super::view::zero_padded(&grad, d, 0, full - n)?;
                    }
                    Some(grad)
                } else {
                    None
                };
                vec![float(0).then_some(g), None, gsrc]
            }
            IndexOp::OneHot { .. } => vec![None],
        })
    }

    fn output_is_differentiable(&self, _index: usize) -> bool {
        !matches!(self, IndexOp::OneHot { .. })
    }

    fn computes_half_in_f32(&self) -> bool {
        false
    }
}
