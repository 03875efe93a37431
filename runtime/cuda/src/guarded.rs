//! Guarded loads ([`tessera_kernel::Expr::LoadIf`], the taps of a padded window) as PTX: each
//! bound's coordinate minus its padding is checked with one unsigned compare (a negative one
//! wraps past the dim), the checks are and-ed into a predicate, and the element is loaded under
//! that predicate into a register holding the fill value, so no memory is read in the padding.

use crate::body::Body;
use crate::emit::{Reg, RegClass};
use crate::index::{IntWidth, element_size};
use crate::scalar_table::{imm, suffix};
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
        let s = suffix(ty);
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
        self.e.ins(format!("mov.{s} {d}, {}", imm(ty, fill)));
        let base = self.address(buffer, index);
        let (Some(inside), Some(step)) = (inside, step) else {
            self.e.ins(format!("ld.global.{s} {d}, [{base}]"));
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
        self.e.ins(format!("@{inside} ld.global.{s} {d}, [{a}]"));
    }
}
