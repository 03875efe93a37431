//! Data-dependent loads ([`tessera_kernel::Expr::Gather`]) and loop indices
//! ([`tessera_kernel::Expr::LoopIndex`]) as PTX. A gather checks its i64 index with one
//! unsigned compare against the dim's size (a negative index wraps past it), loads under that
//! predicate (in the element's storage type: a half's bits, a narrow integer, a bool's byte)
//! into a register holding 0, so no memory is read for a bad index, and under the
//! negated predicate records the fault (flag, index, size) in the kernel's status buffer
//! with atomic exchanges (threads that fault together do not race; the index kept is one of
//! theirs), which the runner zeroes before the launch and reads back after it.

use crate::body::Body;
use crate::emit::{Reg, RegClass};
use crate::index::{IntWidth, element_size};
use tessera_kernel::gather::{STATUS_FLAG, STATUS_INDEX, STATUS_SIZE};
use tessera_kernel::{BufferId, IndexExpr, LoopId, ScalarType};

impl Body<'_> {
    /// Loads `buffer[index + by * stride]` of type `ty` into `d` where the i64 `by` lies in
    /// `0..len`, 0 elsewhere, recording a fault in `status`.
    #[allow(clippy::too_many_arguments)]
    pub fn gather(
        &mut self,
        d: Reg,
        buffer: BufferId,
        index: &IndexExpr,
        by: Reg,
        (stride, len): (usize, usize),
        status: BufferId,
        ty: ScalarType,
    ) {
        let inside = self.e.reg(RegClass::Pred);
        self.e.ins(format!("setp.lt.u64 {inside}, {by}, {len}"));
        // A bool is loaded as its byte into a 32-bit register and tested after the load.
        let (target, ld, zero) = crate::guarded::storage_load(ty, 0.0);
        let r = if ty == ScalarType::Bool {
            self.e.reg(RegClass::B32)
        } else {
            d
        };
        self.e.ins(format!("mov.{target} {r}, {zero}"));
        if len > 0 {
            let base = self.address(buffer, index);
            let bytes = self.e.reg(RegClass::B64);
            let step = stride * element_size(ty);
            self.e.ins(format!("mul.lo.s64 {bytes}, {by}, {step}"));
            let a = self.e.reg(RegClass::B64);
            self.e.ins(format!("add.s64 {a}, {base}, {bytes}"));
            self.e.ins(format!("@{inside} ld.global.{ld} {r}, [{a}]"));
        }
        if ty == ScalarType::Bool {
            self.e.ins(format!("setp.ne.u32 {d}, {r}, 0"));
        }
        let at = self.bases[status.index()];
        let (one, size) = (self.e.reg(RegClass::B64), self.e.reg(RegClass::B64));
        self.e.ins(format!("mov.b64 {one}, 1"));
        self.e.ins(format!("mov.b64 {size}, {len}"));
        for (slot, value) in [(STATUS_FLAG, one), (STATUS_INDEX, by), (STATUS_SIZE, size)] {
            let offset = slot * 8;
            let old = self.e.reg(RegClass::B64);
            self.e.ins(format!(
                "@!{inside} atom.global.exch.b64 {old}, [{at}+{offset}], {value}"
            ));
        }
    }

    /// The current index of loop `l` as an i64 in `d` (0 for a loop of extent 1, whose index
    /// is never decomposed).
    pub fn loop_index(&mut self, d: Reg, l: LoopId) {
        let extent = self.kernel.extents().get(l.index()).copied().unwrap_or(1);
        match self.loops.get(l.index()).copied().flatten() {
            Some(i) if extent > 1 => match self.width {
                IntWidth::U32 => self.e.ins(format!("cvt.u64.u32 {d}, {i}")),
                IntWidth::U64 => self.e.ins(format!("mov.b64 {d}, {i}")),
            },
            _ => self.e.ins(format!("mov.b64 {d}, 0")),
        }
    }
}
