//! The scalar-op table: each [`Expr`] of a kernel's DAG as PTX instructions. Arithmetic is
//! IEEE round-to-nearest (`.rn`, never contracted into fused operations, so results round as
//! the interpreter's), comparisons follow Rust's `PartialOrd` (`!=` is the unordered `neu`, true
//! for NaN), and the transcendental functions are the programs of [`crate::math_fns`]. A bool
//! value is a predicate, stored as the byte 0 or 1 (`ld/st.global.u8` through a `.b32`
//! register); an i64 value is a `.b64` register with wrapping `.s64` arithmetic; a narrow
//! integer is a `.b32` register, only loaded, stored and converted ([`crate::narrow`]).

use crate::body::Body;
use crate::emit::{Reg, RegClass, f32_imm, f64_imm};
use crate::math_fns;
use tessera_kernel::{BinaryFn, CompareFn, Expr, ReduceFn, ScalarType, UnaryFn, ValueId};

/// The register class of a value of type `ty`.
pub fn class(ty: ScalarType) -> RegClass {
    match ty {
        ScalarType::F32 => RegClass::F32,
        ScalarType::F64 => RegClass::F64,
        ScalarType::F16 | ScalarType::BF16 => RegClass::B16,
        ScalarType::Bool => RegClass::Pred,
        ScalarType::I64 => RegClass::B64,
        ScalarType::U8 | ScalarType::I8 | ScalarType::I32 => RegClass::B32,
    }
}

/// The PTX type suffix of a float type (`b16` for the bits of a half type, which is only
/// loaded, stored and converted).
pub fn suffix(ty: ScalarType) -> &'static str {
    match ty {
        ScalarType::F64 => "f64",
        ScalarType::F16 | ScalarType::BF16 => "b16",
        ScalarType::I64 => "s64",
        _ => "f32",
    }
}

/// An immediate of the numeric type `ty` (an i64 one truncated as the interpreter's `as`).
pub fn imm(ty: ScalarType, v: f64) -> String {
    match ty {
        ScalarType::F64 => f64_imm(v),
        ScalarType::I64 => (v as i64).to_string(),
        _ => f32_imm(v as f32),
    }
}

/// The `setp` comparison of `f` on operands of type `ty` (`ne` is unordered on floats only).
fn compare(f: CompareFn, ty: ScalarType) -> &'static str {
    match f {
        CompareFn::Eq => "eq",
        CompareFn::Ne if ty == ScalarType::I64 => "ne",
        CompareFn::Ne => "neu",
        CompareFn::Lt => "lt",
        CompareFn::Le => "le",
        CompareFn::Gt => "gt",
        CompareFn::Ge => "ge",
    }
}

impl Body<'_> {
    /// Emits value `id` at the current loop indices and records its register. A reduction's
    /// value is its accumulator, set by the reduction code, and emits nothing here.
    pub fn emit_value(&mut self, id: ValueId) {
        let v = self.kernel.value(id).clone();
        if let Expr::Reduce(..) = v.expr {
            return;
        }
        if let Some(r) = self.preloaded[id.index()] {
            self.values[id.index()] = Some(r);
            return;
        }
        let ty = v.ty;
        let s = suffix(ty);
        let d = self.e.reg(class(ty));
        match &v.expr {
            Expr::Load { buffer, index } if ty == ScalarType::Bool => {
                let a = self.address(*buffer, index);
                let byte = self.e.reg(RegClass::B32);
                self.e.ins(format!("ld.global.u8 {byte}, [{a}]"));
                self.e.ins(format!("setp.ne.u32 {d}, {byte}, 0"));
            }
            Expr::Load { buffer, index } if ty.is_narrow_int() => {
                let a = self.address(*buffer, index);
                let t = crate::narrow::load_suffix(ty);
                self.e.ins(format!("ld.global.{t} {d}, [{a}]"));
            }
            Expr::Load { buffer, index } => {
                let a = self.address(*buffer, index);
                self.e.ins(format!("ld.global.{s} {d}, [{a}]"));
            }
            Expr::LoadIf {
                buffer,
                index,
                bounds,
                fill,
            } => self.guarded_load(d, *buffer, index, bounds, *fill, ty),
            Expr::Gather {
                buffer,
                index,
                by,
                stride,
                len,
                status,
            } => {
                let by = self.value(*by);
                self.gather(d, *buffer, index, by, (*stride, *len), *status, ty);
            }
            Expr::LoopIndex(l) => self.loop_index(d, *l),
            Expr::Const(c) => self.e.ins(format!("mov.{s} {d}, {}", imm(ty, *c))),
            Expr::Unary(f, a) => {
                let a = self.value(*a);
                match f {
                    UnaryFn::Neg => self.e.ins(format!("neg.{s} {d}, {a}")),
                    UnaryFn::Abs => self.e.ins(format!("abs.{s} {d}, {a}")),
                    UnaryFn::Sqrt => self.e.ins(format!("sqrt.rn.{s} {d}, {a}")),
                    _ => {
                        if let Some(p) = math_fns::unary(*f, ty) {
                            self.e.comment(format!("{}.{s}", f.name()));
                            let r = p.render(&mut self.e, &[a]);
                            self.e.ins(format!("mov.{s} {d}, {r}"));
                        }
                    }
                }
            }
            Expr::Binary(f, a, b) if ty == ScalarType::I64 => {
                // Wrapping, as the interpreter (`verify` admits add, sub and mul of i64).
                let (a, b) = (self.value(*a), self.value(*b));
                let op = match f {
                    BinaryFn::Sub => "sub.s64",
                    BinaryFn::Mul => "mul.lo.s64",
                    _ => "add.s64",
                };
                self.e.ins(format!("{op} {d}, {a}, {b}"));
            }
            Expr::Binary(f, a, b) => {
                let (a, b) = (self.value(*a), self.value(*b));
                match f {
                    BinaryFn::Add => self.e.ins(format!("add.rn.{s} {d}, {a}, {b}")),
                    BinaryFn::Sub => self.e.ins(format!("sub.rn.{s} {d}, {a}, {b}")),
                    BinaryFn::Mul => self.e.ins(format!("mul.rn.{s} {d}, {a}, {b}")),
                    BinaryFn::Div => self.e.ins(format!("div.rn.{s} {d}, {a}, {b}")),
                    BinaryFn::Pow => {
                        self.e.comment(format!("pow.{s}"));
                        let r = math_fns::pow(ty).render(&mut self.e, &[a, b]);
                        self.e.ins(format!("mov.{s} {d}, {r}"));
                    }
                }
            }
            Expr::Compare(f, a, b) => {
                let operand_ty = self.kernel.value(*a).ty;
                let t = suffix(operand_ty);
                let (a, b) = (self.value(*a), self.value(*b));
                self.e.ins(format!(
                    "setp.{}.{t} {d}, {a}, {b}",
                    compare(*f, operand_ty)
                ));
            }
            Expr::Select { cond, a, b } => {
                let (c, a, b) = (self.value(*cond), self.value(*a), self.value(*b));
                if ty == ScalarType::Bool {
                    let (t, n, u) = (
                        self.e.reg(RegClass::Pred),
                        self.e.reg(RegClass::Pred),
                        self.e.reg(RegClass::Pred),
                    );
                    self.e.ins(format!("and.pred {t}, {c}, {a}"));
                    self.e.ins(format!("not.pred {n}, {c}"));
                    self.e.ins(format!("and.pred {u}, {n}, {b}"));
                    self.e.ins(format!("or.pred {d}, {t}, {u}"));
                } else {
                    self.e.ins(format!("selp.{s} {d}, {a}, {b}, {c}"));
                }
            }
            Expr::Cast(a) => {
                let from = self.kernel.value(*a).ty;
                let a = self.value(*a);
                match (from, ty) {
                    (f, t) if f == t => self.e.ins(format!("mov.{} {d}, {a}", mov_ty(t))),
                    (f, t) if f.is_half() || t.is_half() => self.half_cast(d, a, f, t),
                    (f, t) if f.is_narrow_int() || t.is_narrow_int() => {
                        self.narrow_cast(d, a, f, t)
                    }
                    (ScalarType::F32, ScalarType::F64) => {
                        self.e.ins(format!("cvt.f64.f32 {d}, {a}"))
                    }
                    (ScalarType::F64, ScalarType::F32) => {
                        self.e.ins(format!("cvt.rn.f32.f64 {d}, {a}"))
                    }
                    (ScalarType::I64, ScalarType::Bool) => {
                        self.e.ins(format!("setp.ne.s64 {d}, {a}, 0"))
                    }
                    // Through f64, as the eager cast.
                    (ScalarType::I64, ScalarType::F64) => {
                        self.e.ins(format!("cvt.rn.f64.s64 {d}, {a}"))
                    }
                    (ScalarType::I64, _) => {
                        let wide = self.e.reg(RegClass::F64);
                        self.e.ins(format!("cvt.rn.f64.s64 {wide}, {a}"));
                        self.e.ins(format!("cvt.rn.f32.f64 {d}, {wide}"));
                    }
                    // Truncating; PTX saturates and maps NaN to 0, as Rust's `as`.
                    (f, ScalarType::I64) if f != ScalarType::Bool => {
                        self.e.ins(format!("cvt.rzi.s64.{} {d}, {a}", suffix(f)))
                    }
                    (ScalarType::Bool, t) => self.e.ins(format!(
                        "selp.{s} {d}, {}, {}, {a}",
                        imm(t, 1.0),
                        imm(t, 0.0)
                    )),
                    // float -> bool is `x != 0`, true for NaN.
                    (f, _) => {
                        self.e
                            .ins(format!("setp.neu.{} {d}, {a}, {}", suffix(f), imm(f, 0.0)))
                    }
                }
            }
            Expr::Reduce(..) => {}
        }
        self.values[id.index()] = Some(d);
    }

    /// `acc = combine(acc, x)` for a reduction of type `ty`: a sum, or the larger (smaller)
    /// with NaN winning, as [`ReduceFn::combine`].
    pub fn combine(&mut self, f: ReduceFn, ty: ScalarType, acc: Reg, x: Reg) {
        let s = suffix(ty);
        if ty == ScalarType::I64 {
            // Integer sums wrap, as the eager kernel's; integers have no NaN.
            let op = match f {
                ReduceFn::Sum => "add",
                f if f.is_largest() => "max",
                _ => "min",
            };
            self.e.ins(format!("{op}.{s} {acc}, {acc}, {x}"));
            return;
        }
        let cmp = match f {
            ReduceFn::Sum => {
                self.e.ins(format!("add.rn.{s} {acc}, {acc}, {x}"));
                return;
            }
            f if f.is_largest() => "gt",
            _ => "lt",
        };
        let (wins, x_nan, acc_nan) = (
            self.e.reg(RegClass::Pred),
            self.e.reg(RegClass::Pred),
            self.e.reg(RegClass::Pred),
        );
        let t = self.e.reg(class(ty));
        self.e.ins(format!("setp.{cmp}.{s} {wins}, {x}, {acc}"));
        self.e.ins(format!("selp.{s} {t}, {x}, {acc}, {wins}"));
        self.e.ins(format!("setp.nan.{s} {x_nan}, {x}, {x}"));
        self.e.ins(format!("selp.{s} {t}, {x}, {t}, {x_nan}"));
        self.e.ins(format!("setp.nan.{s} {acc_nan}, {acc}, {acc}"));
        self.e.ins(format!("selp.{s} {acc}, {acc}, {t}, {acc_nan}"));
    }
}

impl Body<'_> {
    /// Folds the candidate `x` at position `at` into the arg reduction (`best` of type `ty`,
    /// `position`) when it replaces it, as [`ReduceFn::replaces`]: more extreme, NaN where the
    /// best is not, or as extreme (both NaN included) at a lower position.
    pub fn arg_combine(
        &mut self,
        f: ReduceFn,
        ty: ScalarType,
        best: Reg,
        position: Reg,
        x: Reg,
        at: Reg,
    ) {
        let s = suffix(ty);
        let cmp = if f.is_largest() { "gt" } else { "lt" };
        let p = |b: &mut Self| b.e.reg(RegClass::Pred);
        let (more, x_nan, best_nan, equal, lower) = (p(self), p(self), p(self), p(self), p(self));
        let (same, tie, best_number, replaces) = (p(self), p(self), p(self), p(self));
        self.e.ins(format!("setp.{cmp}.{s} {more}, {x}, {best}"));
        if ty == ScalarType::I64 {
            // Integers have no NaN: more extreme, or equal at a lower position.
            self.e.ins(format!("setp.eq.{s} {equal}, {x}, {best}"));
            self.e.ins(format!("setp.lt.s64 {lower}, {at}, {position}"));
            self.e.ins(format!("and.pred {tie}, {equal}, {lower}"));
            self.e.ins(format!("or.pred {replaces}, {more}, {tie}"));
            self.e
                .ins(format!("selp.{s} {best}, {x}, {best}, {replaces}"));
            self.e
                .ins(format!("selp.b64 {position}, {at}, {position}, {replaces}"));
            return;
        }
        self.e.ins(format!("setp.nan.{s} {x_nan}, {x}, {x}"));
        self.e
            .ins(format!("setp.nan.{s} {best_nan}, {best}, {best}"));
        self.e.ins(format!("setp.eq.{s} {equal}, {x}, {best}"));
        self.e.ins(format!("setp.lt.s64 {lower}, {at}, {position}"));
        // same = equal || both NaN; tie = same && lower.
        self.e.ins(format!("and.pred {same}, {x_nan}, {best_nan}"));
        self.e.ins(format!("or.pred {same}, {same}, {equal}"));
        self.e.ins(format!("and.pred {tie}, {same}, {lower}"));
        // replaces = more || (x NaN && best not) || tie.
        self.e.ins(format!("not.pred {best_number}, {best_nan}"));
        self.e
            .ins(format!("and.pred {replaces}, {x_nan}, {best_number}"));
        self.e
            .ins(format!("or.pred {replaces}, {replaces}, {more}"));
        self.e.ins(format!("or.pred {replaces}, {replaces}, {tie}"));
        self.e
            .ins(format!("selp.{s} {best}, {x}, {best}, {replaces}"));
        self.e
            .ins(format!("selp.b64 {position}, {at}, {position}, {replaces}"));
    }
}

fn mov_ty(ty: ScalarType) -> &'static str {
    match ty {
        ScalarType::F32 => "f32",
        ScalarType::F64 => "f64",
        ScalarType::F16 | ScalarType::BF16 => "b16",
        ScalarType::Bool => "pred",
        ScalarType::I64 => "b64",
        ScalarType::U8 | ScalarType::I8 | ScalarType::I32 => "b32",
    }
}
