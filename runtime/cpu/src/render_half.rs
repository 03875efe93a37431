//! The half storage types (f16, bf16) in cranelift IR: an element is an `i16` (its bits),
//! loaded and stored as such, and converted to and from f32 with integer operations, without
//! branches (cranelift has no half arithmetic and x64 no scalar f16 conversion it lowers).
//! f16 and bf16 widen exactly; f32 narrows to nearest even, overflowing to infinity, a NaN
//! staying NaN (its payload is not kept), as the interpreter's `half` conversions do. Kernels
//! with half buffers are scalar code (the schedule vectorises all-f32 kernels only).

use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{InstBuilder, MemFlagsData, Value, types};
use cranelift_frontend::FunctionBuilder;
use tessera_kernel::ScalarType;

/// `x` (an `i16` of f16 or bf16 bits when `from` is a half type, else an f32) converted to
/// `to`; one of the two is a half type, the other f32 (what the kernel verifier admits).
pub(crate) fn half_cast(
    b: &mut FunctionBuilder,
    x: Value,
    from: ScalarType,
    to: ScalarType,
) -> Value {
    match (from, to) {
        (ScalarType::F16, _) => f16_to_f32(b, x),
        (ScalarType::BF16, _) => bf16_to_f32(b, x),
        (_, ScalarType::BF16) => f32_to_bf16(b, x),
        _ => f32_to_f16(b, x),
    }
}

fn bits_of(b: &mut FunctionBuilder, x: Value) -> Value {
    b.ins().bitcast(types::I32, MemFlagsData::new(), x)
}

fn float_of(b: &mut FunctionBuilder, bits: Value) -> Value {
    b.ins().bitcast(types::F32, MemFlagsData::new(), bits)
}

/// bf16 is the high half of an f32.
fn bf16_to_f32(b: &mut FunctionBuilder, h: Value) -> Value {
    let wide = b.ins().uextend(types::I32, h);
    let bits = b.ins().ishl_imm_s(wide, 16);
    float_of(b, bits)
}

/// The f32 rounded to bf16: `bits + 0x7fff + (bit 16)` keeps the high half rounded to nearest
/// even; a NaN is made quiet instead (the addition could carry it into infinity).
fn f32_to_bf16(b: &mut FunctionBuilder, x: Value) -> Value {
    let bits = bits_of(b, x);
    let odd = b.ins().ushr_imm_s(bits, 16);
    let odd = b.ins().band_imm_s(odd, 1);
    let bias = b.ins().iadd_imm_s(odd, 0x7fff);
    let rounded = b.ins().iadd(bits, bias);
    let rounded = b.ins().ushr_imm_s(rounded, 16);
    let quiet = b.ins().ushr_imm_s(bits, 16);
    let quiet = b.ins().bor_imm_s(quiet, 0x40);
    let nan = b
        .ins()
        .fcmp(cranelift_codegen::ir::condcodes::FloatCC::Unordered, x, x);
    let r = b.ins().select(nan, quiet, rounded);
    b.ins().ireduce(types::I16, r)
}

/// f16 bits to f32: the exponent rebiased for normal numbers, set to all ones for infinities
/// and NaN, and subnormals (and zero) converted from their integer significand times 2^-24.
fn f16_to_f32(b: &mut FunctionBuilder, h: Value) -> Value {
    let h = b.ins().uextend(types::I32, h);
    let sign = b.ins().band_imm_s(h, 0x8000);
    let sign = b.ins().ishl_imm_s(sign, 16);
    let magnitude = b.ins().band_imm_s(h, 0x7fff);
    let shifted = b.ins().ishl_imm_s(magnitude, 13);
    let normal = b.ins().iadd_imm_s(shifted, (127 - 15) << 23);
    let special = b.ins().bor_imm_s(shifted, 0x7f80_0000);
    let tiny = b.ins().fcvt_from_uint(types::F32, magnitude);
    let scale = b.ins().f32const(f32::from_bits((127 - 24) << 23));
    let tiny = b.ins().fmul(tiny, scale);
    let tiny = bits_of(b, tiny);
    let is_special = b
        .ins()
        .icmp_imm_u(IntCC::UnsignedGreaterThanOrEqual, magnitude, 0x7c00);
    let is_tiny = b
        .ins()
        .icmp_imm_u(IntCC::UnsignedLessThan, magnitude, 0x0400);
    let r = b.ins().select(is_tiny, tiny, normal);
    let r = b.ins().select(is_special, special, r);
    let r = b.ins().bor(r, sign);
    float_of(b, r)
}

/// f32 to f16 bits, rounded to nearest even (after F. Giesen's `float_to_half_fast3_rtne`):
/// magnitudes from 65520 up overflow to infinity (NaN gives the quiet NaN 0x7e00); below the
/// smallest normal f16, adding 0.5 (as f32, rounding to nearest even) leaves the f16 subnormal's
/// significand in the low bits; otherwise the exponent is rebiased and the 13 dropped bits
/// rounded by adding 0xfff plus the kept significand's lowest bit.
fn f32_to_f16(b: &mut FunctionBuilder, x: Value) -> Value {
    let bits = bits_of(b, x);
    let sign = b.ins().band_imm_s(bits, 0x8000_0000u32 as i32 as i64);
    let magnitude = b.ins().bxor(bits, sign);
    let inf_or_nan = b
        .ins()
        .icmp_imm_u(IntCC::UnsignedGreaterThan, magnitude, 0x7f80_0000);
    let nan_or_inf_bits = {
        let nan = b.ins().iconst(types::I32, 0x7e00);
        let inf = b.ins().iconst(types::I32, 0x7c00);
        b.ins().select(inf_or_nan, nan, inf)
    };
    // Subnormal results: 0.5 has the exponent that puts the f16 subnormal unit at bit 0.
    const DENORM_MAGIC: i64 = ((127 - 15) + (23 - 10) + 1) << 23;
    let as_float = float_of(b, magnitude);
    let magic = b.ins().f32const(f32::from_bits(DENORM_MAGIC as u32));
    let sum = b.ins().fadd(as_float, magic);
    let sum = bits_of(b, sum);
    let subnormal = b.ins().iadd_imm_s(sum, -DENORM_MAGIC);
    // Normal results.
    let odd = b.ins().ushr_imm_s(magnitude, 13);
    let odd = b.ins().band_imm_s(odd, 1);
    let rebiased = b
        .ins()
        .iadd_imm_s(magnitude, (((15 - 127) << 23) + 0xfff) as i64);
    let rounded = b.ins().iadd(rebiased, odd);
    let normal = b.ins().ushr_imm_s(rounded, 13);
    let overflow = b.ins().icmp_imm_u(
        IntCC::UnsignedGreaterThanOrEqual,
        magnitude,
        (127 + 16) << 23,
    );
    let small = b
        .ins()
        .icmp_imm_u(IntCC::UnsignedLessThan, magnitude, 113 << 23);
    let r = b.ins().select(small, subnormal, normal);
    let r = b.ins().select(overflow, nan_or_inf_bits, r);
    let sign = b.ins().ushr_imm_s(sign, 16);
    let r = b.ins().bor(r, sign);
    b.ins().ireduce(types::I16, r)
}
