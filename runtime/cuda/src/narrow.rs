//! The narrow integer storage types (u8, i8, i32) as PTX: their elements are `.b32` registers,
//! loaded with `ld.global.u8` (zero-extending), `ld.global.s8` (sign-extending) or
//! `ld.global.s32`, stored from the register's low bits (`st.global.u8`, `st.global.s32`), and
//! converted only to and from i64, as the kernel IR admits: widening with `cvt.s64.s32` (an i8
//! register is already sign-extended) or `cvt.u64.u32`, narrowing by clamping to the type's
//! range (`max.s64`, `min.s64`) and keeping the low 32 bits, as the interpreter's saturating
//! `as` does.

use crate::body::Body;
use crate::emit::{Reg, RegClass};
use tessera_kernel::ScalarType;

/// The PTX type a narrow integer element is loaded as.
pub(crate) fn load_suffix(ty: ScalarType) -> &'static str {
    match ty {
        ScalarType::U8 => "u8",
        ScalarType::I8 => "s8",
        _ => "s32",
    }
}

/// The PTX type a narrow integer element is stored as (a byte's sign does not matter).
pub(crate) fn store_suffix(ty: ScalarType) -> &'static str {
    match ty {
        ScalarType::U8 | ScalarType::I8 => "u8",
        _ => "s32",
    }
}

impl Body<'_> {
    /// `d = a` converted from `from` to `to`, one of them a narrow integer type and the other
    /// i64, as [`tessera_kernel::Kernel::verify`] admits.
    pub(crate) fn narrow_cast(&mut self, d: Reg, a: Reg, from: ScalarType, to: ScalarType) {
        if let Some((lo, hi)) = to.int_range() {
            let clamped = self.e.reg(RegClass::B64);
            self.e.ins(format!("max.s64 {clamped}, {a}, {lo}"));
            self.e.ins(format!("min.s64 {clamped}, {clamped}, {hi}"));
            self.e.ins(format!("cvt.u32.u64 {d}, {clamped}"));
        } else if from == ScalarType::U8 {
            self.e.ins(format!("cvt.u64.u32 {d}, {a}"));
        } else {
            self.e.ins(format!("cvt.s64.s32 {d}, {a}"));
        }
    }
}
