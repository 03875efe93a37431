//! Guarded loads ([`tessera_kernel::Expr::LoadIf`], the taps of a padded window) as PTX: each
//! bound's coordinate minus its padding is checked with one unsigned compare (a negative one
//! wraps past the dim), the checks are and-ed into a predicate, and the element is loaded under
//! that predicate into a register holding the fill value, so no memory is read in the padding.

use crate::body::Body;
use crate::emit::{Reg, RegClass};
use crate::index::{IntWidth, element_size};
use crate::scalar_table::{imm, suffix};
use half::{bf16, f16};
use tessera_kernel::{Bound, BufferId, IndexExpr, ScalarType};

impl Body<'_> {
    /// `offset + sum(stride * index)` of `index` at the current loop indices, as an integer of
    /// the index width.
    fn linear(&mut self, index: &IndexExpr) -> Reg {
        let t = self.width.ty();
        let extents = self.kernel.extents();
        let acc = self.int_reg();
        self.e.ins(format!("mov.{t} {acc}, {}", index.offset));
        let mut acc = acc;
        for (l, &stride) in index.strides.iter().enumerate() {
            if stride == 0 || extents[l] <= 1 {
                continue;
            }
            let i = self.loops[l].unwrap_or(Reg {
                class: self.width.class(),
                number: 0,
            });
            let d = self.int_reg();
            self.e.ins(format!("mad.lo.{t} {d}, {i}, {stride}, {acc}"));
            acc = d;
        }
        acc
    }

    /// Loads `buffer[index + sum(coordinate * stride)]` of type `ty` into `d` where every bound
    /// holds, and `fill` elsewhere.
    #[allow(clippy::too_many_arguments)]
    pub fn guarded_load(
        &mut self,
        d: Reg,
        buffer: BufferId,
        index: &IndexExpr,
        bounds: &[Bound],
        fill: f64,
        ty: ScalarType,
    ) {
        let t = self.width.ty();
        let mut inside: Option<Reg> = None;
        let mut step: Option<Reg> = None;
        for bound in bounds {
            let coord = self.linear(&bound.coord);
            let c = self.int_reg();
            self.e.ins(format!("sub.{t} {c}, {coord}, {}", bound.pad));
            let ok = self.e.reg(RegClass::Pred);
            self.e.ins(format!("setp.lt.{t} {ok}, {c}, {}", bound.len));
            inside = Some(match inside {
                None => ok,
                Some(all) => {
                    let both = self.e.reg(RegClass::Pred);
                    self.e.ins(format!("and.pred {both}, {all}, {ok}"));
                    both
                }
            });
            let next = self.int_reg();
            match step {
                None => self
                    .e
                    .ins(format!("mul.lo.{t} {next}, {c}, {}", bound.stride)),
                Some(acc) => self
                    .e
                    .ins(format!("mad.lo.{t} {next}, {c}, {}, {acc}", bound.stride)),
            }
            step = Some(next);
        }
        // A bool is loaded as its byte into a 32-bit register and tested after the load.
        let (target, ld, fill_imm) = storage_load(ty, fill);
        let r = if ty == ScalarType::Bool {
            self.e.reg(RegClass::B32)
        } else {
            d
        };
        self.e.ins(format!("mov.{target} {r}, {fill_imm}"));
        let base = self.address(buffer, index);
        let (Some(inside), Some(step)) = (inside, step) else {
            self.e.ins(format!("ld.global.{ld} {r}, [{base}]"));
            if ty == ScalarType::Bool {
                self.e.ins(format!("setp.ne.u32 {d}, {r}, 0"));
            }
            return;
        };
        let size = element_size(ty);
        let bytes = self.e.reg(RegClass::B64);
        match self.width {
            IntWidth::U32 => self.e.ins(format!("mul.wide.u32 {bytes}, {step}, {size}")),
            IntWidth::U64 => self.e.ins(format!("mul.lo.u64 {bytes}, {step}, {size}")),
        }
        let a = self.e.reg(RegClass::B64);
        self.e.ins(format!("add.s64 {a}, {base}, {bytes}"));
        self.e.ins(format!("@{inside} ld.global.{ld} {r}, [{a}]"));
        if ty == ScalarType::Bool {
            self.e.ins(format!("setp.ne.u32 {d}, {r}, 0"));
        }
    }
}

/// For a guarded load of `ty` with `fill`: the `mov` type of its register, the `ld.global`
/// type, and the fill as an immediate of that register (rounded or converted as the
/// interpreter's `Scalar::of`: a half type's bits, a bool's byte, a narrow integer's value).
pub(crate) fn storage_load(ty: ScalarType, fill: f64) -> (&'static str, &'static str, String) {
    match ty {
        ScalarType::F16 => (
            "b16",
            "b16",
            format!("0x{:04x}", f16::from_f32(fill as f32).to_bits()),
        ),
        ScalarType::BF16 => (
            "b16",
            "b16",
            format!("0x{:04x}", bf16::from_f32(fill as f32).to_bits()),
        ),
        ScalarType::Bool => ("b32", "u8", u32::from(fill != 0.0).to_string()),
        ScalarType::U8 => ("b32", "u8", (fill as u8).to_string()),
        ScalarType::I8 => ("b32", "s8", (fill as i8).to_string()),
        ScalarType::I32 => ("b32", "s32", (fill as i32).to_string()),
        _ => (suffix(ty), suffix(ty), imm(ty, fill)),
    }
}
