//! The reduction table: how each reduction and normalisation op of the op table computes its
//! outputs from its input's element (a value varying along the kernel's reduction loops) as
//! accumulations ([`Expr::Reduce`]) and scalar expressions around them. Formulas follow the
//! eager kernels' steps (the maximum subtracted before exponentials, two-pass variance), but
//! accumulate in the element type where the eager kernels use f64 sums, so results agree to a
//! tolerance, not bit for bit. A new reduction is one arm here.

use crate::{BinaryFn, CompareFn, Expr, KernelBuilder, ReduceFn, ScalarType, UnaryFn, ValueId};
use tessera_tensor::Op;
use tessera_tensor::op::{NormOp, PoolOp, ReduceKind};

/// The output values of the reduction `op` whose input element is `operands[0]` (and whose
/// weight and bias elements, for a norm, follow), over `count` reduced elements per output,
/// all of type `ty`; or why the op has no entry. An f16 or bf16 reduction widens its operands
/// to f32 and computes in f32, as the eager kernels do: its outputs are then f32 values, which
/// the caller rounds once to each output's dtype (a norm's statistics stay f32).
pub fn lower_reduction(
    op: &Op,
    b: &mut KernelBuilder,
    operands: &[ValueId],
    count: usize,
    ty: ScalarType,
) -> Result<Vec<ValueId>, String> {
    if ty.is_half() {
        let wide = ty.compute();
        let widened: Vec<ValueId> = operands
            .iter()
            .map(|&v| {
                if b.ty(v) == wide {
                    v
                } else {
                    b.push(wide, Expr::Cast(v))
                }
            })
            .collect();
        return lower_reduction(op, b, &widened, count, wide);
    }
    // Integer and bool inputs reduce exactly in i64: sums, extremes and their positions.
    let integer_kind = matches!(
        op,
        Op::Reduce(r) if matches!(
            r.kind,
            ReduceKind::Sum
                | ReduceKind::Amax
                | ReduceKind::Amin
                | ReduceKind::ArgMax
                | ReduceKind::ArgMin
        )
    );
    if !ty.is_arithmetic() && (ty != ScalarType::I64 || !integer_kind) {
        return Err(format!("{} computes in {ty}, not f32 or f64", op.name()));
    }
    let Some(&x) = operands.first() else {
        return Err("a reduction needs an input".into());
    };
    if b.ty(x) != ty {
        return Err(format!("the input is {}, the output {ty}", b.ty(x)));
    }
    let mut e = Emit { b, ty };
    let n = count as f64;
    Ok(match op {
        Op::Reduce(r) if !has_indices(r.kind) => vec![match r.kind {
            ReduceKind::Sum => e.reduce(ReduceFn::Sum, x),
            ReduceKind::Mean => e.mean(x, n),
            ReduceKind::Amax | ReduceKind::Amin if count == 0 => {
                return Err("the max/min of an empty dimension is an error".into());
            }
            ReduceKind::Amax => e.reduce(ReduceFn::Max, x),
            ReduceKind::Amin => e.reduce(ReduceFn::Min, x),
            ReduceKind::Var { correction } | ReduceKind::Std { correction } => {
                let mean = e.mean(x, n);
                let ss = e.squares(x, Some(mean));
                let divisor = e.c((n - correction as f64).max(0.0));
                let var = e.bin(BinaryFn::Div, ss, divisor);
                if matches!(r.kind, ReduceKind::Std { .. }) {
                    e.un(UnaryFn::Sqrt, var)
                } else {
                    var
                }
            }
            ReduceKind::LogSumExp => {
                let (m, infinite, m0) = e.stable_max(x);
                let shifted = e.bin(BinaryFn::Sub, x, m0);
                let exp = e.un(UnaryFn::Exp, shifted);
                let s = e.reduce(ReduceFn::Sum, exp);
                let log = e.un(UnaryFn::Log, s);
                let lse = e.bin(BinaryFn::Add, m0, log);
                e.select(infinite, m, lse)
            }
            kind => return Err(format!("{kind:?} gives positions")),
        }],
        // The eager kernels' first index of the extreme, NaN winning; the values of `max`
        // and `min` along a dim are the extremes (the same element, up to the sign of a zero).
        Op::Reduce(r) if count == 0 => {
            return Err(format!(
                "the {:?} of an empty dimension is an error",
                r.kind
            ));
        }
        Op::Reduce(r) if matches!(r.kind, ReduceKind::ArgMax | ReduceKind::ArgMin) => {
            let f = if r.kind == ReduceKind::ArgMax {
                ReduceFn::ArgMax
            } else {
                ReduceFn::ArgMin
            };
            vec![e.b.push(ScalarType::I64, Expr::Reduce(f, x))]
        }
        Op::Reduce(r) => {
            let (value, arg) = if r.kind == ReduceKind::MaxWithIndices {
                (ReduceFn::Max, ReduceFn::ArgMax)
            } else {
                (ReduceFn::Min, ReduceFn::ArgMin)
            };
            let values = e.reduce(value, x);
            vec![values, e.b.push(ScalarType::I64, Expr::Reduce(arg, x))]
        }
        Op::Softmax { log, .. } => {
            // The maximum, taken as 0 when infinite, is subtracted before exponentials.
            let (_, _, m0) = e.stable_max(x);
            let shifted = e.bin(BinaryFn::Sub, x, m0);
            let exp = e.un(UnaryFn::Exp, shifted);
            let s = e.reduce(ReduceFn::Sum, exp);
            vec![if *log {
                let log_s = e.un(UnaryFn::Log, s);
                let lse = e.bin(BinaryFn::Add, m0, log_s);
                e.bin(BinaryFn::Sub, x, lse)
            } else {
                let one = e.c(1.0);
                let inv = e.bin(BinaryFn::Div, one, s);
                e.bin(BinaryFn::Mul, exp, inv)
            }]
        }
        Op::Pool(PoolOp::AdaptiveAvgPool2d {
            output_size: [1, 1],
        }) => vec![e.mean(x, n)],
        Op::Norm(NormOp::BatchNorm {
            training: false,
            eps,
            weight,
            bias,
        }) => {
            let at = |i: usize| operands.get(i).copied().ok_or("a missing norm operand");
            let (mean, var) = (at(1)?, at(2)?);
            let w = weight.then(|| at(3)).transpose()?;
            let bias = bias.then(|| at(3 + usize::from(*weight))).transpose()?;
            let (scale, shift) = e.running_affine(mean, var, *eps, w, bias);
            let scaled = e.bin(BinaryFn::Mul, x, scale);
            vec![e.bin(BinaryFn::Add, scaled, shift), mean, var]
        }
        Op::Norm(
            norm @ (NormOp::LayerNorm { .. }
            | NormOp::RmsNorm { .. }
            | NormOp::GroupNorm { .. }
            | NormOp::InstanceNorm { .. }
            | NormOp::BatchNorm { training: true, .. }),
        ) => {
            let (eps, weight, bias, centred) = match *norm {
                // Batch statistics: the instance norm's formula over the batch too.
                NormOp::BatchNorm {
                    training: true,
                    eps,
                    weight,
                    bias,
                } => (eps, weight, bias, true),
                NormOp::LayerNorm {
                    eps, weight, bias, ..
                }
                | NormOp::GroupNorm {
                    eps, weight, bias, ..
                }
                | NormOp::InstanceNorm { eps, weight, bias } => (eps, weight, bias, true),
                NormOp::RmsNorm { eps, weight, .. } => (eps, weight, false, false),
                _ => return Err("not a layer norm".into()),
            };
            let affine = |i: usize| operands.get(i).copied().ok_or("a missing weight or bias");
            let w = weight.then(|| affine(1)).transpose()?;
            let bias = bias.then(|| affine(1 + usize::from(weight))).transpose()?;
            // Eager: the statistics, then `x * scale + shift` with `scale = invstd * w` and
            // `shift = -mean * invstd * w + b`.
            let mean = if centred { e.mean(x, n) } else { e.c(0.0) };
            let ss = e.squares(x, centred.then_some(mean));
            let count = e.c(n);
            let var = e.bin(BinaryFn::Div, ss, count);
            let eps = e.c(eps);
            let var_eps = e.bin(BinaryFn::Add, var, eps);
            let root = e.un(UnaryFn::Sqrt, var_eps);
            let one = e.c(1.0);
            let invstd = e.bin(BinaryFn::Div, one, root);
            let minus_mean = e.un(UnaryFn::Neg, mean);
            let (mut scale, mut shift) = (invstd, e.bin(BinaryFn::Mul, minus_mean, invstd));
            if let Some(w) = w {
                scale = e.bin(BinaryFn::Mul, scale, w);
                shift = e.bin(BinaryFn::Mul, shift, w);
            }
            if let Some(bias) = bias {
                shift = e.bin(BinaryFn::Add, shift, bias);
            }
            let scaled = e.bin(BinaryFn::Mul, x, scale);
            vec![e.bin(BinaryFn::Add, scaled, shift), mean, var]
        }
        other => return Err(format!("{} is not a lowered reduction", other.name())),
    })
}

/// Whether a reduction gives positions: `argmax`/`argmin`, `max`/`min` along a dim.
pub fn has_indices(kind: ReduceKind) -> bool {
    matches!(
        kind,
        ReduceKind::ArgMax
            | ReduceKind::ArgMin
            | ReduceKind::MaxWithIndices
            | ReduceKind::MinWithIndices
    )
}

/// Shorthands that push values of one float type into the kernel being built.
struct Emit<'a> {
    b: &'a mut KernelBuilder,
    ty: ScalarType,
}

impl Emit<'_> {
    fn c(&mut self, value: f64) -> ValueId {
        self.b.push(self.ty, Expr::Const(value))
    }

    fn un(&mut self, f: UnaryFn, x: ValueId) -> ValueId {
        self.b.push(self.ty, Expr::Unary(f, x))
    }

    fn bin(&mut self, f: BinaryFn, a: ValueId, b: ValueId) -> ValueId {
        self.b.push(self.ty, Expr::Binary(f, a, b))
    }

    fn select(&mut self, cond: ValueId, a: ValueId, b: ValueId) -> ValueId {
        self.b.push(self.ty, Expr::Select { cond, a, b })
    }

    fn reduce(&mut self, f: ReduceFn, x: ValueId) -> ValueId {
        self.b.push(self.ty, Expr::Reduce(f, x))
    }

    /// `sum(x) / n` (NaN for no elements, as eager).
    fn mean(&mut self, x: ValueId, n: f64) -> ValueId {
        let s = self.reduce(ReduceFn::Sum, x);
        let n = self.c(n);
        self.bin(BinaryFn::Div, s, n)
    }

    /// `sum((x - mean)^2)`, or `sum(x^2)` without a mean.
    fn squares(&mut self, x: ValueId, mean: Option<ValueId>) -> ValueId {
        let d = match mean {
            Some(m) => self.bin(BinaryFn::Sub, x, m),
            None => x,
        };
        let d2 = self.bin(BinaryFn::Mul, d, d);
        self.reduce(ReduceFn::Sum, d2)
    }

    /// An eval-mode batch norm's `(scale, shift)` from the running `mean` and `var` and the
    /// optional affine `w` and `b`, as the eager kernel computes them: in f64,
    /// `scale = w / sqrt(var + eps)`, `shift = -mean * invstd * w + b`, then rounded to the
    /// element type, so that `x * scale + shift` equals eager results bit for bit.
    fn running_affine(
        &mut self,
        mean: ValueId,
        var: ValueId,
        eps: f64,
        w: Option<ValueId>,
        b: Option<ValueId>,
    ) -> (ValueId, ValueId) {
        let ty = self.ty;
        let mut wide = Emit {
            b: &mut *self.b,
            ty: ScalarType::F64,
        };
        let (mean, var) = (wide.widen(mean), wide.widen(var));
        let eps = wide.c(eps);
        let var_eps = wide.bin(BinaryFn::Add, var, eps);
        let root = wide.un(UnaryFn::Sqrt, var_eps);
        let one = wide.c(1.0);
        let invstd = wide.bin(BinaryFn::Div, one, root);
        let minus_mean = wide.un(UnaryFn::Neg, mean);
        let (mut scale, mut shift) = (invstd, wide.bin(BinaryFn::Mul, minus_mean, invstd));
        if let Some(w) = w {
            let w = wide.widen(w);
            scale = wide.bin(BinaryFn::Mul, scale, w);
            shift = wide.bin(BinaryFn::Mul, shift, w);
        }
        if let Some(b) = b {
            let b = wide.widen(b);
            shift = wide.bin(BinaryFn::Add, shift, b);
        }
        (self.narrow(scale, ty), self.narrow(shift, ty))
    }

    /// `x` as an f64 (itself when it is one).
    fn widen(&mut self, x: ValueId) -> ValueId {
        if self.b.ty(x) == ScalarType::F64 {
            x
        } else {
            self.b.push(ScalarType::F64, Expr::Cast(x))
        }
    }

    /// `x` rounded to `ty` (itself when it is one).
    fn narrow(&mut self, x: ValueId, ty: ScalarType) -> ValueId {
        if self.b.ty(x) == ty {
            x
        } else {
            self.b.push(ty, Expr::Cast(x))
        }
    }

    /// The maximum `m`, whether it is infinite, and `m` taken as 0 when it is.
    fn stable_max(&mut self, x: ValueId) -> (ValueId, ValueId, ValueId) {
        let m = self.reduce(ReduceFn::Max, x);
        let abs = self.un(UnaryFn::Abs, m);
        let inf = self.c(f64::INFINITY);
        let infinite = self
            .b
            .push(ScalarType::Bool, Expr::Compare(CompareFn::Eq, abs, inf));
        let zero = self.c(0.0);
        let m0 = self.select(infinite, zero, m);
        (m, infinite, m0)
    }
}
