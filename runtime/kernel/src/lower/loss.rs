//! Lowering of the elementwise losses (`mse_loss`, `l1_loss`, `binary_cross_entropy` and
//! `binary_cross_entropy_with_logits`, f32 and f64) into one kernel each. The per-element loss
//! is computed as the eager kernel computes it, operation for operation in the input's dtype;
//! with `reduction=None` the kernel is elementwise over the input, with `sum` or `mean` it is
//! one reduction over every element into a 0-dim result, the per-element losses summed in f64
//! (as the eager kernel sums them) and the sum (divided by the count for `mean`) rounded once
//! to the dtype. `nll_loss` reads its input at class indices and is not lowered here.

use super::Lowering;
use super::frame::{Frame, FrameMap, Local};
use crate::{
    BinaryFn, CompareFn, Expr, KernelBuilder, ReduceFn, Result, ScalarType, UnaryFn, ValueId,
};
use std::collections::HashSet;
use tessera_fx::NodeId;
use tessera_tensor::Op;
use tessera_tensor::op::{LossOp, Reduction};

/// PyTorch's floor on each log term of `binary_cross_entropy` (the eager kernel's).
const BCE_LOG_FLOOR: f64 = -100.0;

/// The reduction of `op` when it is a loss this lowering generates.
pub(super) fn elementwise_loss(op: &Op) -> Option<Reduction> {
    match op {
        Op::Loss(
            LossOp::Mse { reduction }
            | LossOp::L1 { reduction }
            | LossOp::Bce { reduction }
            | LossOp::BceWithLogits { reduction, .. },
        ) => Some(*reduction),
        _ => None,
    }
}

impl Lowering<'_> {
    /// Lowers loss node `id` to one kernel, or runs its eager kernel (reported as a fallback)
    /// when the kernel IR cannot express it.
    pub(super) fn loss(&mut self, id: &NodeId, op: &Op) -> Result<()> {
        if let Err(why) = self.loss_kernel(id, op)? {
            self.not_generated(id, op, &why)?;
        }
        Ok(())
    }

    fn loss_kernel(&mut self, id: &NodeId, op: &Op) -> Result<std::result::Result<(), String>> {
        let (Some(reduction), Op::Loss(loss)) = (elementwise_loss(op), op) else {
            return Ok(Err("not an elementwise loss".into()));
        };
        let operands = self.operands(id)?;
        let Some(input) = operands.first() else {
            return Ok(Err("the loss has no input".into()));
        };
        let Some(shape) = self.meta(input)?.first().map(|m| m.shape.clone()) else {
            return Ok(Err("the input has no value".into()));
        };
        let Some(out) = self.meta(id)?.first().cloned() else {
            return Ok(Err("the loss has no value".into()));
        };
        let Some(ty) = ScalarType::of_buffer(out.dtype).filter(|t| t.is_arithmetic()) else {
            return Ok(Err(format!("{:?} losses are not lowered", out.dtype)));
        };
        let nd = shape.len();
        // Dim `d` of the input walks loop `d`: the output loops without a reduction, the
        // reduction loops with one.
        let map: FrameMap = (0..nd).map(Some).collect();
        let name = format!("k{}_{}", self.kernel_count(), op.name());
        let builder = match reduction {
            Reduction::None => KernelBuilder::reduction(name, shape.clone(), Vec::new()),
            // A 0-dim input is one reduction loop of one element.
            Reduction::Mean | Reduction::Sum if nd == 0 => {
                KernelBuilder::reduction(name, Vec::new(), vec![1])
            }
            Reduction::Mean | Reduction::Sum => {
                KernelBuilder::reduction(name, Vec::new(), shape.clone())
            }
        };
        let mut k = Frame::new(builder);
        let mut loaded = Vec::with_capacity(operands.len());
        for o in &operands {
            match self.operand(&mut k, o, &shape, &map)? {
                Ok(v) if k.b.ty(v) == ty => loaded.push(v),
                Ok(v) => {
                    return Ok(Err(format!("an operand is {}, the loss {ty}", k.b.ty(v))));
                }
                Err(why) => return Ok(Err(why)),
            }
        }
        let Some(element) = per_element(&mut k.b, loss, &loaded, ty) else {
            return Ok(Err(format!("{} with {} operands", op.name(), loaded.len())));
        };
        let local = match reduction {
            Reduction::None => Local {
                value: element,
                shape,
                map: Some(map),
            },
            Reduction::Mean | Reduction::Sum => {
                let b = &mut k.b;
                let wide = cast(b, ScalarType::F64, element);
                let mut total = b.push(ScalarType::F64, Expr::Reduce(ReduceFn::Sum, wide));
                if reduction == Reduction::Mean {
                    let count = shape.iter().product::<usize>() as f64;
                    let count = b.push(ScalarType::F64, Expr::Const(count));
                    total = b.push(ScalarType::F64, Expr::Binary(BinaryFn::Div, total, count));
                }
                Local {
                    value: cast(b, ty, total),
                    shape: Vec::new(),
                    map: Some(Vec::new()),
                }
            }
        };
        k.locals.insert(*id, vec![local]);
        self.emit_frame(k, &[*id], &HashSet::from([*id]))
    }
}

/// `v` converted to `ty` (itself when it is of that type).
fn cast(b: &mut KernelBuilder, ty: ScalarType, v: ValueId) -> ValueId {
    if b.ty(v) == ty {
        v
    } else {
        b.push(ty, Expr::Cast(v))
    }
}

/// The loss of one element, from its `input, target` (and `pos_weight`) values, in the order
/// of the eager kernel's operations; `None` when the operand count does not fit.
fn per_element(
    b: &mut KernelBuilder,
    loss: &LossOp,
    operands: &[ValueId],
    ty: ScalarType,
) -> Option<ValueId> {
    let mut e = Element { b, ty };
    Some(match (loss, operands) {
        (LossOp::Mse { .. }, &[x, y]) => {
            let d = e.bin(BinaryFn::Sub, x, y);
            e.bin(BinaryFn::Mul, d, d)
        }
        (LossOp::L1 { .. }, &[x, y]) => {
            let d = e.bin(BinaryFn::Sub, x, y);
            e.un(UnaryFn::Abs, d)
        }
        // -(y * max(log x, -100) + (1 - y) * max(log(1 - x), -100)).
        (LossOp::Bce { .. }, &[x, y]) => {
            let one = e.c(1.0);
            let log_p = e.un(UnaryFn::Log, x);
            let log_p = e.floor_max(log_p, BCE_LOG_FLOOR);
            let q = e.bin(BinaryFn::Sub, one, x);
            let log_q = e.un(UnaryFn::Log, q);
            let log_q = e.floor_max(log_q, BCE_LOG_FLOOR);
            let picked = e.bin(BinaryFn::Mul, y, log_p);
            let not_y = e.bin(BinaryFn::Sub, one, y);
            let other = e.bin(BinaryFn::Mul, not_y, log_q);
            let sum = e.bin(BinaryFn::Add, picked, other);
            e.un(UnaryFn::Neg, sum)
        }
        // (1 - y) * x + (1 + (pw - 1) * y) * softplus(-x).
        (LossOp::BceWithLogits { pos_weight, .. }, [x, y, rest @ ..])
            if rest.len() == usize::from(*pos_weight) =>
        {
            let (x, y) = (*x, *y);
            let one = e.c(1.0);
            let l = match rest.first() {
                Some(&w) => {
                    let w1 = e.bin(BinaryFn::Sub, w, one);
                    let w1y = e.bin(BinaryFn::Mul, w1, y);
                    e.bin(BinaryFn::Add, one, w1y)
                }
                None => one,
            };
            let not_y = e.bin(BinaryFn::Sub, one, y);
            let linear = e.bin(BinaryFn::Mul, not_y, x);
            let neg_x = e.un(UnaryFn::Neg, x);
            let soft = e.softplus(neg_x);
            let weighted = e.bin(BinaryFn::Mul, l, soft);
            e.bin(BinaryFn::Add, linear, weighted)
        }
        _ => return None,
    })
}

/// Pushes values of one type.
struct Element<'b> {
    b: &'b mut KernelBuilder,
    ty: ScalarType,
}

impl Element<'_> {
    fn c(&mut self, v: f64) -> ValueId {
        self.b.push(self.ty, Expr::Const(v))
    }

    fn un(&mut self, f: UnaryFn, x: ValueId) -> ValueId {
        self.b.push(self.ty, Expr::Unary(f, x))
    }

    fn bin(&mut self, f: BinaryFn, x: ValueId, y: ValueId) -> ValueId {
        self.b.push(self.ty, Expr::Binary(f, x, y))
    }

    /// `x.max(floor)` as Rust's `max` computes it: the floor when `x` is below it or NaN.
    fn floor_max(&mut self, x: ValueId, floor: f64) -> ValueId {
        let floor = self.c(floor);
        let keep = self
            .b
            .push(ScalarType::Bool, Expr::Compare(CompareFn::Ge, x, floor));
        self.b.push(
            self.ty,
            Expr::Select {
                cond: keep,
                a: x,
                b: floor,
            },
        )
    }

    /// The eager kernel's `softplus(v) = max(v, 0) + ln_1p(exp(-|v|))`, with `ln_1p(e)` as
    /// `log(1 + e) * e / ((1 + e) - 1)` (exact where `1 + e` rounds to 1: `e` itself), which
    /// is accurate to a few ulps where `log(1 + e)` alone loses `e`'s low bits.
    fn softplus(&mut self, v: ValueId) -> ValueId {
        let (zero, one) = (self.c(0.0), self.c(1.0));
        let positive = self
            .b
            .push(ScalarType::Bool, Expr::Compare(CompareFn::Gt, v, zero));
        let relu = self.b.push(
            self.ty,
            Expr::Select {
                cond: positive,
                a: v,
                b: zero,
            },
        );
        let abs = self.un(UnaryFn::Abs, v);
        let neg = self.un(UnaryFn::Neg, abs);
        let e = self.un(UnaryFn::Exp, neg);
        let u = self.bin(BinaryFn::Add, one, e);
        let log_u = self.un(UnaryFn::Log, u);
        let u1 = self.bin(BinaryFn::Sub, u, one);
        let scaled = self.bin(BinaryFn::Mul, log_u, e);
        let corrected = self.bin(BinaryFn::Div, scaled, u1);
        let exact = self
            .b
            .push(ScalarType::Bool, Expr::Compare(CompareFn::Eq, u, one));
        let log1p = self.b.push(
            self.ty,
            Expr::Select {
                cond: exact,
                a: e,
                b: corrected,
            },
        );
        self.bin(BinaryFn::Add, relu, log1p)
    }
}
