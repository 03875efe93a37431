//! The transcendental functions of the kernel IR written in the math IR ([`crate::math_ir`]):
//! f32 `exp` is the inline polynomial of [`tessera_kernel::exp_poly`] operation for operation
//! (so it equals the interpreter bit for bit); every other function is computed in f64 (f32
//! arguments converted exactly, the result rounded once to f32) by range reduction and
//! polynomials of plain IEEE operations, no `ex2/lg2.approx`, so the results do not depend on
//! the GPU's approximate units. The accuracy against the interpreter (Rust's `std`/`libm`),
//! measured by this file's tests over sweeps of each function's range, is stated in the crate
//! documentation ([`crate`]).

use crate::math_ir::{MathCmp, MathOp, MathProgram, MathReg, MathTy};

mod payne_hanek;
use tessera_kernel::exp_poly as ep;
use tessera_kernel::{ScalarType, UnaryFn};

/// The program of a transcendental [`UnaryFn`] at type `ty` (`None` for neg, abs and sqrt,
/// which are single instructions, and for bool and the half types, which compute in f32).
pub fn unary(f: UnaryFn, ty: ScalarType) -> Option<MathProgram> {
    if !f.is_transcendental() || !ty.is_arithmetic() {
        return None;
    }
    let mut m = M::default();
    let x = m.input(0, ty);
    let out = if ty == ScalarType::F32 && f == UnaryFn::Exp {
        exp_f32(&mut m, x)
    } else {
        let x = m.widen(x);
        let y = match f {
            UnaryFn::Exp => exp(&mut m, x),
            UnaryFn::Log => log(&mut m, x),
            UnaryFn::Sin => sin_cos(&mut m, x, false),
            UnaryFn::Cos => sin_cos(&mut m, x, true),
            UnaryFn::Tanh => tanh(&mut m, x),
            UnaryFn::Erf => erf(&mut m, x),
            UnaryFn::Neg | UnaryFn::Abs | UnaryFn::Sqrt => return None,
        };
        m.narrow(y, ty)
    };
    m.p.set_output(out);
    Some(m.p)
}

/// The program of `pow(a, b)` at type `ty`.
pub fn pow(ty: ScalarType) -> MathProgram {
    let mut m = M::default();
    let a = m.input(0, ty);
    let b = m.input(1, ty);
    let (a, b) = (m.widen(a), m.widen(b));
    let y = pow_f64(&mut m, a, b);
    let out = m.narrow(y, ty);
    m.p.set_output(out);
    m.p
}

/// A program being written, with one method per operation.
#[derive(Default)]
struct M {
    p: MathProgram,
}

impl M {
    fn input(&mut self, n: usize, ty: ScalarType) -> MathReg {
        let t = if ty == ScalarType::F32 {
            MathTy::F32
        } else {
            MathTy::F64
        };
        self.p.push(t, MathOp::Input(n))
    }
    fn widen(&mut self, x: MathReg) -> MathReg {
        if self.p.ty(x) == MathTy::F64 {
            x
        } else {
            self.p.push(MathTy::F64, MathOp::Convert(x))
        }
    }
    fn narrow(&mut self, x: MathReg, ty: ScalarType) -> MathReg {
        if ty == ScalarType::F32 {
            self.p.push(MathTy::F32, MathOp::Convert(x))
        } else {
            x
        }
    }
    fn f(&mut self, r: MathReg, op: MathOp) -> MathReg {
        let ty = self.p.ty(r);
        self.p.push(ty, op)
    }
    fn c(&mut self, like: MathReg, v: f64) -> MathReg {
        self.f(like, MathOp::FConst(v))
    }
    fn i32c(&mut self, v: i32) -> MathReg {
        self.p.push(MathTy::I32, MathOp::IConst(v as i64))
    }
    fn i64c(&mut self, v: i64) -> MathReg {
        self.p.push(MathTy::I64, MathOp::IConst(v))
    }
    fn add(&mut self, a: MathReg, b: MathReg) -> MathReg {
        self.f(a, MathOp::Add(a, b))
    }
    fn sub(&mut self, a: MathReg, b: MathReg) -> MathReg {
        self.f(a, MathOp::Sub(a, b))
    }
    fn mul(&mut self, a: MathReg, b: MathReg) -> MathReg {
        self.f(a, MathOp::Mul(a, b))
    }
    fn div(&mut self, a: MathReg, b: MathReg) -> MathReg {
        self.f(a, MathOp::Div(a, b))
    }
    fn fma(&mut self, a: MathReg, b: MathReg, c: MathReg) -> MathReg {
        self.f(a, MathOp::Fma(a, b, c))
    }
    fn addc(&mut self, a: MathReg, v: f64) -> MathReg {
        let c = self.c(a, v);
        self.add(a, c)
    }
    fn mulc(&mut self, a: MathReg, v: f64) -> MathReg {
        let c = self.c(a, v);
        self.mul(a, c)
    }
    fn neg(&mut self, a: MathReg) -> MathReg {
        self.f(a, MathOp::Neg(a))
    }
    fn abs(&mut self, a: MathReg) -> MathReg {
        self.f(a, MathOp::Abs(a))
    }
    fn minc(&mut self, a: MathReg, v: f64) -> MathReg {
        let c = self.c(a, v);
        self.f(a, MathOp::Min(a, c))
    }
    fn maxc(&mut self, a: MathReg, v: f64) -> MathReg {
        let c = self.c(a, v);
        self.f(a, MathOp::Max(a, c))
    }
    fn copysign(&mut self, mag: MathReg, sign: MathReg) -> MathReg {
        self.f(mag, MathOp::CopySign(mag, sign))
    }
    fn cmp(&mut self, c: MathCmp, a: MathReg, b: MathReg) -> MathReg {
        self.p.push(MathTy::Pred, MathOp::Cmp(c, a, b))
    }
    fn cmpc(&mut self, c: MathCmp, a: MathReg, v: f64) -> MathReg {
        let k = self.c(a, v);
        self.cmp(c, a, k)
    }
    fn is_nan(&mut self, a: MathReg) -> MathReg {
        self.p.push(MathTy::Pred, MathOp::IsNan(a))
    }
    fn or(&mut self, a: MathReg, b: MathReg) -> MathReg {
        self.p.push(MathTy::Pred, MathOp::Or(a, b))
    }
    fn and(&mut self, a: MathReg, b: MathReg) -> MathReg {
        self.p.push(MathTy::Pred, MathOp::And(a, b))
    }
    fn not(&mut self, a: MathReg) -> MathReg {
        self.p.push(MathTy::Pred, MathOp::Not(a))
    }
    fn select(&mut self, p: MathReg, a: MathReg, b: MathReg) -> MathReg {
        self.f(a, MathOp::Select(p, a, b))
    }
    /// `p ? v : x` for a float constant `v`.
    fn select_c(&mut self, p: MathReg, v: f64, x: MathReg) -> MathReg {
        let c = self.c(x, v);
        self.select(p, c, x)
    }
    fn int(&mut self, ty: MathTy, op: MathOp) -> MathReg {
        self.p.push(ty, op)
    }
    /// Horner's scheme `((c0 x + c1) x + ...) + cn` with fused multiply-adds.
    fn horner(&mut self, x: MathReg, coeffs: &[f64]) -> MathReg {
        let mut acc = self.c(x, coeffs[0]);
        for &k in &coeffs[1..] {
            let kc = self.c(x, k);
            acc = self.fma(acc, x, kc);
        }
        acc
    }
}

/// `e^x` of f32, as [`tessera_kernel::exp_poly::exp_f32`] computes it (no fused operations).
fn exp_f32(m: &mut M, x: MathReg) -> MathReg {
    let nan = m.is_nan(x);
    let c = m.maxc(x, ep::EXP_F32_LOW as f64);
    let c = m.minc(c, ep::EXP_F32_HIGH as f64);
    let t = m.mulc(c, ep::LOG2_E as f64);
    let t = m.addc(t, ep::ROUNDER as f64);
    let rounder = m.c(x, ep::ROUNDER as f64);
    let n = m.sub(t, rounder);
    let nh = m.mulc(n, ep::LN2_HIGH as f64);
    let r = m.sub(c, nh);
    let nl = m.mulc(n, ep::LN2_LOW as f64);
    let r = m.sub(r, nl);
    let mut p = m.c(x, ep::EXP_F32_POLY[0] as f64);
    for &k in &ep::EXP_F32_POLY[1..] {
        let pr = m.mul(p, r);
        p = m.addc(pr, k as f64);
    }
    let rr = m.mul(r, r);
    let y = m.mul(p, rr);
    let y = m.add(y, r);
    let y = m.addc(y, 1.0);
    let tb = m.int(MathTy::I32, MathOp::Bits(t));
    let rb = m.i32c(ep::ROUNDER.to_bits() as i32);
    let ni = m.int(MathTy::I32, MathOp::ISub(tb, rb));
    let half = m.int(MathTy::I32, MathOp::Sar(ni, 1));
    let rest = m.int(MathTy::I32, MathOp::ISub(ni, half));
    let mut out = y;
    for e in [half, rest] {
        let bias = m.i32c(127);
        let biased = m.int(MathTy::I32, MathOp::IAdd(e, bias));
        let bits = m.int(MathTy::I32, MathOp::Shl(biased, 23));
        let two_e = m.int(MathTy::F32, MathOp::FromBits(bits));
        out = m.mul(out, two_e);
    }
    m.select(nan, x, out)
}

/// `1/k!` for `k` in `0..n`.
fn inverse_factorials(n: usize) -> Vec<f64> {
    let mut fact = 1.0f64;
    (0..n)
        .map(|k| {
            if k > 0 {
                fact *= k as f64;
            }
            1.0 / fact
        })
        .collect()
}

/// `ln 2` in two parts, the first with trailing zero bits so `k * LN2_HI` is exact (fdlibm).
const LN2_HI: f64 = f64::from_bits(0x3FE6_2E42_FEE0_0000);
const LN2_LO: f64 = f64::from_bits(0x3DEA_39EF_3579_3C76);

/// `2^e` for an i32 `e` in `-1022..=1023`, built from its bits.
fn two_to_the(m: &mut M, e: MathReg) -> MathReg {
    let bias = m.i32c(1023);
    let biased = m.int(MathTy::I32, MathOp::IAdd(e, bias));
    let wide = m.int(MathTy::I64, MathOp::I32ToI64(biased));
    let bits = m.int(MathTy::I64, MathOp::Shl(wide, 52));
    m.int(MathTy::F64, MathOp::FromBits(bits))
}

/// `e^x` of f64: `x = k ln 2 + r` with `|r| <= ln 2 / 2` (ln 2 in two parts), `e^r` by its
/// Taylor polynomial of degree 13, and `2^k` applied as two exact powers of two so that
/// subnormal results round once.
fn exp(m: &mut M, x: MathReg) -> MathReg {
    exp_with_tail(m, x, None)
}

/// `e^(x + tail)` for a `tail` far below an ulp of `x`, added to the reduced argument.
fn exp_with_tail(m: &mut M, x: MathReg, tail: Option<MathReg>) -> MathReg {
    let nan = m.is_nan(x);
    let c = m.maxc(x, -746.0);
    let c = m.minc(c, 710.0);
    let t = m.mulc(c, std::f64::consts::LOG2_E);
    let k = m.f(t, MathOp::RoundEven(t));
    let nk = m.neg(k);
    let hi = m.c(x, LN2_HI);
    let lo = m.c(x, LN2_LO);
    let r = m.fma(nk, hi, c);
    let mut r = m.fma(nk, lo, r);
    if let Some(t) = tail {
        r = m.add(r, t);
    }
    let mut coeffs = inverse_factorials(14);
    coeffs.reverse();
    let y = m.horner(r, &coeffs);
    let ki = m.int(MathTy::I32, MathOp::ToI32(k));
    let half = m.int(MathTy::I32, MathOp::Sar(ki, 1));
    let rest = m.int(MathTy::I32, MathOp::ISub(ki, half));
    let p1 = two_to_the(m, half);
    let p2 = two_to_the(m, rest);
    let y = m.mul(y, p1);
    let y = m.mul(y, p2);
    m.select(nan, x, y)
}

/// `ln x` of f64: `x = 2^e m` with `m` in `[sqrt(1/2), sqrt 2)` (subnormals scaled by 2^54
/// first), `ln m = f - s (f - R(s^2))` with `f = m - 1`, `s = f / (2 + f)` and `R` the series
/// of `2 atanh(s) - 2s` (as fdlibm's `log`), then `e ln 2` added in two parts.
fn log(m: &mut M, x: MathReg) -> MathReg {
    log_parts(m, x).value
}

/// `ln x` as [`log`] computes it, and for finite positive `x` the parts it sums:
/// `ln x ~ hi + f + low` with `hi = e * LN2_HI` exact and `f` exact.
struct LogParts {
    hi: MathReg,
    f: MathReg,
    low: MathReg,
    value: MathReg,
}

fn log_parts(m: &mut M, x: MathReg) -> LogParts {
    let tiny = m.cmpc(MathCmp::Lt, x, f64::MIN_POSITIVE);
    let scaled = m.mulc(x, 2f64.powi(54));
    let xs = m.select(tiny, scaled, x);
    let bits = m.int(MathTy::I64, MathOp::Bits(xs));
    let top = m.int(MathTy::I64, MathOp::Shr(bits, 52));
    let biased = m.int(MathTy::I32, MathOp::Low32(top));
    let bias = m.i32c(1023);
    let bias_tiny = m.i32c(1023 + 54);
    let bias = m.int(MathTy::I32, MathOp::Select(tiny, bias_tiny, bias));
    let e = m.int(MathTy::I32, MathOp::ISub(biased, bias));
    let mant_mask = m.i64c(0x000F_FFFF_FFFF_FFFF);
    let one_bits = m.i64c(0x3FF0_0000_0000_0000);
    let mant = m.int(MathTy::I64, MathOp::BitAnd(bits, mant_mask));
    let mbits = m.int(MathTy::I64, MathOp::BitOr(mant, one_bits));
    let mv = m.int(MathTy::F64, MathOp::FromBits(mbits));
    let big = m.cmpc(MathCmp::Gt, mv, std::f64::consts::SQRT_2);
    let halved = m.mulc(mv, 0.5);
    let mv = m.select(big, halved, mv);
    let one = m.i32c(1);
    let zero = m.i32c(0);
    let inc = m.int(MathTy::I32, MathOp::Select(big, one, zero));
    let e = m.int(MathTy::I32, MathOp::IAdd(e, inc));
    let ef = m.int(MathTy::F64, MathOp::IToF(e));
    let f = m.addc(mv, -1.0);
    let two_f = m.addc(f, 2.0);
    let s = m.div(f, two_f);
    let z = m.mul(s, s);
    // 2 atanh(s) = 2s + s * R, R = 2z (1/3 + z/5 + z^2/7 + ...).
    let coeffs: Vec<f64> = (1..=11).rev().map(|k| 1.0 / (2 * k + 1) as f64).collect();
    let series = m.horner(z, &coeffs);
    let z2 = m.mulc(z, 2.0);
    let big_r = m.mul(z2, series);
    let f_minus_r = m.sub(f, big_r);
    let ns = m.neg(s);
    let corr = m.mul(ns, f_minus_r);
    let lo = m.c(x, LN2_LO);
    let low = m.fma(ef, lo, corr);
    let hi = m.mulc(ef, LN2_HI);
    let y = m.add(hi, f);
    let y = m.add(y, low);
    // Fix-ups: +inf, zero, negatives, NaN.
    let is_inf = m.cmpc(MathCmp::Eq, x, f64::INFINITY);
    let y = m.select(is_inf, x, y);
    let is_zero = m.cmpc(MathCmp::Eq, x, 0.0);
    let y = m.select_c(is_zero, f64::NEG_INFINITY, y);
    let negative = m.cmpc(MathCmp::Lt, x, 0.0);
    let y = m.select_c(negative, f64::NAN, y);
    let nan = m.is_nan(x);
    let value = m.select(nan, x, y);
    LogParts { hi, f, low, value }
}

/// `pi / 2` in four parts (fdlibm's `pio2_1`, `pio2_2`, `pio2_3`, `pio2_3t`); the first three
/// have trailing zero bits, so multiples of them by quadrant counts below 2^20 are exact.
const PIO2: [u64; 4] = [
    0x3FF9_21FB_5440_0000,
    0x3DD0_B461_1A60_0000,
    0x3BA3_198A_2E00_0000,
    0x397B_839A_2520_49C1,
];

/// `sin x` or `cos x` of f64: `x = k pi/2 + r` (Cody-Waite reduction with four parts of
/// pi/2, accurate for `|x| < 2^20 pi/2`; for finite `|x| >= 2^20` a slow path reduces by
/// Payne-Hanek instead, [`payne_hanek`]), Taylor polynomials of `sin r` (degree 19) and
/// `cos r` (degree 20) on `|r| <= pi/4`, and the quadrant `k mod 4` choosing between them.
fn sin_cos(m: &mut M, x: MathReg, cos: bool) -> MathReg {
    let t = m.mulc(x, std::f64::consts::FRAC_2_PI);
    let k = m.f(t, MathOp::RoundEven(t));
    let nk = m.neg(k);
    let mut r = x;
    for part in PIO2 {
        let p = m.c(x, f64::from_bits(part));
        r = m.fma(nk, p, r);
    }
    let a = m.abs(x);
    let large = m.cmpc(MathCmp::Ge, a, payne_hanek::LARGE);
    let finite = m.cmpc(MathCmp::Lt, a, f64::INFINITY);
    let slow = m.and(large, finite);
    let begin = m.p.push(MathTy::Pred, MathOp::BeginSlow(slow));
    let (k_slow, r_slow) = payne_hanek::reduce(m, x);
    m.p.push(MathTy::Pred, MathOp::EndSlow(begin));
    let k = m.p.push(
        MathTy::F64,
        MathOp::Merge {
            begin,
            taken: k_slow,
            otherwise: k,
        },
    );
    let r = m.p.push(
        MathTy::F64,
        MathOp::Merge {
            begin,
            taken: r_slow,
            otherwise: r,
        },
    );
    let quarter = m.mulc(k, 0.25);
    let fl = m.f(quarter, MathOp::Floor(quarter));
    let four_fl = m.mulc(fl, 4.0);
    let q = m.sub(k, four_fl);
    let z = m.mul(r, r);
    let inv = inverse_factorials(22);
    // sin r = r + r z S(z), S = -1/3! + z/5! - ...; cos r = 1 + z C(z), C = -1/2! + z/4! - ...
    let sign = |k: usize| if (k / 2) % 2 == 1 { -1.0 } else { 1.0 };
    let s_coeffs: Vec<f64> = (1..=9)
        .rev()
        .map(|n| sign(2 * n + 1) * inv[2 * n + 1])
        .collect();
    let c_coeffs: Vec<f64> = (1..=10).rev().map(|n| sign(2 * n) * inv[2 * n]).collect();
    let sp = m.horner(z, &s_coeffs);
    let rz = m.mul(r, z);
    let s = m.fma(rz, sp, r);
    let cp = m.horner(z, &c_coeffs);
    let one = m.c(x, 1.0);
    let c = m.fma(z, cp, one);
    let q1 = m.cmpc(MathCmp::Eq, q, 1.0);
    let q2 = m.cmpc(MathCmp::Eq, q, 2.0);
    let q3 = m.cmpc(MathCmp::Eq, q, 3.0);
    let odd = m.or(q1, q3);
    let (v, negate) = if cos {
        (m.select(odd, s, c), m.or(q1, q2))
    } else {
        (m.select(odd, c, s), m.cmpc(MathCmp::Ge, q, 2.0))
    };
    let nv = m.neg(v);
    m.select(negate, nv, v)
}

/// The Taylor coefficients of `tanh x = x + c3 x^3 + c5 x^5 + ...` from `y' = 1 - y^2`:
/// `c_{2n+1}` for `n` in `0..n`.
fn tanh_coefficients(n: usize) -> Vec<f64> {
    let len = 2 * n + 1;
    let mut c = vec![0.0f64; len];
    c[1] = 1.0;
    for k in 1..len - 1 {
        // (k + 1) c_{k+1} = -sum_{i+j=k} c_i c_j for k >= 1.
        let s: f64 = (0..=k).map(|i| c[i] * c[k - i]).sum();
        c[k + 1] = -s / (k + 1) as f64;
    }
    (0..n).map(|i| c[2 * i + 1]).collect()
}

/// `tanh x` of f64: its Taylor polynomial (degree 37) for `|x| < 0.5`, else
/// `sign(x) (1 - 2 / (e^{2|x|} + 1))`.
fn tanh(m: &mut M, x: MathReg) -> MathReg {
    let a = m.abs(x);
    let z = m.mul(x, x);
    let mut coeffs = tanh_coefficients(19);
    coeffs.remove(0);
    coeffs.reverse();
    let p = m.horner(z, &coeffs);
    let xz = m.mul(x, z);
    let small = m.fma(xz, p, x);
    let two_a = m.mulc(a, 2.0);
    let e = exp(m, two_a);
    let e1 = m.addc(e, 1.0);
    let two = m.c(x, 2.0);
    let q = m.div(two, e1);
    let one = m.c(x, 1.0);
    let big = m.sub(one, q);
    let big = m.copysign(big, x);
    let is_small = m.cmpc(MathCmp::Lt, a, 0.5);
    m.select(is_small, small, big)
}

/// Levels of the continued fraction of `erfc`.
const ERFC_LEVELS: usize = 60;
/// Where `erf` switches from its series to the continued fraction of `erfc`.
const ERF_SERIES_BELOW: f64 = 2.0;

/// `erf x` of f64: its Taylor series (degree 71) for `|x| < ERF_SERIES_BELOW`; above,
/// `1 - erfc |x|` with `erfc a = e^{-a^2} / sqrt(pi) K(a)`, `K` the continued fraction
/// `1 / (a + (1/2) / (a + 1 / (a + (3/2) / ...)))` of [`ERFC_LEVELS`] levels and `a^2` kept
/// exact in two parts; the sign of `x` restored.
fn erf(m: &mut M, x: MathReg) -> MathReg {
    let a = m.abs(x);
    let z = m.mul(x, x);
    // erf x = 2/sqrt(pi) sum (-1)^n x^(2n+1) / (n! (2n+1)).
    let inv = inverse_factorials(36);
    let two_over_sqrt_pi = std::f64::consts::FRAC_2_SQRT_PI;
    let coeffs: Vec<f64> = (0..36)
        .rev()
        .map(|n| {
            let s = if n % 2 == 1 { -1.0 } else { 1.0 };
            s * two_over_sqrt_pi * inv[n] / (2 * n + 1) as f64
        })
        .collect();
    let p = m.horner(z, &coeffs);
    let small = m.mul(x, p);
    let al = m.minc(a, 10.0);
    let mut t = al;
    for j in (1..=ERFC_LEVELS).rev() {
        let jc = m.c(x, j as f64 / 2.0);
        let d = m.div(jc, t);
        t = m.add(al, d);
    }
    let hi = m.mul(al, al);
    let nhi = m.neg(hi);
    let lo = m.fma(al, al, nhi);
    let e = exp(m, nhi);
    let one = m.c(x, 1.0);
    let one_minus_lo = m.sub(one, lo);
    let e = m.mul(e, one_minus_lo);
    let e = m.mulc(e, 1.0 / std::f64::consts::PI.sqrt());
    let erfc = m.div(e, t);
    let big = m.sub(one, erfc);
    let big = m.copysign(big, x);
    let is_small = m.cmpc(MathCmp::Lt, a, ERF_SERIES_BELOW);
    let y = m.select(is_small, small, big);
    let nan = m.is_nan(x);
    m.select(nan, x, y)
}

/// `pow(a, b)` of f64 as C's `pow` (Rust's `powf`): `e^{b ln |a|}`, with the sign of a negative
/// base for odd integer exponents, NaN for a finite negative base and a non-integer exponent,
/// and the special cases `pow(x, 0) = pow(1, y) = 1`, `pow(-1, +-inf) = 1`. `ln |a|` is
/// carried as a sum of two f64s and `b ln |a|` as an exact product plus its error, so exact
/// cases (`pow(2, 3)`) come out exact; the remaining error is that of `ln`'s polynomial part
/// times `|b|`.
fn pow_f64(m: &mut M, a: MathReg, b: MathReg) -> MathReg {
    let abs_a = m.abs(a);
    let parts = log_parts(m, abs_a);
    // ln|a| = s + t: s = hi + b_hi, with b_hi + b_lo = f + low (two-sums, |hi| >= |b_hi|).
    let b_hi = m.add(parts.f, parts.low);
    let f_minus = m.sub(parts.f, b_hi);
    let b_lo = m.add(f_minus, parts.low);
    let s = m.add(parts.hi, b_hi);
    let hi_minus = m.sub(parts.hi, s);
    let t = m.add(hi_minus, b_hi);
    let t = m.add(t, b_lo);
    // b (s + t) = p_hi + p_lo.
    let p_hi = m.mul(b, s);
    let np_hi = m.neg(p_hi);
    let p_err = m.fma(b, s, np_hi);
    let p_lo = m.fma(b, t, p_err);
    // Zero, infinite or NaN |a|, or a product past the range of exp: no tail.
    let plain = m.mul(b, parts.value);
    let positive = m.cmpc(MathCmp::Gt, abs_a, 0.0);
    let finite = m.cmpc(MathCmp::Lt, abs_a, f64::INFINITY);
    let regular = m.and(positive, finite);
    let p_abs = m.abs(p_hi);
    let in_range = m.cmpc(MathCmp::Lt, p_abs, 1000.0);
    let regular = m.and(regular, in_range);
    let x = m.select(regular, p_hi, plain);
    let zero = m.c(a, 0.0);
    let tail = m.select(regular, p_lo, zero);
    let r = exp_with_tail(m, x, Some(tail));
    // b an integer, and odd.
    let rb = m.f(b, MathOp::RoundEven(b));
    let integer = m.cmp(MathCmp::Eq, b, rb);
    let half = m.mulc(b, 0.5);
    let rh = m.f(half, MathOp::RoundEven(half));
    let half_integer = m.cmp(MathCmp::Eq, half, rh);
    let not_half_integer = m.not(half_integer);
    let odd = m.and(integer, not_half_integer);
    // A negative base (-0 included: its sign bit) flips the sign for odd exponents.
    let one = m.c(a, 1.0);
    let signed_one = m.copysign(one, a);
    let base_negative = m.cmpc(MathCmp::Lt, signed_one, 0.0);
    let flip = m.and(odd, base_negative);
    let neg_r = m.neg(r);
    let y = m.select(flip, neg_r, r);
    // A finite negative base with a finite non-integer exponent: NaN.
    let a_neg = m.cmpc(MathCmp::Lt, a, 0.0);
    let a_finite = m.cmpc(MathCmp::Gt, a, f64::NEG_INFINITY);
    let not_integer = m.not(integer);
    let b_abs = m.abs(b);
    let b_finite = m.cmpc(MathCmp::Lt, b_abs, f64::INFINITY);
    let bad = m.and(a_neg, a_finite);
    let bad = m.and(bad, not_integer);
    let bad = m.and(bad, b_finite);
    let y = m.select_c(bad, f64::NAN, y);
    // |a| == 1 with an infinite exponent, a == 1, b == 0: 1.
    let unit = m.cmpc(MathCmp::Eq, abs_a, 1.0);
    let b_inf = m.cmpc(MathCmp::Eq, b_abs, f64::INFINITY);
    let unit_inf = m.and(unit, b_inf);
    let y = m.select_c(unit_inf, 1.0, y);
    let a_one = m.cmpc(MathCmp::Eq, a, 1.0);
    let y = m.select_c(a_one, 1.0, y);
    let b_zero = m.cmpc(MathCmp::Eq, b, 0.0);
    m.select_c(b_zero, 1.0, y)
}
