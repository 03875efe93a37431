//! Bit-exact float semantics of the PTX instructions the emulator runs: IEEE round-to-nearest
//! arithmetic (Rust's own), PTX's NaN-ignoring min/max, directed rounding of `cvt`, and the
//! `.approx.ftz` transcendentals computed exactly (their approximation error is not modelled).
//! Every NaN result is the canonical NaN a GPU produces (all exponent and mantissa bits set,
//! sign clear: `0x7fffffff`), except for `neg`/`abs`/`copysign`, which only move the sign bit.

use super::program::{FloatOp, FloatUnaryOp, Rounding};

/// The operations shared by f32 and f64, on raw bits.
pub trait PtxFloat: Copy + PartialOrd + std::ops::Neg<Output = Self> {
    const CANONICAL_NAN: u64;
    const SIGN: u64;
    fn from_bits64(bits: u64) -> Self;
    fn bits64(self) -> u64;
    fn is_nan(self) -> bool;
    fn is_infinite(self) -> bool;
    fn is_subnormal(self) -> bool;
    fn zero() -> Self;
    fn one() -> Self;
    fn add(self, other: Self) -> Self;
    fn sub(self, other: Self) -> Self;
    fn mul(self, other: Self) -> Self;
    fn div(self, other: Self) -> Self;
    fn fma(self, b: Self, c: Self) -> Self;
    fn sqrt(self) -> Self;
    fn round_integral(self, rounding: Rounding) -> Self;
}

macro_rules! impl_ptx_float {
    ($t:ty, $bits:ty, $nan:expr) => {
        impl PtxFloat for $t {
            const CANONICAL_NAN: u64 = $nan;
            const SIGN: u64 = 1 << (<$bits>::BITS - 1);
            fn from_bits64(bits: u64) -> Self {
                <$t>::from_bits(bits as $bits)
            }
            fn bits64(self) -> u64 {
                self.to_bits() as u64
            }
            fn is_nan(self) -> bool {
                <$t>::is_nan(self)
            }
            fn is_infinite(self) -> bool {
                <$t>::is_infinite(self)
            }
            fn is_subnormal(self) -> bool {
                <$t>::is_subnormal(self)
            }
            fn zero() -> Self {
                0.0
            }
            fn one() -> Self {
                1.0
            }
            fn add(self, other: Self) -> Self {
                self + other
            }
            fn sub(self, other: Self) -> Self {
                self - other
            }
            fn mul(self, other: Self) -> Self {
                self * other
            }
            fn div(self, other: Self) -> Self {
                self / other
            }
            fn fma(self, b: Self, c: Self) -> Self {
                self.mul_add(b, c)
            }
            fn sqrt(self) -> Self {
                <$t>::sqrt(self)
            }
            fn round_integral(self, rounding: Rounding) -> Self {
                match rounding {
                    Rounding::IntNearest | Rounding::Nearest => self.round_ties_even(),
                    Rounding::IntZero | Rounding::Zero => self.trunc(),
                    Rounding::IntDown | Rounding::Down => self.floor(),
                    Rounding::IntUp | Rounding::Up => self.ceil(),
                }
            }
        }
    };
}

impl_ptx_float!(f32, u32, 0x7fff_ffff);
impl_ptx_float!(f64, u64, 0x7fff_ffff_ffff_ffff);

/// The bits of `x`, with any NaN replaced by the canonical NaN.
pub fn canonical<F: PtxFloat>(x: F) -> u64 {
    if x.is_nan() {
        F::CANONICAL_NAN
    } else {
        x.bits64()
    }
}

/// `min`/`max`: a NaN operand is ignored (both NaN: NaN), and -0 orders below +0.
fn min_max<F: PtxFloat>(a: F, b: F, want_max: bool) -> u64 {
    match (a.is_nan(), b.is_nan()) {
        (true, true) => F::CANONICAL_NAN,
        (true, false) => b.bits64(),
        (false, true) => a.bits64(),
        (false, false) => {
            let zeros = a == F::zero() && b == F::zero();
            let a_first = if zeros {
                // Equal zeros: order by sign, -0 < +0.
                (a.bits64() & F::SIGN != 0) != want_max
            } else {
                (a < b) != want_max
            };
            if a_first { a.bits64() } else { b.bits64() }
        }
    }
}

pub fn binary<F: PtxFloat>(op: FloatOp, a: u64, b: u64) -> u64 {
    let (x, y) = (F::from_bits64(a), F::from_bits64(b));
    match op {
        FloatOp::Add => canonical(x.add(y)),
        FloatOp::Sub => canonical(x.sub(y)),
        FloatOp::Mul => canonical(x.mul(y)),
        FloatOp::Div => canonical(x.div(y)),
        FloatOp::Min => min_max(x, y, false),
        FloatOp::Max => min_max(x, y, true),
        // `copysign d, a, b`: the magnitude of b with the sign of a.
        FloatOp::CopySign => (b & !F::SIGN) | (a & F::SIGN),
    }
}

pub fn fma<F: PtxFloat>(a: u64, b: u64, c: u64) -> u64 {
    canonical(F::from_bits64(a).fma(F::from_bits64(b), F::from_bits64(c)))
}

pub fn unary<F: PtxFloat>(op: FloatUnaryOp, a: u64) -> u64 {
    let x = F::from_bits64(a);
    match op {
        FloatUnaryOp::Neg => a ^ F::SIGN,
        FloatUnaryOp::Abs => a & !F::SIGN,
        FloatUnaryOp::Sqrt => canonical(x.sqrt()),
        FloatUnaryOp::Rcp => canonical(F::one().div(x)),
        FloatUnaryOp::Ex2 | FloatUnaryOp::Lg2 => {
            let x = f32::from_bits(a as u32);
            approx_ftz(op, x) as u64
        }
    }
}

/// `ex2.approx.ftz.f32` / `lg2.approx.ftz.f32`, computed exactly (in f64, rounded once):
/// subnormal inputs and results are flushed to zero of the same sign.
fn approx_ftz(op: FloatUnaryOp, x: f32) -> u32 {
    let x = if x.is_subnormal() {
        0.0f32.copysign(x)
    } else {
        x
    };
    let exact = if op == FloatUnaryOp::Ex2 {
        (x as f64).exp2()
    } else {
        (x as f64).log2()
    };
    let r = exact as f32;
    let r = if r.is_subnormal() {
        0.0f32.copysign(r)
    } else {
        r
    };
    canonical(r) as u32
}

/// `cvt.{rn,rz,rm,rp}.f32.f64`: narrowing with a directed rounding mode.
pub fn narrow(x: f64, rounding: Rounding) -> u32 {
    if x.is_nan() {
        return f32::CANONICAL_NAN as u32;
    }
    let nearest = x as f32;
    let r = match rounding {
        Rounding::Nearest => nearest,
        Rounding::Zero if (nearest as f64).abs() > x.abs() => toward_zero(nearest),
        Rounding::Down if (nearest as f64) > x => nearest.next_down(),
        Rounding::Up if (nearest as f64) < x => nearest.next_up(),
        // Integral roundings narrow to the nearest after rounding the f64 to an integer.
        Rounding::IntNearest | Rounding::IntZero | Rounding::IntDown | Rounding::IntUp => {
            x.round_integral(rounding) as f32
        }
        _ => nearest,
    };
    r.to_bits()
}

fn toward_zero(x: f32) -> f32 {
    if x > 0.0 { x.next_down() } else { x.next_up() }
}

/// `setp` on floats: ordered comparisons are false with a NaN operand, unordered ones true.
pub fn compare<F: PtxFloat>(cmp: super::program::Cmp, a: u64, b: u64) -> bool {
    use super::program::Cmp;
    let (x, y) = (F::from_bits64(a), F::from_bits64(b));
    let unordered = x.is_nan() || y.is_nan();
    match cmp {
        Cmp::Eq => x == y,
        Cmp::Ne => !unordered && x != y,
        Cmp::Lt => x < y,
        Cmp::Le => x <= y,
        Cmp::Gt => x > y,
        Cmp::Ge => x >= y,
        Cmp::Equ => unordered || x == y,
        Cmp::Neu => x != y,
        Cmp::Ltu => unordered || x < y,
        Cmp::Leu => unordered || x <= y,
        Cmp::Gtu => unordered || x > y,
        Cmp::Geu => unordered || x >= y,
        Cmp::Num => !unordered,
        Cmp::Nan => unordered,
    }
}
