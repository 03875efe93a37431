//! A small straight-line IR for the transcendental functions: each function is written once
//! as a sequence of typed PTX-level operations ([`MathOp`]), which [`MathProgram::render`]
//! prints as PTX instructions (one per operation) and [`MathProgram::eval`] executes on the CPU
//! with PTX's semantics (round-to-nearest arithmetic, NaN-ignoring min/max, wrapping integers),
//! so the accuracy of the emitted code is measured by ordinary unit tests on any machine.
//!
//! Programs are straight-line except for slow paths: the operations between
//! [`MathOp::BeginSlow`] and [`MathOp::EndSlow`] run only when a predicate holds (PTX branches
//! around them), and [`MathOp::Merge`] picks their result or a value computed before them.

use crate::emit::{Emitter, Reg, RegClass, f32_imm, f64_imm};

/// The type of a value of a math program.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MathTy {
    F32,
    F64,
    I32,
    I64,
    Pred,
}

impl MathTy {
    fn class(self) -> RegClass {
        match self {
            MathTy::F32 => RegClass::F32,
            MathTy::F64 => RegClass::F64,
            MathTy::I32 => RegClass::B32,
            MathTy::I64 => RegClass::B64,
            MathTy::Pred => RegClass::Pred,
        }
    }

    fn float_suffix(self) -> &'static str {
        match self {
            MathTy::F32 => "f32",
            _ => "f64",
        }
    }
}

/// A value of a math program: the position of the operation that computes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MathReg(usize);

/// An ordered float comparison (false when either operand is NaN).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MathCmp {
    Lt,
    Le,
    Gt,
    Ge,
    Eq,
}

/// One operation; the result type is recorded next to it in the program.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum MathOp {
    /// The program's `n`th argument.
    Input(usize),
    FConst(f64),
    IConst(i64),
    Add(MathReg, MathReg),
    Sub(MathReg, MathReg),
    Mul(MathReg, MathReg),
    Div(MathReg, MathReg),
    /// `a * b + c` rounded once.
    Fma(MathReg, MathReg, MathReg),
    Neg(MathReg),
    Abs(MathReg),
    /// PTX `min`/`max`: a NaN operand is ignored.
    Min(MathReg, MathReg),
    Max(MathReg, MathReg),
    /// The magnitude of the first with the sign of the second.
    CopySign(MathReg, MathReg),
    /// Round to an integral value, ties to even (`cvt.rni`).
    RoundEven(MathReg),
    /// Round towards minus infinity (`cvt.rmi`).
    Floor(MathReg),
    Cmp(MathCmp, MathReg, MathReg),
    IsNan(MathReg),
    Or(MathReg, MathReg),
    And(MathReg, MathReg),
    Not(MathReg),
    /// `p ? a : b`, for floats and integers.
    Select(MathReg, MathReg, MathReg),
    /// The float's bits as an integer of its width, and back.
    Bits(MathReg),
    FromBits(MathReg),
    IAdd(MathReg, MathReg),
    ISub(MathReg, MathReg),
    BitAnd(MathReg, MathReg),
    BitOr(MathReg, MathReg),
    Shl(MathReg, u32),
    /// Arithmetic shift right of an i32.
    Sar(MathReg, u32),
    /// Logical shift right of an i64.
    Shr(MathReg, u32),
    /// f32/f64 to i32, towards zero.
    ToI32(MathReg),
    I32ToI64(MathReg),
    /// The low 32 bits of an i64.
    Low32(MathReg),
    /// An i32 to the float type of the result, rounded to nearest.
    IToF(MathReg),
    /// f32 to f64 (exact), or f64 to f32 (rounded to nearest).
    Convert(MathReg),
    /// Integer equality (i32 or i64), giving a predicate.
    IEq(MathReg, MathReg),
    /// Unsigned `a < b` of two i64s, giving a predicate.
    ULt(MathReg, MathReg),
    /// The low and the high 64 bits of the unsigned 128-bit product of two i64s.
    MulLo(MathReg, MathReg),
    MulHi(MathReg, MathReg),
    /// An i64 shifted left or (logically) right by an i32 amount; amounts of 64 or more give
    /// 0, as PTX clamps them.
    ShlV(MathReg, MathReg),
    ShrV(MathReg, MathReg),
    /// An i64 read as unsigned, to f64 rounded to nearest.
    U64ToF(MathReg),
    /// Starts a slow path: the operations up to the matching [`MathOp::EndSlow`] run only when
    /// the predicate holds (none is an input or another slow path).
    BeginSlow(MathReg),
    /// Ends the slow path started by the given [`MathOp::BeginSlow`].
    EndSlow(MathReg),
    /// After a slow path (`begin`, its `BeginSlow`): `taken`, computed in it, when it ran, else
    /// `otherwise`, computed before it.
    Merge {
        begin: MathReg,
        taken: MathReg,
        otherwise: MathReg,
    },
}

/// A straight-line program computing one float from its arguments.
#[derive(Debug, Clone, Default)]
pub struct MathProgram {
    ops: Vec<(MathTy, MathOp)>,
    output: Option<MathReg>,
}

impl MathProgram {
    /// Appends `op` of result type `ty`.
    pub fn push(&mut self, ty: MathTy, op: MathOp) -> MathReg {
        self.ops.push((ty, op));
        MathReg(self.ops.len() - 1)
    }

    pub fn ty(&self, r: MathReg) -> MathTy {
        self.ops[r.0].0
    }

    pub fn set_output(&mut self, r: MathReg) {
        self.output = Some(r);
    }

    pub fn output(&self) -> MathReg {
        self.output
            .unwrap_or(MathReg(self.ops.len().saturating_sub(1)))
    }

    pub fn len(&self) -> usize {
        self.ops.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// Emits the program as PTX, its arguments in `args`; returns the register of its result.
    pub fn render(&self, e: &mut Emitter, args: &[Reg]) -> Reg {
        let mut regs: Vec<Reg> = Vec::with_capacity(self.ops.len());
        let mut slow: Vec<SlowPath> = Vec::new();
        for (at, &(ty, op)) in self.ops.iter().enumerate() {
            let r = |m: MathReg| regs[m.0];
            let sfx = |m: MathReg| self.ty(m).float_suffix();
            match op {
                MathOp::Input(n) => {
                    regs.push(args[n]);
                    continue;
                }
                MathOp::BeginSlow(p) => {
                    let skip = e.new_label("slow_path_end");
                    let mut merges = Vec::new();
                    for (m, &(mty, mop)) in self.ops.iter().enumerate().skip(at) {
                        if let MathOp::Merge {
                            begin, otherwise, ..
                        } = mop
                            && begin.0 == at
                        {
                            let d = e.reg(mty.class());
                            e.ins(format!("mov.{} {d}, {}", mov_type(mty), r(otherwise)));
                            merges.push((m, d));
                        }
                    }
                    e.ins(format!("@!{} bra {skip}", r(p)));
                    slow.push(SlowPath {
                        begin: at,
                        skip,
                        merges,
                    });
                    regs.push(r(p));
                    continue;
                }
                MathOp::EndSlow(begin) => {
                    if let Some(path) = slow.iter().find(|s| s.begin == begin.0) {
                        for &(m, d) in &path.merges {
                            if let MathOp::Merge { taken, .. } = self.ops[m].1 {
                                e.ins(format!(
                                    "mov.{} {d}, {}",
                                    mov_type(ty_of(self, m)),
                                    r(taken)
                                ));
                            }
                        }
                        e.label(&path.skip);
                    }
                    regs.push(r(begin));
                    continue;
                }
                MathOp::Merge { begin, .. } => {
                    let d = slow
                        .iter()
                        .find(|s| s.begin == begin.0)
                        .and_then(|s| s.merges.iter().find(|m| m.0 == at))
                        .map_or_else(|| e.reg(ty.class()), |m| m.1);
                    regs.push(d);
                    continue;
                }
                _ => {}
            }
            let d = e.reg(ty.class());
            let fs = ty.float_suffix();
            match op {
                MathOp::FConst(v) => match ty {
                    MathTy::F32 => e.ins(format!("mov.f32 {d}, {}", f32_imm(v as f32))),
                    _ => e.ins(format!("mov.f64 {d}, {}", f64_imm(v))),
                },
                MathOp::IConst(v) => match ty {
                    MathTy::I32 => e.ins(format!("mov.b32 {d}, {}", v as i32)),
                    // Bit patterns with the top bit set print as unsigned hex.
                    _ if v < 0 => e.ins(format!("mov.b64 {d}, 0x{:016X}", v as u64)),
                    _ => e.ins(format!("mov.b64 {d}, {v}")),
                },
                MathOp::Add(a, b) => e.ins(format!("add.rn.{fs} {d}, {}, {}", r(a), r(b))),
                MathOp::Sub(a, b) => e.ins(format!("sub.rn.{fs} {d}, {}, {}", r(a), r(b))),
                MathOp::Mul(a, b) => e.ins(format!("mul.rn.{fs} {d}, {}, {}", r(a), r(b))),
                MathOp::Div(a, b) => e.ins(format!("div.rn.{fs} {d}, {}, {}", r(a), r(b))),
                MathOp::Fma(a, b, c) => {
                    e.ins(format!("fma.rn.{fs} {d}, {}, {}, {}", r(a), r(b), r(c)))
                }
                MathOp::Neg(a) => e.ins(format!("neg.{fs} {d}, {}", r(a))),
                MathOp::Abs(a) => e.ins(format!("abs.{fs} {d}, {}", r(a))),
                MathOp::Min(a, b) => e.ins(format!("min.{fs} {d}, {}, {}", r(a), r(b))),
                MathOp::Max(a, b) => e.ins(format!("max.{fs} {d}, {}, {}", r(a), r(b))),
                // PTX: `copysign d, a, b` gives `b` with the sign of `a`.
                MathOp::CopySign(mag, sign) => {
                    e.ins(format!("copysign.{fs} {d}, {}, {}", r(sign), r(mag)))
                }
                MathOp::RoundEven(a) => e.ins(format!("cvt.rni.{fs}.{fs} {d}, {}", r(a))),
                MathOp::Floor(a) => e.ins(format!("cvt.rmi.{fs}.{fs} {d}, {}", r(a))),
                MathOp::Cmp(c, a, b) => {
                    let c = match c {
                        MathCmp::Lt => "lt",
                        MathCmp::Le => "le",
                        MathCmp::Gt => "gt",
                        MathCmp::Ge => "ge",
                        MathCmp::Eq => "eq",
                    };
                    e.ins(format!("setp.{c}.{} {d}, {}, {}", sfx(a), r(a), r(b)))
                }
                MathOp::IsNan(a) => e.ins(format!("setp.nan.{} {d}, {}, {}", sfx(a), r(a), r(a))),
                MathOp::Or(a, b) => e.ins(format!("or.pred {d}, {}, {}", r(a), r(b))),
                MathOp::And(a, b) => e.ins(format!("and.pred {d}, {}, {}", r(a), r(b))),
                MathOp::Not(a) => e.ins(format!("not.pred {d}, {}", r(a))),
                MathOp::Select(p, a, b) => {
                    let t = match ty {
                        MathTy::F32 => "f32",
                        MathTy::F64 => "f64",
                        MathTy::I32 => "b32",
                        _ => "b64",
                    };
                    e.ins(format!("selp.{t} {d}, {}, {}, {}", r(a), r(b), r(p)))
                }
                MathOp::Bits(a) | MathOp::FromBits(a) => {
                    let w = if matches!(ty, MathTy::F32 | MathTy::I32) {
                        "b32"
                    } else {
                        "b64"
                    };
                    e.ins(format!("mov.{w} {d}, {}", r(a)))
                }
                MathOp::IAdd(a, b) => e.ins(format!("add.{} {d}, {}, {}", int(ty), r(a), r(b))),
                MathOp::ISub(a, b) => e.ins(format!("sub.{} {d}, {}, {}", int(ty), r(a), r(b))),
                MathOp::BitAnd(a, b) => e.ins(format!("and.{} {d}, {}, {}", bits(ty), r(a), r(b))),
                MathOp::BitOr(a, b) => e.ins(format!("or.{} {d}, {}, {}", bits(ty), r(a), r(b))),
                MathOp::Shl(a, n) => e.ins(format!("shl.{} {d}, {}, {n}", bits(ty), r(a))),
                MathOp::Sar(a, n) => e.ins(format!("shr.s32 {d}, {}, {n}", r(a))),
                MathOp::Shr(a, n) => e.ins(format!("shr.u64 {d}, {}, {n}", r(a))),
                MathOp::ToI32(a) => e.ins(format!("cvt.rzi.s32.{} {d}, {}", sfx(a), r(a))),
                MathOp::I32ToI64(a) => e.ins(format!("cvt.s64.s32 {d}, {}", r(a))),
                MathOp::Low32(a) => e.ins(format!("cvt.u32.u64 {d}, {}", r(a))),
                MathOp::IToF(a) => e.ins(format!("cvt.rn.{fs}.s32 {d}, {}", r(a))),
                MathOp::Convert(a) => match ty {
                    MathTy::F64 => e.ins(format!("cvt.f64.f32 {d}, {}", r(a))),
                    _ => e.ins(format!("cvt.rn.f32.f64 {d}, {}", r(a))),
                },
                MathOp::IEq(a, b) => e.ins(format!(
                    "setp.eq.{} {d}, {}, {}",
                    int(self.ty(a)),
                    r(a),
                    r(b)
                )),
                MathOp::ULt(a, b) => e.ins(format!("setp.lt.u64 {d}, {}, {}", r(a), r(b))),
                MathOp::MulLo(a, b) => e.ins(format!("mul.lo.u64 {d}, {}, {}", r(a), r(b))),
                MathOp::MulHi(a, b) => e.ins(format!("mul.hi.u64 {d}, {}, {}", r(a), r(b))),
                MathOp::ShlV(a, n) => e.ins(format!("shl.b64 {d}, {}, {}", r(a), r(n))),
                MathOp::ShrV(a, n) => e.ins(format!("shr.b64 {d}, {}, {}", r(a), r(n))),
                MathOp::U64ToF(a) => e.ins(format!("cvt.rn.f64.u64 {d}, {}", r(a))),
                // Handled above.
                MathOp::Input(_)
                | MathOp::BeginSlow(_)
                | MathOp::EndSlow(_)
                | MathOp::Merge { .. } => {}
            }
            regs.push(d);
        }
        regs[self.output().0]
    }

    /// Runs the program on the CPU with PTX's semantics; floats are passed as f64 (f32 values
    /// exactly), and the result is the output as f64.
    pub fn eval(&self, args: &[f64]) -> f64 {
        let mut v: Vec<Val> = Vec::with_capacity(self.ops.len());
        // The `BeginSlow` whose path is being skipped.
        let mut skipping: Option<usize> = None;
        for &(ty, op) in &self.ops {
            if let Some(begin) = skipping {
                if op == MathOp::EndSlow(MathReg(begin)) {
                    skipping = None;
                }
                v.push(Val::F(f64::NAN));
                continue;
            }
            let u = |m: MathReg| v[m.0].i() as u64;
            let f = |m: MathReg| v[m.0].f();
            let i = |m: MathReg| v[m.0].i();
            let round = |x: f64| match ty {
                MathTy::F32 => Val::F(x as f32 as f64),
                _ => Val::F(x),
            };
            let wrap = |x: i64| match ty {
                MathTy::I32 => Val::I(x as i32 as i64),
                _ => Val::I(x),
            };
            let is32 = |m: MathReg| self.ty(m) == MathTy::F32;
            let out = match op {
                MathOp::Input(n) => round(args[n]),
                MathOp::FConst(c) => round(c),
                MathOp::IConst(c) => wrap(c),
                MathOp::Add(a, b) => round(f(a) + f(b)),
                MathOp::Sub(a, b) => round(f(a) - f(b)),
                MathOp::Mul(a, b) => round(f(a) * f(b)),
                MathOp::Div(a, b) => round(f(a) / f(b)),
                MathOp::Fma(a, b, c) if ty == MathTy::F32 => {
                    Val::F((f(a) as f32).mul_add(f(b) as f32, f(c) as f32) as f64)
                }
                MathOp::Fma(a, b, c) => Val::F(f(a).mul_add(f(b), f(c))),
                MathOp::Neg(a) => Val::F(-f(a)),
                MathOp::Abs(a) => Val::F(f(a).abs()),
                MathOp::Min(a, b) => Val::F(f(a).min(f(b))),
                MathOp::Max(a, b) => Val::F(f(a).max(f(b))),
                MathOp::CopySign(a, b) => Val::F(f(a).copysign(f(b))),
                MathOp::RoundEven(a) => Val::F(f(a).round_ties_even()),
                MathOp::Floor(a) => Val::F(f(a).floor()),
                MathOp::Cmp(c, a, b) => Val::P(match c {
                    MathCmp::Lt => f(a) < f(b),
                    MathCmp::Le => f(a) <= f(b),
                    MathCmp::Gt => f(a) > f(b),
                    MathCmp::Ge => f(a) >= f(b),
                    MathCmp::Eq => f(a) == f(b),
                }),
                MathOp::IsNan(a) => Val::P(f(a).is_nan()),
                MathOp::Or(a, b) => Val::P(v[a.0].p() || v[b.0].p()),
                MathOp::And(a, b) => Val::P(v[a.0].p() && v[b.0].p()),
                MathOp::Not(a) => Val::P(!v[a.0].p()),
                MathOp::Select(p, a, b) => {
                    if v[p.0].p() {
                        v[a.0]
                    } else {
                        v[b.0]
                    }
                }
                MathOp::Bits(a) if is32(a) => Val::I((f(a) as f32).to_bits() as i32 as i64),
                MathOp::Bits(a) => Val::I(f(a).to_bits() as i64),
                MathOp::FromBits(a) if ty == MathTy::F32 => {
                    Val::F(f32::from_bits(i(a) as u32) as f64)
                }
                MathOp::FromBits(a) => Val::F(f64::from_bits(i(a) as u64)),
                MathOp::IAdd(a, b) => wrap(i(a).wrapping_add(i(b))),
                MathOp::ISub(a, b) => wrap(i(a).wrapping_sub(i(b))),
                MathOp::BitAnd(a, b) => wrap(i(a) & i(b)),
                MathOp::BitOr(a, b) => wrap(i(a) | i(b)),
                MathOp::Shl(a, n) => wrap(i(a).wrapping_shl(n)),
                MathOp::Sar(a, n) => wrap(((i(a) as i32) >> n) as i64),
                MathOp::Shr(a, n) => wrap(((i(a) as u64) >> n) as i64),
                // PTX saturates, and gives 0 for NaN, as Rust's `as` does.
                MathOp::ToI32(a) => Val::I(f(a) as i32 as i64),
                MathOp::I32ToI64(a) => Val::I(i(a) as i32 as i64),
                MathOp::Low32(a) => Val::I(i(a) as u32 as i32 as i64),
                MathOp::IToF(a) => round(i(a) as f64),
                MathOp::Convert(a) => round(f(a)),
                MathOp::IEq(a, b) => Val::P(i(a) == i(b)),
                MathOp::ULt(a, b) => Val::P(u(a) < u(b)),
                MathOp::MulLo(a, b) => Val::I(u(a).wrapping_mul(u(b)) as i64),
                MathOp::MulHi(a, b) => Val::I(((u(a) as u128 * u(b) as u128) >> 64) as i64),
                MathOp::ShlV(a, n) => Val::I(u(a).checked_shl(i(n) as u32).unwrap_or(0) as i64),
                MathOp::ShrV(a, n) => Val::I(u(a).checked_shr(i(n) as u32).unwrap_or(0) as i64),
                MathOp::U64ToF(a) => round(u(a) as f64),
                MathOp::BeginSlow(p) => {
                    if !v[p.0].p() {
                        skipping = Some(v.len());
                    }
                    v[p.0]
                }
                MathOp::EndSlow(_) => Val::P(true),
                MathOp::Merge {
                    begin,
                    taken,
                    otherwise,
                } => {
                    if v[begin.0].p() {
                        v[taken.0]
                    } else {
                        v[otherwise.0]
                    }
                }
            };
            v.push(out);
        }
        v[self.output().0].f()
    }
}

/// A slow path being rendered: its `BeginSlow`'s position, the label after it, and the
/// registers of its merges (by their positions), set to their `otherwise` values before it.
struct SlowPath {
    begin: usize,
    skip: String,
    merges: Vec<(usize, Reg)>,
}

/// The type of operation `at`'s result.
fn ty_of(p: &MathProgram, at: usize) -> MathTy {
    p.ops[at].0
}

/// The `mov` type of a value of type `ty`.
fn mov_type(ty: MathTy) -> &'static str {
    match ty {
        MathTy::F32 => "f32",
        MathTy::F64 => "f64",
        MathTy::I32 => "b32",
        MathTy::I64 => "b64",
        MathTy::Pred => "pred",
    }
}

fn int(ty: MathTy) -> &'static str {
    if ty == MathTy::I32 { "s32" } else { "s64" }
}

fn bits(ty: MathTy) -> &'static str {
    if ty == MathTy::I32 { "b32" } else { "b64" }
}

/// A value while a program is evaluated.
#[derive(Debug, Clone, Copy)]
enum Val {
    F(f64),
    I(i64),
    P(bool),
}

impl Val {
    fn f(self) -> f64 {
        match self {
            Val::F(x) => x,
            _ => f64::NAN,
        }
    }
    fn i(self) -> i64 {
        match self {
            Val::I(x) => x,
            _ => 0,
        }
    }
    fn p(self) -> bool {
        matches!(self, Val::P(true))
    }
}
