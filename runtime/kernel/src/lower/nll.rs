//! Lowering of the negative log-likelihood ([`LossOp::Nll`]) and its gradient
//! ([`LossOp::NllBackward`]) over log-probabilities `[N, C, d...]` (or `[C]`) and i64 class
//! targets. Each sample's log-probability is a gather by its target ([`IndexKernel::gather`]),
//! the target replaced by 0 where it is `ignore_index` (so an ignored sample reads nothing and
//! faults nothing) and checked against `C` elsewhere. The loss is computed in f64 and rounded
//! once per sample, as the eager kernel; `sum` and `mean` add the rounded losses and count the
//! samples not ignored in f64 in the same kernel (reduction loops over the samples), so the
//! result is the eager one bit for bit. Label smoothing's sum over the classes is a reduction
//! loop; with `sum` or `mean` (two nested sums) a second kernel adds the per-sample losses
//! the first stores. The gradient is one kernel over the input, `coeff * upstream` with the coefficient
//! picked by comparing the class loop's index with the target; for `mean` a first kernel
//! divides the upstream gradient by the count. An input with no classes reads nothing: its
//! targets are checked as eager checks them (`index_check.rs`), the loss is 0 per sample (NaN
//! averaged over no samples) and the gradient empty.

use super::gather::IndexKernel;
use super::index_check::classless_target;
use super::{Lowering, at_least_one_dim};
use crate::{BinaryFn, CompareFn, Expr, KernelBuilder, ReduceFn, Result, ScalarType};
use crate::{LoopId, ValueId};
use tessera_fx::NodeId;
use tessera_tensor::op::{LossOp, Reduction};
use tessera_tensor::{DType, Op, TensorMeta};

/// The attributes both directions share.
#[derive(Debug, Clone, Copy)]
struct Nll {
    reduction: Reduction,
    ignore_index: i64,
    label_smoothing: f64,
}

/// The operands' values, the output's meta and the type it computes in.
type NllOperands = (Vec<super::Val>, TensorMeta, ScalarType);

impl Nll {
    fn of(op: &LossOp) -> Option<(Nll, bool)> {
        match *op {
            LossOp::Nll {
                reduction,
                ignore_index,
                label_smoothing,
            }
            | LossOp::NllBackward {
                reduction,
                ignore_index,
                label_smoothing,
            } => Some((
                Nll {
                    reduction,
                    ignore_index,
                    label_smoothing,
                },
                matches!(op, LossOp::NllBackward { .. }),
            )),
            _ => None,
        }
    }
}

/// The loops the input's dims walk: the class dim `class`, the sample dims `samples` (the
/// target's dims, in order).
fn input_map(rank: usize, samples: &[Option<usize>], class: Option<usize>) -> Vec<Option<usize>> {
    match rank {
        1 => vec![class],
        _ => {
            let mut m = vec![samples.first().copied().flatten(), class];
            m.extend(samples.iter().skip(1).copied());
            m
        }
    }
}

/// A sample's target, whether it is ignored, and the target made safe to gather by (0 where
/// ignored).
struct Target {
    value: ValueId,
    ignored: ValueId,
    safe: ValueId,
}

fn read_target(
    k: &mut IndexKernel,
    t: &super::Val,
    samples: &[Option<usize>],
    ignore: i64,
) -> Target {
    let value = k.load(t, ScalarType::I64, samples);
    let ii = k.constant(ScalarType::I64, ignore as f64);
    let ignored =
        k.b.push(ScalarType::Bool, Expr::Compare(CompareFn::Eq, value, ii));
    let zero = k.constant(ScalarType::I64, 0.0);
    let safe = k.b.push(
        ScalarType::I64,
        Expr::Select {
            cond: ignored,
            a: zero,
            b: value,
        },
    );
    Target {
        value,
        ignored,
        safe,
    }
}

fn f64_of(k: &mut IndexKernel, v: ValueId) -> ValueId {
    if k.b.ty(v) == ScalarType::F64 {
        v
    } else {
        k.b.push(ScalarType::F64, Expr::Cast(v))
    }
}

fn bin(k: &mut IndexKernel, f: BinaryFn, a: ValueId, b: ValueId) -> ValueId {
    k.b.push(ScalarType::F64, Expr::Binary(f, a, b))
}

/// `ignored ? 0 : x` in `x`'s type.
fn unless_ignored(k: &mut IndexKernel, ignored: ValueId, x: ValueId) -> ValueId {
    let ty = k.b.ty(x);
    let zero = k.constant(ty, 0.0);
    k.b.push(
        ty,
        Expr::Select {
            cond: ignored,
            a: zero,
            b: x,
        },
    )
}

/// `LossOp::reduce` of the rounded per-sample `loss` (of type `ty`) over the reduction loops:
/// added in f64, divided by the samples not ignored for a mean, rounded once to `ty`.
fn total(
    k: &mut IndexKernel,
    loss: ValueId,
    ignored: ValueId,
    reduction: Reduction,
    ty: ScalarType,
) -> ValueId {
    let wide = f64_of(k, loss);
    let sum = k.b.push(ScalarType::F64, Expr::Reduce(ReduceFn::Sum, wide));
    let value = match reduction {
        Reduction::Mean => {
            let one = k.constant(ScalarType::F64, 1.0);
            let counted = unless_ignored(k, ignored, one);
            let count =
                k.b.push(ScalarType::F64, Expr::Reduce(ReduceFn::Sum, counted));
            bin(k, BinaryFn::Div, sum, count)
        }
        _ => sum,
    };
    k.b.push(ty, Expr::Cast(value))
}

impl Lowering<'_> {
    /// Lowers an nll or nll-backward node, or runs its eager kernel (reported as a fallback)
    /// when the kernel IR cannot express it.
    pub(super) fn nll(&mut self, id: &NodeId, op: &LossOp) -> Result<()> {
        let outcome = match Nll::of(op) {
            Some((nll, false)) => self.nll_forward(id, nll)?,
            Some((nll, true)) => self.nll_backward(id, nll)?,
            None => Err("not a negative log-likelihood".into()),
        };
        self.value_or_fallback(id, &Op::Loss(op.clone()), outcome)
    }

    /// The operands' values and the output's meta and type, when the lowering covers them.
    fn nll_operands(&self, id: &NodeId) -> Result<std::result::Result<NllOperands, String>> {
        let operands = self
            .operands(id)?
            .iter()
            .map(|o| self.value(o))
            .collect::<Result<Vec<_>>>()?;
        let Some(meta) = self.meta(id)?.first().cloned() else {
            return Ok(Err("the node has no value".into()));
        };
        let Some(ty) = ScalarType::of_buffer(meta.dtype).filter(|t| t.is_arithmetic()) else {
            return Ok(Err(format!("{:?} log-probabilities", meta.dtype)));
        };
        match operands.last() {
            Some(t) if self.program.slot(t.slot).meta.dtype == DType::I64 => {
                Ok(Ok((operands, meta, ty)))
            }
            _ => Ok(Err("targets of another dtype than i64".into())),
        }
    }

    fn nll_forward(
        &mut self,
        id: &NodeId,
        nll: Nll,
    ) -> Result<std::result::Result<super::Val, String>> {
        let (operands, meta, ty) = match self.nll_operands(id)? {
            Ok(o) => o,
            Err(why) => return Ok(Err(why)),
        };
        let [x, t] = &operands[..] else {
            return Ok(Err("nll takes an input and a target".into()));
        };
        let (rank, classes) = (x.layout.shape.len(), x.layout.shape.get(1).copied());
        let classes = if rank == 1 {
            x.layout.shape[0]
        } else {
            classes.unwrap_or(0)
        };
        let class_dim = usize::from(rank > 1);
        if classes == 0 {
            return Ok(Ok(self.nll_without_classes(id, nll, t, meta, ty)?));
        }
        let sample_shape = t.layout.shape.clone();
        let s = nll.label_smoothing;
        let smooth = s / classes.max(1) as f64;
        let reduced = nll.reduction != Reduction::None;
        // With smoothing, a sum or mean adds the rounded per-sample losses in a second kernel.
        let two_kernels = reduced && smooth != 0.0;
        let name = format!("k{}_nll_loss", self.kernel_count());
        let (domain, reduce) = match (reduced && !two_kernels, smooth != 0.0) {
            (true, _) => (vec![], at_least_one_dim(&sample_shape)),
            (false, true) => (sample_shape.clone(), vec![classes]),
            (false, false) => (sample_shape.clone(), vec![]),
        };
        let mut k = IndexKernel::new(KernelBuilder::reduction(name, domain, reduce));
        let samples: Vec<Option<usize>> = (0..sample_shape.len()).map(Some).collect();
        let target = read_target(&mut k, t, &samples, nll.ignore_index);
        // `LossOp::nll`: -(1 - s) * lp[t] - s / C * sum_c lp[c], in f64.
        let map = input_map(rank, &samples, None);
        let picked = k.gather(x, ty, &map, class_dim, target.safe);
        let picked = f64_of(&mut k, picked);
        let scale = k.constant(ScalarType::F64, -(1.0 - s));
        let mut loss = bin(&mut k, BinaryFn::Mul, scale, picked);
        if smooth != 0.0 {
            let every = input_map(rank, &samples, Some(sample_shape.len()));
            let lp = k.load(x, ty, &every);
            let lp = f64_of(&mut k, lp);
            let total = k.b.push(ScalarType::F64, Expr::Reduce(ReduceFn::Sum, lp));
            let smooth = k.constant(ScalarType::F64, smooth);
            let smoothed = bin(&mut k, BinaryFn::Mul, smooth, total);
            loss = bin(&mut k, BinaryFn::Sub, loss, smoothed);
        }
        let loss = k.b.push(ty, Expr::Cast(loss));
        let loss = unless_ignored(&mut k, target.ignored, loss);
        if two_kernels {
            let per_sample = TensorMeta::new(sample_shape.clone(), meta.dtype);
            let losses = self.finish_index_kernel(id, k, loss, per_sample)?;
            let name = format!("k{}_nll_loss_total", self.kernel_count());
            let mut k = IndexKernel::new(KernelBuilder::reduction(
                name,
                vec![],
                at_least_one_dim(&sample_shape),
            ));
            let target = read_target(&mut k, t, &samples, nll.ignore_index);
            let loss = k.load(&losses, ty, &samples);
            let value = total(&mut k, loss, target.ignored, nll.reduction, ty);
            return Ok(Ok(self.finish_index_kernel(id, k, value, meta)?));
        }
        let value = if reduced {
            total(&mut k, loss, target.ignored, nll.reduction, ty)
        } else {
            loss
        };
        Ok(Ok(self.finish_index_kernel(id, k, value, meta)?))
    }

    fn nll_backward(
        &mut self,
        id: &NodeId,
        nll: Nll,
    ) -> Result<std::result::Result<super::Val, String>> {
        let (operands, meta, ty) = match self.nll_operands(id)? {
            Ok(o) => o,
            Err(why) => return Ok(Err(why)),
        };
        let [g, x, t] = &operands[..] else {
            return Ok(Err(
                "nll_loss_backward takes a gradient, an input and a target".into(),
            ));
        };
        let shape = x.layout.shape.clone();
        let rank = shape.len();
        let class_dim = usize::from(rank > 1);
        let classes = shape.get(class_dim).copied().unwrap_or(0);
        if classes == 0 {
            // The gradient is empty; the targets are checked all the same.
            let ignore = nll.ignore_index;
            let check = self.index_check(id, t, 1, |k, target| {
                let ii = k.constant(ScalarType::I64, ignore as f64);
                let ignored =
                    k.b.push(ScalarType::Bool, Expr::Compare(CompareFn::Eq, target, ii));
                classless_target(k, target, ignored)
            })?;
            return self.empty_after_check(id, &check, meta);
        }
        let samples: Vec<Option<usize>> = match rank {
            1 => vec![],
            _ => std::iter::once(0).chain(2..rank).map(Some).collect(),
        };
        // For a mean, the upstream gradient over the count first, in f64.
        let (upstream, up_map) = match nll.reduction {
            Reduction::Mean => (self.nll_mean_scale(id, g, t, nll)?, vec![]),
            Reduction::Sum => (g.clone(), vec![]),
            Reduction::None => (g.clone(), samples.clone()),
        };
        let up_ty = match nll.reduction {
            Reduction::Mean => ScalarType::F64,
            _ => ty,
        };
        let name = format!("k{}_nll_loss_backward", self.kernel_count());
        let mut k = IndexKernel::new(KernelBuilder::new(name, shape.clone()));
        let target = read_target(&mut k, t, &samples, nll.ignore_index);
        // The upstream gradient, read where the target is a class (the target's check).
        let up = k.checked_load(&upstream, up_ty, &up_map, target.safe, classes);
        let up = f64_of(&mut k, up);
        // `LossOp::nll_backward`: coeff = -s / C, less (1 - s) at the target's class.
        let s = nll.label_smoothing;
        let smooth = s / classes.max(1) as f64;
        let mut at_target = -smooth;
        at_target -= 1.0 - s;
        let class = k.b.push(
            ScalarType::I64,
            Expr::LoopIndex(LoopId::from_index(class_dim)),
        );
        let hit = k.b.push(
            ScalarType::Bool,
            Expr::Compare(CompareFn::Eq, target.value, class),
        );
        let (on, off) = (
            k.constant(ScalarType::F64, at_target),
            k.constant(ScalarType::F64, -smooth),
        );
        let coeff = k.b.push(
            ScalarType::F64,
            Expr::Select {
                cond: hit,
                a: on,
                b: off,
            },
        );
        let grad = bin(&mut k, BinaryFn::Mul, coeff, up);
        let grad = k.b.push(ty, Expr::Cast(grad));
        let value = unless_ignored(&mut k, target.ignored, grad);
        Ok(Ok(self.finish_index_kernel(id, k, value, meta)?))
    }

    /// The loss of an input with no classes: every target is ignored (a loss of 0, summed,
    /// or averaged over no samples to NaN, as eager) or out of range, which faults the
    /// kernel (checked by [`classless_target`]) as eager fails.
    fn nll_without_classes(
        &mut self,
        id: &NodeId,
        nll: Nll,
        t: &super::Val,
        meta: TensorMeta,
        ty: ScalarType,
    ) -> Result<super::Val> {
        let sample_shape = t.layout.shape.clone();
        let reduced = nll.reduction != Reduction::None;
        let (domain, reduce) = match reduced {
            true => (vec![], at_least_one_dim(&sample_shape)),
            false => (sample_shape.clone(), vec![]),
        };
        let name = format!("k{}_nll_loss", self.kernel_count());
        let mut k = IndexKernel::new(KernelBuilder::reduction(name, domain, reduce));
        let samples: Vec<Option<usize>> = (0..sample_shape.len()).map(Some).collect();
        let target = read_target(&mut k, t, &samples, nll.ignore_index);
        let by = classless_target(&mut k, target.value, target.ignored);
        let checked = k.checked_load(t, ScalarType::I64, &samples, by, 1);
        let loss = k.b.push(ty, Expr::Cast(checked));
        let loss = unless_ignored(&mut k, target.ignored, loss);
        let value = match reduced {
            true => total(&mut k, loss, target.ignored, nll.reduction, ty),
            false => loss,
        };
        self.finish_index_kernel(id, k, value, meta)
    }

    /// A kernel over no loops storing `g / count` in f64, the count the targets that are not
    /// ignored (summed over reduction loops over the samples); its slot.
    fn nll_mean_scale(
        &mut self,
        id: &NodeId,
        g: &super::Val,
        t: &super::Val,
        nll: Nll,
    ) -> Result<super::Val> {
        let samples = t.layout.shape.clone();
        let name = format!("k{}_nll_loss_backward_scale", self.kernel_count());
        let mut k = IndexKernel::new(KernelBuilder::reduction(
            name,
            vec![],
            at_least_one_dim(&samples),
        ));
        let sample_loops: Vec<Option<usize>> = (0..samples.len()).map(Some).collect();
        let target = read_target(&mut k, t, &sample_loops, nll.ignore_index);
        let one = k.constant(ScalarType::F64, 1.0);
        let counted = unless_ignored(&mut k, target.ignored, one);
        let count =
            k.b.push(ScalarType::F64, Expr::Reduce(ReduceFn::Sum, counted));
        let g_ty =
            ScalarType::of_buffer(self.program.slot(g.slot).meta.dtype).unwrap_or(ScalarType::F32);
        let up = k.load(g, g_ty, &[]);
        let up = f64_of(&mut k, up);
        let scale = bin(&mut k, BinaryFn::Div, up, count);
        self.finish_index_kernel(
            id,
            k,
            scale,
            TensorMeta::new(Vec::<usize>::new(), DType::F64),
        )
    }
}
