//! Payne-Hanek argument reduction of sin and cos for large arguments: `|x| 2/pi` reduced
//! modulo 4 exactly, in integer arithmetic, from the bits of 2/pi that matter at `x`'s
//! exponent. It is the slow path of [`super::sin_cos`], taken for finite `|x| >= 2^20`, where
//! the Cody-Waite reduction with a few parts of pi/2 loses accuracy; it covers every finite
//! f64 (and so every f32, widened).
//!
//! With `|x| = M 2^E` (`M` the 53-bit significand), the bits of 2/pi before position `E - 1`
//! give multiples of 4 and drop out, so `|x| 2/pi mod 4 = (M W mod 2^192) 2^-190`, `W` the 192
//! bits of 2/pi from position `E - 1` on, cut from [`TWO_OVER_PI`] by a funnel shift of the
//! words selected by `E`. The product's top 2 bits are the quadrant, the next 126 bits the
//! fraction (the 53 bits of `M` times the bits of 2/pi left out are below 2^-136); the
//! fraction is rounded to the nearest quadrant, converted to a sum of three exact f64s and
//! multiplied by pi/2 in double-double arithmetic, so the reduced argument keeps 2^-117 of
//! absolute accuracy, enough for f64 results even at the arguments closest to a multiple of
//! pi/2 (2^-61 away, relative to the quadrant).

use super::M;
use crate::math_ir::{MathCmp, MathOp, MathReg, MathTy};

/// The bits of 2/pi after the binary point, 64 per word, most significant first (1216 bits:
/// enough for the largest f64 exponent, 971, plus the 192-bit window).
pub(super) const TWO_OVER_PI: [u64; 19] = [
    0xA2F9_836E_4E44_1529,
    0xFC27_57D1_F534_DDC0,
    0xDB62_9599_3C43_9041,
    0xFE51_63AB_DEBB_C561,
    0xB724_6E3A_424D_D2E0,
    0x0649_2EEA_09D1_921C,
    0xFE1D_EB1C_B129_A73E,
    0xE882_35F5_2EBB_4484,
    0xE99C_7026_B45F_7E41,
    0x3991_D639_8353_39F4,
    0x9C84_5F8B_BDF9_283B,
    0x1FF8_97FF_DE05_980F,
    0xEF2F_118B_5A0A_6D1F,
    0x6D36_7ECF_27CB_09B7,
    0x4F46_3F66_9E5F_EA2D,
    0x7527_BAC7_EBE5_F17B,
    0x3D07_39F7_8A52_92EA,
    0x6BFB_5FB1_1F8D_5D08,
    0x5603_3046_FC7B_6BAB,
];

/// Where the slow path starts: below, the Cody-Waite reduction is accurate.
pub(super) const LARGE: f64 = 1048576.0;

/// pi/2 as a double-double.
const PIO2_HI: f64 = std::f64::consts::FRAC_PI_2;
const PIO2_LO: f64 = 6.123_233_995_736_766e-17;

impl M {
    fn i64op(&mut self, op: MathOp) -> MathReg {
        self.int(MathTy::I64, op)
    }
    fn i32op(&mut self, op: MathOp) -> MathReg {
        self.int(MathTy::I32, op)
    }
    /// `p ? 1 : 0` as an i64.
    fn flag(&mut self, p: MathReg) -> MathReg {
        let one = self.i64c(1);
        let zero = self.i64c(0);
        self.i64op(MathOp::Select(p, one, zero))
    }
}

/// The reduction of a finite `x` with `|x| >= LARGE`: `(k, r)` with `x = k pi/2 + r`, `k` an
/// integer (as an f64, in `-4..=4`: only `k mod 4` matters) and `|r| <= pi/4`.
pub(super) fn reduce(m: &mut M, x: MathReg) -> (MathReg, MathReg) {
    let a = m.abs(x);
    let bits = m.i64op(MathOp::Bits(a));
    let top = m.i64op(MathOp::Shr(bits, 52));
    let biased = m.i32op(MathOp::Low32(top));
    // |x| = M 2^E; the window starts at bit E - 1 of 2/pi (bit 1 is the first after the
    // point), which is bit E + 62 (from 0) of the table with a zero word in front (2/pi < 1:
    // its bits at positions up to 0 are zero).
    let start_bias = m.i32c(1075 - 62);
    let start = m.i32op(MathOp::ISub(biased, start_bias));
    let word = m.i32op(MathOp::Sar(start, 6));
    let sixty_three = m.i32c(63);
    let shift = m.i32op(MathOp::BitAnd(start, sixty_three));
    let sixty_four = m.i32c(64);
    let back = m.i32op(MathOp::ISub(sixty_four, shift));
    let mant_mask = m.i64c(0x000F_FFFF_FFFF_FFFF);
    let implicit = m.i64c(1 << 52);
    let mant = m.i64op(MathOp::BitAnd(bits, mant_mask));
    let mant = m.i64op(MathOp::BitOr(mant, implicit));
    // The four table words from `word` on (`word` is at most 16 for finite f64s).
    let table: Vec<u64> = std::iter::once(0).chain(TWO_OVER_PI).collect();
    let last_word = table.len() - 4;
    let is_word: Vec<MathReg> = (1..=last_word)
        .map(|i| {
            let c = m.i32c(i as i32);
            m.p.push(MathTy::Pred, MathOp::IEq(word, c))
        })
        .collect();
    let words: Vec<MathReg> = (0..4)
        .map(|j| {
            let mut acc = m.i64c(table[j] as i64);
            for (i, &hit) in is_word.iter().enumerate() {
                let w = m.i64c(table[i + 1 + j] as i64);
                acc = m.i64op(MathOp::Select(hit, w, acc));
            }
            acc
        })
        .collect();
    // The 192-bit window W = w0 w1 w2.
    let window: Vec<MathReg> = (0..3)
        .map(|j| {
            let high = m.i64op(MathOp::ShlV(words[j], shift));
            let low = m.i64op(MathOp::ShrV(words[j + 1], back));
            m.i64op(MathOp::BitOr(high, low))
        })
        .collect();
    // M W mod 2^192 = r2 r1 r0.
    let r0 = m.i64op(MathOp::MulLo(mant, window[2]));
    let hi2 = m.i64op(MathOp::MulHi(mant, window[2]));
    let lo1 = m.i64op(MathOp::MulLo(mant, window[1]));
    let hi1 = m.i64op(MathOp::MulHi(mant, window[1]));
    let lo0 = m.i64op(MathOp::MulLo(mant, window[0]));
    let r1 = m.i64op(MathOp::IAdd(hi2, lo1));
    let carry = m.p.push(MathTy::Pred, MathOp::ULt(r1, hi2));
    let carry = m.flag(carry);
    let r2 = m.i64op(MathOp::IAdd(hi1, lo0));
    let r2 = m.i64op(MathOp::IAdd(r2, carry));
    // The quadrant (bits 191 and 190) and the fraction's next 128 bits.
    let quadrant = m.i64op(MathOp::Shr(r2, 62));
    let f_hi = m.i64op(MathOp::Shl(r2, 2));
    let spill = m.i64op(MathOp::Shr(r1, 62));
    let f_hi = m.i64op(MathOp::BitOr(f_hi, spill));
    let f_lo = m.i64op(MathOp::Shl(r1, 2));
    let spill = m.i64op(MathOp::Shr(r0, 62));
    let f_lo = m.i64op(MathOp::BitOr(f_lo, spill));
    // A fraction of 1/2 or more rounds up to the next quadrant: the fraction becomes
    // `-(1 - f)`, its 128-bit two's complement with the sign kept apart.
    let below_half = m.i64c(i64::MAX);
    let up = m.p.push(MathTy::Pred, MathOp::ULt(below_half, f_hi));
    let zero = m.i64c(0);
    let neg_lo = m.i64op(MathOp::ISub(zero, f_lo));
    let lo_zero = m.p.push(MathTy::Pred, MathOp::IEq(f_lo, zero));
    let lo_nonzero = m.not(lo_zero);
    let borrow = m.flag(lo_nonzero);
    let neg_hi = m.i64op(MathOp::ISub(zero, f_hi));
    let neg_hi = m.i64op(MathOp::ISub(neg_hi, borrow));
    let f_hi = m.i64op(MathOp::Select(up, neg_hi, f_hi));
    let f_lo = m.i64op(MathOp::Select(up, neg_lo, f_lo));
    let step = m.flag(up);
    let quadrant = m.i64op(MathOp::IAdd(quadrant, step));
    // The fraction as three exact f64s: f_hi's two halves and f_lo's top 53 bits.
    let part = |m: &mut M, v: MathReg, scale: f64| {
        let f = m.p.push(MathTy::F64, MathOp::U64ToF(v));
        m.mulc(f, scale)
    };
    let upper = m.i64op(MathOp::Shr(f_hi, 32));
    let p1 = part(m, upper, 2f64.powi(-32));
    let low_mask = m.i64c(0xFFFF_FFFF);
    let lower = m.i64op(MathOp::BitAnd(f_hi, low_mask));
    let p2 = part(m, lower, 2f64.powi(-64));
    let tail = m.i64op(MathOp::Shr(f_lo, 11));
    let p3 = part(m, tail, 2f64.powi(-117));
    // s = p1 + p2 + p3 as a double-double (fast two-sums: the parts decrease).
    let t = m.add(p2, p3);
    let t_err = m.sub(t, p2);
    let t_lo = m.sub(p3, t_err);
    let s = m.add(p1, t);
    let s_err = m.sub(s, p1);
    let s_lo = m.sub(t, s_err);
    let s_lo = m.add(s_lo, t_lo);
    // r = s pi/2.
    let pio2 = m.c(x, PIO2_HI);
    let r_hi = m.mul(s, pio2);
    let neg_r_hi = m.neg(r_hi);
    let r_err = m.fma(s, pio2, neg_r_hi);
    let cross = m.mulc(s, PIO2_LO);
    let cross = m.fma(s_lo, pio2, cross);
    let r_lo = m.add(r_err, cross);
    let r = m.add(r_hi, r_lo);
    let neg_r = m.neg(r);
    let r = m.select(up, neg_r, r);
    // x < 0: the reduction of |x|, negated.
    let k = m.p.push(MathTy::I32, MathOp::Low32(quadrant));
    let k = m.p.push(MathTy::F64, MathOp::IToF(k));
    let negative = m.cmpc(MathCmp::Lt, x, 0.0);
    let neg_k = m.neg(k);
    let k = m.select(negative, neg_k, k);
    let neg_r = m.neg(r);
    let r = m.select(negative, neg_r, r);
    (k, r)
}
