//! Elementwise kernels: a 1-D grid-stride loop over the flattened output domain. Each thread
//! starts at `ctaid * ntid + tid`, decomposes its flat index into the loop indices, evaluates
//! the DAG and does the stores, then advances by the grid's thread count.

use crate::body::Body;
use crate::emit::RegClass;

/// Threads per block of an elementwise kernel.
pub const ELEMENTWISE_BLOCK: u32 = 256;

/// Emits the grid-stride loop of an elementwise kernel into `b`.
pub(crate) fn elementwise(b: &mut Body) {
    let t = b.width.ty();
    let points = b.kernel.points();
    let (ctaid, ntid, tid, nctaid) = (
        b.e.reg(RegClass::B32),
        b.e.reg(RegClass::B32),
        b.e.reg(RegClass::B32),
        b.e.reg(RegClass::B32),
    );
    b.e.ins(format!("mov.u32 {ctaid}, %ctaid.x"));
    b.e.ins(format!("mov.u32 {ntid}, %ntid.x"));
    b.e.ins(format!("mov.u32 {tid}, %tid.x"));
    b.e.ins(format!("mov.u32 {nctaid}, %nctaid.x"));
    let i = b.int_reg();
    let stride = b.int_reg();
    match b.width {
        crate::index::IntWidth::U32 => {
            b.e.ins(format!("mad.lo.u32 {i}, {ctaid}, {ntid}, {tid}"));
            b.e.ins(format!("mul.lo.u32 {stride}, {nctaid}, {ntid}"));
        }
        crate::index::IntWidth::U64 => {
            let tid64 = b.e.reg(RegClass::B64);
            b.e.ins(format!("mul.wide.u32 {i}, {ctaid}, {ntid}"));
            b.e.ins(format!("cvt.u64.u32 {tid64}, {tid}"));
            b.e.ins(format!("add.u64 {i}, {i}, {tid64}"));
            b.e.ins(format!("mul.wide.u32 {stride}, {nctaid}, {ntid}"));
        }
    }
    let top = b.e.new_label("point");
    let done = b.e.new_label("done");
    let past = b.e.reg(RegClass::Pred);
    b.e.label(&top);
    b.e.ins(format!("setp.ge.{t} {past}, {i}, {points}"));
    b.e.ins(format!("@{past} bra {done}"));
    let domain = b.kernel.domain.clone();
    b.decompose(i, &domain, 0);
    for v in 0..b.kernel.values.len() {
        b.emit_value(tessera_kernel::ValueId::from_index(v));
    }
    for s in 0..b.kernel.stores.len() {
        b.emit_store(s);
    }
    b.e.ins(format!("add.{t} {i}, {i}, {stride}"));
    b.e.ins(format!("bra.uni {top}"));
    b.e.label(&done);
    b.e.ins("ret");
}

impl Body<'_> {
    /// Emits `kernel.stores[s]` at the current loop indices.
    pub fn emit_store(&mut self, s: usize) {
        let store = self.kernel.stores[s].clone();
        let v = self.value(store.value);
        let sfx = crate::scalar_table::suffix(self.kernel.buffer(store.buffer).ty);
        let a = self.address(store.buffer, &store.index);
        self.e.ins(format!("st.global.{sfx} [{a}], {v}"));
    }
}
