//! f32 `exp` rendered inline, scalar or F32X4: the same IEEE operations in the same order as
//! `tessera_kernel::exp_poly::exp_f32` (the interpreter's), so both agree bit for bit, and a
//! vectorised softmax or sigmoid runs four lanes at once instead of four calls.

use cranelift_codegen::ir::condcodes::FloatCC;
use cranelift_codegen::ir::{InstBuilder, MemFlagsData, Type, Value, types};
use cranelift_frontend::FunctionBuilder;
use tessera_kernel::exp_poly::{
    EXP_F32_HIGH, EXP_F32_LOW, EXP_F32_POLY, LN2_HIGH, LN2_LOW, LOG2_E, ROUNDER,
};

/// `e^x` of `x`, an F32 (`lanes == 1`) or an F32X4.
pub(crate) fn exp_f32(b: &mut FunctionBuilder, x: Value, lanes: usize) -> Value {
    let (float, int): (Type, Type) = if lanes > 1 {
        (types::F32X4, types::I32X4)
    } else {
        (types::F32, types::I32)
    };
    let constant = |b: &mut FunctionBuilder, c: f32| {
        let s = b.ins().f32const(c);
        if lanes > 1 {
            b.ins().splat(float, s)
        } else {
            s
        }
    };
    let integer = |b: &mut FunctionBuilder, c: i64| {
        let s = b.ins().iconst(types::I32, c);
        if lanes > 1 { b.ins().splat(int, s) } else { s }
    };
    let (low, high) = (constant(b, EXP_F32_LOW), constant(b, EXP_F32_HIGH));
    let c = pick_if(b, FloatCC::LessThan, x, low, lanes);
    let c = pick_if(b, FloatCC::GreaterThan, c, high, lanes);
    let log2e = constant(b, LOG2_E);
    let scaled = b.ins().fmul(c, log2e);
    // Rounding by adding 1.5 * 2^23: `n` as a float, and as an integer from the sum's bits.
    let rounder = constant(b, ROUNDER);
    let rounded = b.ins().fadd(scaled, rounder);
    let n = b.ins().fsub(rounded, rounder);
    let (ln2_high, ln2_low) = (constant(b, LN2_HIGH), constant(b, LN2_LOW));
    let t = b.ins().fmul(n, ln2_high);
    let r = b.ins().fsub(c, t);
    let t = b.ins().fmul(n, ln2_low);
    let r = b.ins().fsub(r, t);
    let mut p = constant(b, EXP_F32_POLY[0]);
    for &k in &EXP_F32_POLY[1..] {
        let pr = b.ins().fmul(p, r);
        let k = constant(b, k);
        p = b.ins().fadd(pr, k);
    }
    let rr = b.ins().fmul(r, r);
    let y = b.ins().fmul(p, rr);
    let y = b.ins().fadd(y, r);
    let one = constant(b, 1.0);
    let y = b.ins().fadd(y, one);
    // `2^n` as two powers of two, `2^(n >> 1)` and `2^(n - (n >> 1))`, from exponent bits.
    let t_bits = b.ins().bitcast(int, MemFlagsData::new(), rounded);
    let rounder_bits = integer(b, i64::from(ROUNDER.to_bits()));
    let n = b.ins().isub(t_bits, rounder_bits);
    let one_bit = b.ins().iconst(types::I32, 1);
    let half = b.ins().sshr(n, one_bit);
    let rest = b.ins().isub(n, half);
    let bias = integer(b, 127);
    let mantissa_bits = b.ins().iconst(types::I32, 23);
    let power = |b: &mut FunctionBuilder, e: Value| {
        let biased = b.ins().iadd(e, bias);
        let bits = b.ins().ishl(biased, mantissa_bits);
        b.ins().bitcast(float, MemFlagsData::new(), bits)
    };
    let (p1, p2) = (power(b, half), power(b, rest));
    let y = b.ins().fmul(y, p1);
    b.ins().fmul(y, p2)
}

/// `bound` where `x cc bound` holds, else `x`: one half of the clamp. A NaN `x` compares false
/// and stays NaN, as `fmax`/`fmin` would keep it, but in a compare and a blend per vector rather
/// than the longer sequence x86 needs for `fmax`/`fmin`'s signed-zero and NaN rules (the bounds
/// are neither zero nor NaN, so those rules never apply here).
fn pick_if(b: &mut FunctionBuilder, cc: FloatCC, x: Value, bound: Value, lanes: usize) -> Value {
    let past = b.ins().fcmp(cc, x, bound);
    if lanes > 1 {
        let mask = b.ins().bitcast(types::F32X4, MemFlagsData::new(), past);
        b.ins().bitselect(mask, bound, x)
    } else {
        b.ins().select(past, bound, x)
    }
}
