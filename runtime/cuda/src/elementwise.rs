//! Elementwise kernels: a 1-D grid-stride loop over the flattened output domain. Each thread
//! starts at `ctaid * ntid + tid`, decomposes its flat index into the loop indices, evaluates
//! the DAG and does the stores, then advances by the grid's thread count. A kernel of one loop
//! of f32 values (over f32, f16 or bf16 buffers) whose accesses are contiguous (stride 1,
//! offset a multiple of 4) or broadcast (stride 0) runs four points per thread and iteration
//! instead, with `ld/st.global.v4.f32` (`.v4.b16` for a half buffer; buffers must be 16-byte
//! aligned, as device allocations are), and the last `points % 4` points in a scalar tail loop.

use crate::body::Body;
use crate::emit::{Reg, RegClass};
use crate::index::IntWidth;
use crate::scalar_table::{class, suffix};
use tessera_kernel::{Expr, Kernel, ScalarType, ValueId};

/// Threads per block of an elementwise kernel.
pub const ELEMENTWISE_BLOCK: u32 = 256;

/// Points per thread and iteration of a vectorised kernel.
pub const VECTOR: usize = 4;

/// Whether `kernel` runs with vector loads and stores (see the module documentation).
pub fn vectorizable(kernel: &Kernel) -> bool {
    let contiguous_or_broadcast = |ix: &tessera_kernel::IndexExpr| match ix.strides.as_slice() {
        [0] => true,
        [1] => ix.offset.is_multiple_of(VECTOR),
        _ => false,
    };
    kernel.domain.len() == 1
        && kernel.reduce.is_empty()
        && kernel.points() >= VECTOR
        && kernel
            .buffers
            .iter()
            .all(|b| b.ty == ScalarType::F32 || b.ty.is_half())
        && kernel
            .values
            .iter()
            .all(|v| !matches!(v.ty, ScalarType::F64 | ScalarType::I64))
        // A guarded load reads at its own lane's coordinates: lanes are not evaluated apart.
        && !kernel.values.iter().any(|v| matches!(v.expr, Expr::LoadIf { .. }))
        && kernel.accesses().all(|(_, ix)| contiguous_or_broadcast(ix))
        && kernel.stores.iter().all(|s| s.index.strides == [1])
}

/// The thread's first flat index and the grid's thread count, as index-width registers.
fn grid_position(b: &mut Body) -> (Reg, Reg) {
    let crate::body::LaunchPosition {
        ctaid,
        ntid,
        tid,
        nctaid,
    } = b.launch_position();
    let i = b.int_reg();
    let stride = b.int_reg();
    match b.width {
        IntWidth::U32 => {
            b.e.ins(format!("mad.lo.u32 {i}, {ctaid}, {ntid}, {tid}"));
            b.e.ins(format!("mul.lo.u32 {stride}, {nctaid}, {ntid}"));
        }
        IntWidth::U64 => {
            let tid64 = b.e.reg(RegClass::B64);
            b.e.ins(format!("mul.wide.u32 {i}, {ctaid}, {ntid}"));
            b.e.ins(format!("cvt.u64.u32 {tid64}, {tid}"));
            b.e.ins(format!("add.u64 {i}, {i}, {tid64}"));
            b.e.ins(format!("mul.wide.u32 {stride}, {nctaid}, {ntid}"));
        }
    }
    (i, stride)
}

/// Emits the grid-stride loop of an elementwise kernel into `b`; returns the units of work
/// (points, or groups of four points) the grid should cover.
pub(crate) fn elementwise(b: &mut Body) -> usize {
    let (first, stride) = grid_position(b);
    let points = b.kernel.points();
    if !vectorizable(b.kernel) {
        scalar_loop(b, first, stride, None);
        return points;
    }
    let t = b.width.ty();
    let groups = points / VECTOR;
    let j = b.int_reg();
    b.e.ins(format!("mov.{t} {j}, {first}"));
    let top = b.e.new_label("vector");
    let end = b.e.new_label("vector_end");
    let past = b.e.reg(RegClass::Pred);
    b.e.label(&top);
    b.e.ins(format!("setp.ge.{t} {past}, {j}, {groups}"));
    b.e.ins(format!("@{past} bra {end}"));
    vector_body(b, j);
    b.e.ins(format!("add.{t} {j}, {j}, {stride}"));
    b.e.ins(format!("bra.uni {top}"));
    b.e.label(&end);
    if !points.is_multiple_of(VECTOR) {
        b.e.comment("the scalar tail");
        let start = b.int_reg();
        b.e.ins(format!("add.{t} {start}, {first}, {}", groups * VECTOR));
        scalar_loop(b, start, stride, Some(()));
    } else {
        b.e.ins("ret");
    }
    groups
}

/// Four points from `4 j`: each contiguous load is one `ld.global.v4` of its buffer's type, the
/// DAG is evaluated once per lane, and each store is one `st.global.v4`.
fn vector_body(b: &mut Body, j: Reg) {
    let t = b.width.ty();
    let base = b.int_reg();
    b.e.ins(format!(
        "shl.b{} {base}, {j}, 2",
        if t == "u32" { 32 } else { 64 }
    ));
    b.loops[0] = Some(base);
    let kernel = b.kernel;
    let mut lanes: Vec<(ValueId, Option<[Reg; 4]>)> = Vec::new();
    for (i, v) in kernel.values.iter().enumerate() {
        let Expr::Load { buffer, index } = &v.expr else {
            continue;
        };
        let id = ValueId::from_index(i);
        if index.strides[0] == 0 {
            b.preloaded[i] = None;
            b.emit_value(id);
            let r = b.value(id);
            lanes.push((id, Some([r; 4])));
        } else {
            let a = b.address(*buffer, index);
            let ty = v.ty;
            let l = [0; 4].map(|_| b.e.reg(class(ty)));
            b.e.ins(format!(
                "ld.global.v4.{} {{{}, {}, {}, {}}}, [{a}]",
                suffix(ty),
                l[0],
                l[1],
                l[2],
                l[3]
            ));
            lanes.push((id, Some(l)));
        }
    }
    let mut stored: Vec<[Option<Reg>; 4]> = vec![[None; 4]; kernel.stores.len()];
    for lane in 0..VECTOR {
        b.e.comment(format!("lane {lane}"));
        for (id, regs) in &lanes {
            b.preloaded[id.index()] = regs.map(|r| r[lane]);
        }
        for v in 0..kernel.values.len() {
            b.emit_value(ValueId::from_index(v));
        }
        for (s, store) in kernel.stores.iter().enumerate() {
            stored[s][lane] = Some(b.value(store.value));
        }
    }
    b.preloaded.iter_mut().for_each(|p| *p = None);
    b.loops[0] = Some(base);
    for (s, store) in kernel.stores.iter().enumerate() {
        let a = b.address(store.buffer, &store.index);
        let r = stored[s].map(|r| r.map_or_else(String::new, |r| r.to_string()));
        let sfx = suffix(kernel.buffer(store.buffer).ty);
        b.e.ins(format!(
            "st.global.v4.{sfx} [{a}], {{{}, {}, {}, {}}}",
            r[0], r[1], r[2], r[3]
        ));
    }
}

/// The scalar grid-stride loop from `start` (a tail after vector groups when `tail` is set).
fn scalar_loop(b: &mut Body, start: Reg, stride: Reg, tail: Option<()>) {
    let t = b.width.ty();
    let points = b.kernel.points();
    let i = start;
    let top = b.e.new_label(if tail.is_some() { "tail" } else { "point" });
    let done = b.e.new_label("done");
    let past = b.e.reg(RegClass::Pred);
    b.e.label(&top);
    b.e.ins(format!("setp.ge.{t} {past}, {i}, {points}"));
    b.e.ins(format!("@{past} bra {done}"));
    let domain = b.kernel.domain.clone();
    b.decompose(i, &domain, 0);
    for v in 0..b.kernel.values.len() {
        b.emit_value(ValueId::from_index(v));
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
        let ty = self.kernel.buffer(store.buffer).ty;
        let a = self.address(store.buffer, &store.index);
        if ty == ScalarType::Bool {
            // A predicate is stored as the byte 0 or 1.
            let byte = self.e.reg(RegClass::B32);
            self.e.ins(format!("selp.u32 {byte}, 1, 0, {v}"));
            self.e.ins(format!("st.global.u8 [{a}], {byte}"));
            return;
        }
        let sfx = if ty.is_narrow_int() {
            crate::narrow::store_suffix(ty)
        } else {
            suffix(ty)
        };
        self.e.ins(format!("st.global.{sfx} [{a}], {v}"));
    }
}
