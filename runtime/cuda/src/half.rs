//! The half storage types (f16, bf16) as PTX: their elements are `.b16` registers, loaded and
//! stored with `ld/st.global.b16`, and converted to and from f32, where all their arithmetic
//! happens (the kernel IR admits no other use). f16 converts with `cvt.f32.f16` and
//! `cvt.rn.f16.f32`; bf16 widens by a 16-bit shift (exact, on every architecture) and narrows
//! with `cvt.rn.bf16.f32`, which needs sm_80 ([`needs_sm80`]). Both narrowings round to nearest
//! even and overflow to infinity, as the interpreter's `half` conversions do.

use crate::body::Body;
use crate::emit::{Reg, RegClass};
use tessera_kernel::{Expr, Kernel, ScalarType};

/// Whether `kernel` rounds to bf16, which PTX does in one instruction from sm_80 on.
pub(crate) fn needs_sm80(kernel: &Kernel) -> bool {
    kernel
        .values
        .iter()
        .any(|v| v.ty == ScalarType::BF16 && matches!(v.expr, Expr::Cast(_)))
}

impl Body<'_> {
    /// `d = a` converted from `from` to `to`, one of them a half type and the other f32, as
    /// [`tessera_kernel::Kernel::verify`] admits.
    pub(crate) fn half_cast(&mut self, d: Reg, a: Reg, from: ScalarType, to: ScalarType) {
        match (from, to) {
            (ScalarType::F16, ScalarType::F32) => self.e.ins(format!("cvt.f32.f16 {d}, {a}")),
            (ScalarType::BF16, ScalarType::F32) => {
                // The bf16 bits are the high half of the f32's.
                let wide = self.e.reg(RegClass::B32);
                self.e.ins(format!("cvt.u32.u16 {wide}, {a}"));
                self.e.ins(format!("shl.b32 {wide}, {wide}, 16"));
                self.e.ins(format!("mov.b32 {d}, {wide}"));
            }
            (ScalarType::F32, ScalarType::F16) => self.e.ins(format!("cvt.rn.f16.f32 {d}, {a}")),
            (ScalarType::F32, ScalarType::BF16) => self.e.ins(format!("cvt.rn.bf16.f32 {d}, {a}")),
            // `verify` admits no other pair with a half type (the lowering converts between
            // half types through f32), and `emit_value` moves a type to itself.
            _ => {}
        }
    }
}
