//! The element types a GEMM reads and writes (f16, bf16, f32, f64), and the instructions that
//! move them: global loads into registers (16-bit elements zero-extended into `.b32`
//! registers, so no 16-bit register class is needed), conversions to and from the f32
//! accumulator (`cvt.rn.f16x2.f32` / `cvt.rn.bf16x2.f32` round to nearest even; f16 -> f32 is
//! exact integer and float arithmetic, bf16 -> f32 a shift), and stores.

use crate::emit::{Emitter, Reg, RegClass, f32_imm};
use tessera_kernel::ScalarType;
use tessera_tensor::DType;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Element {
    F16,
    BF16,
    F32,
    F64,
}

impl Element {
    pub fn of_dtype(dtype: DType) -> Option<Element> {
        Some(match dtype {
            DType::F16 => Element::F16,
            DType::BF16 => Element::BF16,
            DType::F32 => Element::F32,
            DType::F64 => Element::F64,
            _ => return None,
        })
    }

    pub fn of_scalar(ty: ScalarType) -> Option<Element> {
        match ty {
            ScalarType::F32 => Some(Element::F32),
            ScalarType::F64 => Some(Element::F64),
            _ => None,
        }
    }

    pub fn dtype(self) -> DType {
        match self {
            Element::F16 => DType::F16,
            Element::BF16 => DType::BF16,
            Element::F32 => DType::F32,
            Element::F64 => DType::F64,
        }
    }

    pub fn bytes(self) -> usize {
        match self {
            Element::F16 | Element::BF16 => 2,
            Element::F32 => 4,
            Element::F64 => 8,
        }
    }

    /// The accumulator's register class: f64 for f64, f32 otherwise.
    pub fn acc_class(self) -> RegClass {
        if self == Element::F64 {
            RegClass::F64
        } else {
            RegClass::F32
        }
    }

    /// The accumulator's type suffix.
    pub fn acc_suffix(self) -> &'static str {
        if self == Element::F64 { "f64" } else { "f32" }
    }

    /// The register class an element is loaded into: `.b32` for 16-bit elements.
    pub fn load_class(self) -> RegClass {
        match self {
            Element::F16 | Element::BF16 => RegClass::B32,
            Element::F32 => RegClass::F32,
            Element::F64 => RegClass::F64,
        }
    }

    /// The `ld`/`st` type suffix.
    pub fn memory_suffix(self) -> &'static str {
        match self {
            Element::F16 | Element::BF16 => "u16",
            Element::F32 => "f32",
            Element::F64 => "f64",
        }
    }

    /// Loads the element at `address` where `inside` holds, zero elsewhere (no access made).
    pub fn load_or_zero(self, e: &mut Emitter, address: Reg, inside: Reg) -> Reg {
        let d = e.reg(self.load_class());
        match self {
            Element::F16 | Element::BF16 => e.ins(format!("mov.b32 {d}, 0")),
            Element::F32 => e.ins(format!("mov.f32 {d}, {}", f32_imm(0.0))),
            Element::F64 => e.ins(format!("mov.f64 {d}, 0d0000000000000000")),
        }
        e.ins(format!(
            "@{inside} ld.global.{} {d}, [{address}]",
            self.memory_suffix()
        ));
        d
    }

    /// Loads the element at `address` converted to the accumulator type.
    pub fn load_as_acc(self, e: &mut Emitter, address: Reg) -> Reg {
        let raw = e.reg(self.load_class());
        e.ins(format!(
            "ld.global.{} {raw}, [{address}]",
            self.memory_suffix()
        ));
        match self {
            Element::F32 | Element::F64 => raw,
            Element::BF16 => {
                let bits = e.reg(RegClass::B32);
                e.ins(format!("shl.b32 {bits}, {raw}, 16"));
                let f = e.reg(RegClass::F32);
                e.ins(format!("mov.b32 {f}, {bits}"));
                f
            }
            Element::F16 => f16_to_f32(e, raw),
        }
    }

    /// Stores the accumulator-typed `value` at `address`, rounded to the element type.
    pub fn store_from_acc(self, e: &mut Emitter, address: Reg, value: Reg) {
        match self {
            Element::F32 | Element::F64 => {
                e.ins(format!(
                    "st.global.{} [{address}], {value}",
                    self.memory_suffix()
                ));
            }
            Element::F16 | Element::BF16 => {
                // Both halves get the value, so the low half stored is it whichever half the
                // first source fills.
                let packed = e.reg(RegClass::B32);
                let x2 = if self == Element::F16 {
                    "f16x2"
                } else {
                    "bf16x2"
                };
                e.ins(format!("cvt.rn.{x2}.f32 {packed}, {value}, {value}"));
                e.ins(format!("st.global.u16 [{address}], {packed}"));
            }
        }
    }
}

/// The f16 in the low 16 bits of `h` as an f32, exactly: the magnitude's bits moved to the
/// f32 position and scaled by 2^112 (which also normalises subnormals), infinities and NaN
/// given the all-ones exponent, then the sign.
fn f16_to_f32(e: &mut Emitter, h: Reg) -> Reg {
    let b32 = |e: &mut Emitter| e.reg(RegClass::B32);
    let magnitude = b32(e);
    e.ins(format!("and.b32 {magnitude}, {h}, 32767"));
    let moved = b32(e);
    e.ins(format!("shl.b32 {moved}, {magnitude}, 13"));
    let f = e.reg(RegClass::F32);
    e.ins(format!("mov.b32 {f}, {moved}"));
    let scaled = e.reg(RegClass::F32);
    e.ins(format!(
        "mul.rn.f32 {scaled}, {f}, {}",
        f32_imm(2f32.powi(112))
    ));
    let scaled_bits = b32(e);
    e.ins(format!("mov.b32 {scaled_bits}, {scaled}"));
    let special = b32(e);
    e.ins(format!("or.b32 {special}, {moved}, 2139095040"));
    let non_finite = e.reg(RegClass::Pred);
    e.ins(format!("setp.ge.u32 {non_finite}, {magnitude}, 31744"));
    let bits = b32(e);
    e.ins(format!(
        "selp.b32 {bits}, {special}, {scaled_bits}, {non_finite}"
    ));
    let sign = b32(e);
    e.ins(format!("and.b32 {sign}, {h}, 32768"));
    let sign32 = b32(e);
    e.ins(format!("shl.b32 {sign32}, {sign}, 16"));
    let all = b32(e);
    e.ins(format!("or.b32 {all}, {bits}, {sign32}"));
    let out = e.reg(RegClass::F32);
    e.ins(format!("mov.b32 {out}, {all}"));
    out
}
