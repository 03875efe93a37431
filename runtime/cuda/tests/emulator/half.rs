//! The emulator's half-precision subset: `.b16` registers holding f16 or bf16 bits, their
//! global loads and stores (scalar and `.v4`), `mov.b16`, and the conversions the renderer
//! emits between them and f32 (`cvt.f32.f16`, `cvt.rn.f16.f32`, `cvt.rn.bf16.f32`, and
//! `cvt.u32.u16` for bf16's widening by a shift). Conversions follow the `half` crate, an
//! implementation independent of the renderer: f16 -> f32 exact, f32 -> f16/bf16 rounded to
//! nearest even, overflowing to infinity, NaN staying NaN.

use super::program::{Op, Rounding, Space, Ty};
use half::{bf16, f16};

/// The op of a half-precision opcode (`base` and its `.`-separated modifiers), or `None` when
/// the opcode is not one of them (the general decoder then decides).
pub fn decode_half(base: &str, mods: &[&str]) -> Option<Op> {
    let memory = |load: bool, lanes: u8| {
        let (space, ty) = (Space::Global, Ty::B16);
        if load {
            Op::Load { space, ty, lanes }
        } else {
            Op::Store { space, ty, lanes }
        }
    };
    Some(match (base, mods) {
        ("ld" | "st", ["global", "b16"]) => memory(base == "ld", 1),
        ("ld" | "st", ["global", "v4", "b16"]) => memory(base == "ld", 4),
        ("mov", ["b16"]) => Op::Mov(Ty::B16),
        ("cvt", ["f32", "f16"]) => Op::Cvt {
            dst: Ty::F32,
            src: Ty::F16,
            rounding: None,
        },
        ("cvt", ["rn", "f16", "f32"]) => Op::Cvt {
            dst: Ty::F16,
            src: Ty::F32,
            rounding: Some(Rounding::Nearest),
        },
        ("cvt", ["rn", "bf16", "f32"]) => Op::Cvt {
            dst: Ty::BF16,
            src: Ty::F32,
            rounding: Some(Rounding::Nearest),
        },
        ("cvt", ["u32", "u16"]) => Op::Cvt {
            dst: Ty::U32,
            src: Ty::U16,
            rounding: None,
        },
        _ => return None,
    })
}

/// `cvt.dst.src` on the bits `a` when a 16-bit type is involved, else `None`.
pub fn convert_half(dst: Ty, src: Ty, _rounding: Option<Rounding>, a: u64) -> Option<u64> {
    Some(match (dst, src) {
        (Ty::F32, Ty::F16) => f16::from_bits(a as u16).to_f32().to_bits() as u64,
        (Ty::F16, Ty::F32) => f16::from_f32(f32::from_bits(a as u32)).to_bits() as u64,
        (Ty::BF16, Ty::F32) => bf16::from_f32(f32::from_bits(a as u32)).to_bits() as u64,
        (Ty::U32, Ty::U16) => a & 0xffff,
        _ => return None,
    })
}
