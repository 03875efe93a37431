//! Lowering of the scatter-adds (`embedding_backward`, `index_add`, `scatter_add`) in their
//! inverted, deterministic form: one kernel over the *output*, each element a reduction loop
//! over the source rows that adds the rows whose index equals the element's coordinate
//! (`index == loop index ? src : 0`). No two points write the same element, so there are no
//! atomics and the result does not depend on thread count or launch order; the reduction adds
//! the matching rows in source order, as the eager kernels do, in the output's type. The
//! source row is read by a gather checked against the scattered dim, so a bad index faults the
//! kernel's status buffer and the run fails with [`crate::KernelError::IndexOutOfRange`]
//! naming the kernel, the index and the dim's size (nothing is written out of bounds: every
//! store is one element of the output). The work is `output elements x source rows`: cheap
//! for the vocabularies and gradients of small models, quadratic for large ones.
//!
//! `embedding_backward` starts from zero, so it is the eager result bit for bit;
//! `index_add` and `scatter_add` add the rows' sum to `x` (`x + (a + b)` where eager computes
//! `(x + a) + b`), equal to eager's where no element receives two rows and within rounding
//! otherwise. What the lowering does not cover (i32 indices, other than f32/f64 values, a
//! `scatter_add` whose index is narrower than `x` along a dim other than `dim`, an empty
//! `index_add`/`scatter_add` output with a non-empty index, whose indices eager still checks)
//! runs the eager kernel, reported as a fallback; an empty `embedding_backward` checks its
//! indices against the weight's rows in a check kernel (`index_check.rs`). A 0-d input,
//! index or source of `index_add`/`scatter_add` is one element of one dim, as eager pads it.

use super::gather::IndexKernel;
use super::{Lowering, Val, at_least_one_dim};
use crate::{
    BinaryFn, CompareFn, Expr, KernelBuilder, LoopId, ReduceFn, Result, ScalarType, ValueId,
};
use tessera_fx::NodeId;
use tessera_tensor::op::{EmbeddingBackwardOp, IndexOp};
use tessera_tensor::{DType, Op};

/// The sum over the reduction loops of `src` where the i64 `index` equals the coordinate of
/// output loop `coordinate` (and, with `skip`, is not `skip`), in `ty`.
fn matching_sum(
    k: &mut IndexKernel,
    ty: ScalarType,
    index: ValueId,
    coordinate: usize,
    src: ValueId,
    skip: Option<i64>,
) -> ValueId {
    let at = k.b.push(
        ScalarType::I64,
        Expr::LoopIndex(LoopId::from_index(coordinate)),
    );
    let hit =
        k.b.push(ScalarType::Bool, Expr::Compare(CompareFn::Eq, index, at));
    let zero = k.constant(ty, 0.0);
    let mut picked = k.b.push(
        ty,
        Expr::Select {
            cond: hit,
            a: src,
            b: zero,
        },
    );
    if let Some(skip) = skip {
        let skip = k.constant(ScalarType::I64, skip as f64);
        let skipped =
            k.b.push(ScalarType::Bool, Expr::Compare(CompareFn::Eq, index, skip));
        picked = k.b.push(
            ty,
            Expr::Select {
                cond: skipped,
                a: zero,
                b: picked,
            },
        );
    }
    k.b.push(ty, Expr::Reduce(ReduceFn::Sum, picked))
}

impl Lowering<'_> {
    /// Lowers an `embedding_backward`, `index_add` or `scatter_add` node, or runs its eager
    /// kernel (reported as a fallback) when the kernel IR cannot express it.
    pub(super) fn scatter(&mut self, id: &NodeId, op: &Op) -> Result<()> {
        let kernel = self.scatter_kernel(id, op)?;
        self.value_or_fallback(id, op, kernel)
    }

    fn scatter_kernel(&mut self, id: &NodeId, op: &Op) -> Result<std::result::Result<Val, String>> {
        let operands = self
            .operands(id)?
            .iter()
            .map(|o| self.value(o))
            .collect::<Result<Vec<_>>>()?;
        let Some(meta) = self.meta(id)?.first().cloned() else {
            return Ok(Err("the node has no value".into()));
        };
        let Some(ty) = ScalarType::of_buffer(meta.dtype).filter(|t| t.is_arithmetic()) else {
            return Ok(Err(format!("{:?} values", meta.dtype)));
        };
        let Some(index) = operands.get(1) else {
            return Ok(Err("the node has no index".into()));
        };
        if self.program.slot(index.slot).meta.dtype != DType::I64 {
            return Ok(Err("indices of another dtype than i64".into()));
        }
        // `index_add` and `scatter_add` treat a 0-d input, index or source as one element of
        // one dim, as eager does: the kernel runs over that dim and stores the one element.
        let (operands, out) = match op {
            Op::Index(_) => (
                operands.iter().map(at_least_1d).collect(),
                at_least_one_dim(&meta.shape),
            ),
            _ => (operands, meta.shape.clone()),
        };
        let Some(index) = operands.get(1) else {
            return Ok(Err("the node has no index".into()));
        };
        let name = format!("k{}_{}", self.kernel_count(), op.name());
        let rank = out.len();
        let plan = match op {
            Op::EmbeddingBackward(e) => embedding_plan(e, &operands, &out),
            Op::Index(IndexOp::IndexAdd { dim }) => index_add_plan(*dim, &operands, &out),
            Op::Index(IndexOp::ScatterAdd { dim }) => scatter_add_plan(*dim, &operands, &out),
            _ => Err("not a scatter-add".into()),
        };
        let plan = match plan {
            Ok(p) => p,
            Err(why) => return Ok(Err(why)),
        };
        if out.contains(&0) && !index.layout.shape.contains(&0) {
            // Nothing is written, but eager checks the indices: an embedding gradient checks
            // them against the weight's rows.
            if !matches!(op, Op::EmbeddingBackward(_)) {
                return Ok(Err(
                    "an empty output with indices to check (the eager kernel checks them)".into(),
                ));
            }
            let (index, rows) = (index.clone(), out[plan.dim]);
            let check = self.index_check(id, &index, rows, |_, element| element)?;
            return self.empty_after_check(id, &check, meta);
        }
        let mut k = IndexKernel::new(KernelBuilder::reduction(name, out.clone(), plan.rows));
        let by = k.load(index, ScalarType::I64, &plan.index_map);
        let src = k.checked_load(&plan.src, ty, &plan.src_map, by, out[plan.dim]);
        let sum = matching_sum(&mut k, ty, by, plan.dim, src, plan.skip);
        let value = match &plan.base {
            Some(x) => {
                let map: Vec<Option<usize>> = (0..rank).map(Some).collect();
                let x = k.load(x, ty, &map);
                k.b.push(ty, Expr::Binary(BinaryFn::Add, x, sum))
            }
            None => sum,
        };
        Ok(Ok(self.finish_index_kernel(id, k, value, meta)?))
    }
}

/// `v` seen as one element of one dim when it is 0-d.
fn at_least_1d(v: &Val) -> Val {
    let mut v = v.clone();
    if v.layout.shape.is_empty() {
        v.layout.shape = vec![1];
        v.layout.strides = vec![0];
    }
    v
}

/// How a scatter-add is read: over output loops `0..rank` then reduction loops `rows`, the
/// index walks `index_map`, the source `src` walks `src_map` (its scattered rows checked
/// against output dim `dim`), the rows whose index is `skip` add nothing, and the sum is
/// added to `base` when there is one.
struct ScatterPlan {
    rows: Vec<usize>,
    dim: usize,
    index_map: Vec<Option<usize>>,
    src: Val,
    src_map: Vec<Option<usize>>,
    base: Option<Val>,
    skip: Option<i64>,
}

/// `out[r, j] = sum over k with index[k] == r (and r != padding) of grad[k, j]`.
fn embedding_plan(
    op: &EmbeddingBackwardOp,
    operands: &[Val],
    out: &[usize],
) -> std::result::Result<ScatterPlan, String> {
    let [grad, index] = operands else {
        return Err("embedding_backward takes a gradient and indices".into());
    };
    if out.len() != 2 || grad.layout.shape.len() != index.layout.shape.len() + 1 {
        return Err("a shape the scatter lowering does not cover".into());
    }
    let k = index.layout.shape.len();
    let index_map: Vec<Option<usize>> = (0..k).map(|d| Some(2 + d)).collect();
    let mut src_map = index_map.clone();
    src_map.push(Some(1));
    Ok(ScatterPlan {
        rows: at_least_one_dim(&index.layout.shape),
        dim: 0,
        index_map,
        src: grad.clone(),
        src_map,
        base: None,
        skip: op.padding_idx.map(|p| p as i64),
    })
}

/// `out[.., i, ..] = x[.., i, ..] + sum over k with index[k] == i of src[.., k, ..]`.
fn index_add_plan(
    dim: usize,
    operands: &[Val],
    out: &[usize],
) -> std::result::Result<ScatterPlan, String> {
    let [x, index, src] = operands else {
        return Err("index_add takes an input, an index and a source".into());
    };
    let rank = out.len();
    if rank == 0 || dim >= rank || index.layout.shape.len() != 1 || src.layout.shape.len() != rank {
        return Err("a shape the scatter lowering does not cover".into());
    }
    let mut src_map: Vec<Option<usize>> = (0..rank).map(Some).collect();
    src_map[dim] = Some(rank);
    Ok(ScatterPlan {
        rows: index.layout.shape.clone(),
        dim,
        index_map: vec![Some(rank)],
        src: src.clone(),
        src_map,
        base: Some(x.clone()),
        skip: None,
    })
}

/// `out[p] = x[p] + sum over k with index[p with p[dim] = k] == p[dim] of src[same]`, for an
/// index as wide as `x` along every other dim.
fn scatter_add_plan(
    dim: usize,
    operands: &[Val],
    out: &[usize],
) -> std::result::Result<ScatterPlan, String> {
    let [x, index, src] = operands else {
        return Err("scatter_add takes an input, an index and a source".into());
    };
    let rank = out.len();
    let ishape = &index.layout.shape;
    if rank == 0 || dim >= rank || ishape.len() != rank || src.layout.shape.len() != rank {
        return Err("a shape the scatter lowering does not cover".into());
    }
    if (0..rank).any(|d| d != dim && ishape[d] != out[d]) {
        return Err("an index narrower than the input along a dim it does not scatter".into());
    }
    let mut map: Vec<Option<usize>> = (0..rank).map(Some).collect();
    map[dim] = Some(rank);
    Ok(ScatterPlan {
        rows: vec![ishape[dim]],
        dim,
        index_map: map.clone(),
        src: src.clone(),
        src_map: map,
        base: Some(x.clone()),
        skip: None,
    })
}
