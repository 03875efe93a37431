//! Reduction kernels: one block per output point (a block-stride loop over the points when
//! the grid is smaller). For each point the block computes the outer values, then per sweep
//! of [`Stages`] its threads stride over the reduction loops, each accumulating its own
//! partial results and doing the sweep's stores; partials are combined by butterfly warp
//! shuffles (`shfl.sync.bfly`), then across warps through shared memory (`bar.sync` before and
//! after), every thread combining the warps' partials in order so all hold the result. Outer
//! stores are done by thread 0. Partial sums associate differently from the interpreter's
//! left-to-right sum, so sums agree within rounding, not bit for bit. An arg reduction
//! (`argmax`/`argmin`) carries a pair, the best value and its position among the reduction
//! points, through every step (two shuffles, two shared slots), and its combination prefers
//! the lower position among equal extremes ([`tessera_kernel::ReduceFn::replaces`]), so its
//! result is the interpreter's exactly.

use crate::body::Body;
use crate::emit::{Reg, RegClass};
use crate::scalar_table::{class, imm, suffix};
use tessera_kernel::{ARG_NONE, Expr, Kernel, ReduceFn, ScalarType, Stages, ValueId};

/// The largest block of a reduction kernel.
pub const MAX_REDUCTION_BLOCK: u32 = 256;

/// The shared array of per-warp partials.
pub const PARTIALS: &str = "partials";

/// Threads per block for a reduction over `n` points: a multiple of 32 covering `n`, at most
/// [`MAX_REDUCTION_BLOCK`].
pub fn reduction_block(n: usize) -> u32 {
    let warps = n.div_ceil(32).clamp(1, (MAX_REDUCTION_BLOCK / 32) as usize);
    warps as u32 * 32
}

/// Bytes of shared memory a reduction kernel with block `block` needs: one 8-byte slot per
/// warp for each partial of its busiest sweep (two for an arg reduction: value, position).
pub fn shared_bytes(kernel: &Kernel, stages: &Stages, block: u32) -> usize {
    // At least one per warp: the body takes the array's address even when no sweep
    // accumulates (an eval batch norm's sweep only stores).
    let slots = |r: &ValueId| match kernel.value(*r).expr {
        Expr::Reduce(f, _) if f.is_arg() => 2,
        _ => 1,
    };
    let most = stages
        .sweep_reduces
        .iter()
        .map(|rs| rs.iter().map(slots).sum::<usize>())
        .max()
        .unwrap_or(0)
        .max(1);
    most * (block as usize / 32) * 8
}

/// One reduction's accumulator registers in a thread.
#[derive(Clone, Copy)]
struct Acc {
    id: ValueId,
    f: ReduceFn,
    /// The value: a sum or extreme, an arg reduction's best value.
    value: Reg,
    /// The type of `value`.
    ty: ScalarType,
    /// An arg reduction's position (`.b64`), the reduction's result.
    position: Option<Reg>,
}

impl Acc {
    /// The register holding the reduction's result.
    fn result(&self) -> Reg {
        self.position.unwrap_or(self.value)
    }

    /// Sets the registers to the reduction's initial pair.
    fn reset(&self, b: &mut Body) {
        let ty = self.ty;
        b.e.ins(format!(
            "mov.{} {}, {}",
            suffix(ty),
            self.value,
            imm(ty, self.f.identity())
        ));
        if let Some(p) = self.position {
            b.e.ins(format!("mov.s64 {p}, {ARG_NONE}"));
        }
    }

    /// Folds the candidate `x` (at `at`, for an arg reduction) in.
    fn fold(&self, b: &mut Body, x: Reg, at: Option<Reg>) {
        match (self.position, at) {
            (Some(p), Some(at)) => b.arg_combine(self.f, self.ty, self.value, p, x, at),
            _ => b.combine(self.f, self.ty, self.value, x),
        }
    }
}

/// Emits the body of a reduction kernel with `block` threads per block.
pub(crate) fn reduction(b: &mut Body, block: u32) {
    let stages = Stages::of(b.kernel);
    let t = b.width.ty();
    let warps = block / 32;
    let points = b.kernel.points();
    let reduce_points = b.kernel.reduce_points();
    let outer = b.kernel.domain.len();
    let crate::body::LaunchPosition {
        ctaid,
        ntid,
        tid,
        nctaid,
    } = b.launch_position();
    let (o, o_step, r_start, r_step) = (b.int_reg(), b.int_reg(), b.int_reg(), b.int_reg());
    for (d, s) in [(o, ctaid), (o_step, nctaid), (r_start, tid), (r_step, ntid)] {
        match b.width {
            crate::index::IntWidth::U32 => b.e.ins(format!("mov.u32 {d}, {s}")),
            crate::index::IntWidth::U64 => b.e.ins(format!("cvt.u64.u32 {d}, {s}")),
        }
    }
    // Thread 0 does the outer stores; lane 0 of each warp publishes its warp's partials.
    let (warp, lane) = (b.e.reg(RegClass::B32), b.e.reg(RegClass::B32));
    b.e.ins(format!("shr.u32 {warp}, {tid}, 5"));
    b.e.ins(format!("and.b32 {lane}, {tid}, 31"));
    let (first_thread, first_lane) = (b.e.reg(RegClass::Pred), b.e.reg(RegClass::Pred));
    b.e.ins(format!("setp.eq.u32 {first_thread}, {tid}, 0"));
    b.e.ins(format!("setp.eq.u32 {first_lane}, {lane}, 0"));
    let (shared, warp_slot) = (b.e.reg(RegClass::B64), b.e.reg(RegClass::B64));
    b.e.ins(format!("mov.u64 {shared}, {PARTIALS}"));
    let warp_bytes = b.e.reg(RegClass::B64);
    b.e.ins(format!("mul.wide.u32 {warp_bytes}, {warp}, 8"));
    b.e.ins(format!("add.s64 {warp_slot}, {shared}, {warp_bytes}"));

    let top = b.e.new_label("output");
    let done = b.e.new_label("done");
    let past = b.e.reg(RegClass::Pred);
    b.e.label(&top);
    b.e.ins(format!("setp.ge.{t} {past}, {o}, {points}"));
    b.e.ins(format!("@{past} bra {done}"));
    let domain = b.kernel.domain.clone();
    b.decompose(o, &domain, 0);
    for &v in &stages.outer_values[0] {
        b.emit_value(v);
    }
    for k in 0..stages.sweeps {
        b.e.comment(format!("sweep {k}"));
        let accs: Vec<Acc> = stages.sweep_reduces[k]
            .iter()
            .filter_map(|&id| {
                let Expr::Reduce(f, x) = b.kernel.value(id).expr else {
                    return None;
                };
                let arg = f.is_arg();
                let ty = b.kernel.value(if arg { x } else { id }).ty;
                let acc = Acc {
                    id,
                    f,
                    value: b.e.reg(class(ty)),
                    ty,
                    position: arg.then(|| b.e.reg(RegClass::B64)),
                };
                acc.reset(b);
                Some(acc)
            })
            .collect();
        let r = b.int_reg();
        b.e.ins(format!("mov.{t} {r}, {r_start}"));
        let sweep_top = b.e.new_label("sweep");
        let sweep_end = b.e.new_label("sweep_end");
        let sweep_past = b.e.reg(RegClass::Pred);
        b.e.label(&sweep_top);
        b.e.ins(format!("setp.ge.{t} {sweep_past}, {r}, {reduce_points}"));
        b.e.ins(format!("@{sweep_past} bra {sweep_end}"));
        let reduce = b.kernel.reduce.clone();
        b.decompose(r, &reduce, outer);
        for &v in &stages.sweep_values[k] {
            b.emit_value(v);
        }
        // The point's row-major position among the reduction points, for arg reductions.
        let here = accs.iter().any(|a| a.position.is_some()).then(|| {
            let here = b.e.reg(RegClass::B64);
            match b.width {
                crate::index::IntWidth::U32 => b.e.ins(format!("cvt.u64.u32 {here}, {r}")),
                crate::index::IntWidth::U64 => b.e.ins(format!("mov.b64 {here}, {r}")),
            }
            here
        });
        for acc in &accs {
            if let Expr::Reduce(_, x) = b.kernel.value(acc.id).expr {
                let x = b.value(x);
                acc.fold(b, x, here);
            }
        }
        for &s in &stages.sweep_stores[k] {
            b.emit_store(s);
        }
        b.e.ins(format!("add.{t} {r}, {r}, {r_step}"));
        b.e.ins(format!("bra.uni {sweep_top}"));
        b.e.label(&sweep_end);
        if !accs.is_empty() {
            block_combine(b, &accs, warps, warp_slot, shared, first_lane);
        }
        for acc in &accs {
            b.values[acc.id.index()] = Some(acc.result());
        }
        for &v in &stages.outer_values[k + 1] {
            b.emit_value(v);
        }
    }
    if !stages.outer_stores.is_empty() {
        let skip = b.e.new_label("not_first");
        b.e.ins(format!("@!{first_thread} bra {skip}"));
        for &s in &stages.outer_stores {
            b.emit_store(s);
        }
        b.e.label(&skip);
    }
    b.e.ins(format!("add.{t} {o}, {o}, {o_step}"));
    b.e.ins(format!("bra.uni {top}"));
    b.e.label(&done);
    b.e.ins("ret");
}

/// Combines each thread's partials `accs` across the block; every thread ends with the
/// block's result in its accumulator.
fn block_combine(
    b: &mut Body,
    accs: &[Acc],
    warps: u32,
    warp_slot: Reg,
    shared: Reg,
    first_lane: Reg,
) {
    for acc in accs {
        for lanes in [16, 8, 4, 2, 1] {
            let other = shuffle_xor(b, acc.ty, acc.value, lanes);
            let at = acc
                .position
                .map(|p| shuffle_xor(b, ScalarType::I64, p, lanes));
            acc.fold(b, other, at);
        }
    }
    // Each partial (value, then an arg reduction's position) has a slot per warp.
    let slot_bytes = warps as usize * 8;
    let mut slot = 0;
    let mut slots = Vec::with_capacity(accs.len());
    for acc in accs {
        slots.push(slot);
        for (reg, ty) in
            std::iter::once((acc.value, acc.ty)).chain(acc.position.map(|p| (p, ScalarType::I64)))
        {
            let s = suffix(ty);
            let at = slot * slot_bytes;
            b.e.ins(format!(
                "@{first_lane} st.shared.{s} [{warp_slot}+{at}], {reg}"
            ));
            slot += 1;
        }
    }
    b.e.ins("bar.sync 0");
    for (acc, &slot) in accs.iter().zip(&slots) {
        acc.reset(b);
        let s = suffix(acc.ty);
        for w in 0..warps as usize {
            let x = b.e.reg(class(acc.ty));
            let at = slot * slot_bytes + w * 8;
            b.e.ins(format!("ld.shared.{s} {x}, [{shared}+{at}]"));
            let position = acc.position.map(|_| {
                let p = b.e.reg(RegClass::B64);
                let at = (slot + 1) * slot_bytes + w * 8;
                b.e.ins(format!("ld.shared.s64 {p}, [{shared}+{at}]"));
                p
            });
            acc.fold(b, x, position);
        }
    }
    // The partials may be overwritten by the next sweep or output point only after every
    // thread has read them.
    b.e.ins("bar.sync 0");
}

/// The value of `v` in the lane `lane ^ lanes` of the warp (`shfl.sync.bfly`; an f64 moves as
/// two 32-bit halves, as does an i64).
fn shuffle_xor(b: &mut Body, ty: ScalarType, v: Reg, lanes: u32) -> Reg {
    let shfl = |b: &mut Body, x: Reg| {
        let d = b.e.reg(RegClass::B32);
        b.e.ins(format!(
            "shfl.sync.bfly.b32 {d}, {x}, {lanes}, 31, 0xffffffff"
        ));
        d
    };
    let out = b.e.reg(class(ty));
    if matches!(ty, ScalarType::F64 | ScalarType::I64) {
        let (lo, hi) = (b.e.reg(RegClass::B32), b.e.reg(RegClass::B32));
        b.e.ins(format!("mov.b64 {{{lo}, {hi}}}, {v}"));
        let (lo2, hi2) = (shfl(b, lo), shfl(b, hi));
        b.e.ins(format!("mov.b64 {out}, {{{lo2}, {hi2}}}"));
    } else {
        let bits = b.e.reg(RegClass::B32);
        b.e.ins(format!("mov.b32 {bits}, {v}"));
        let got = shfl(b, bits);
        b.e.ins(format!("mov.b32 {out}, {got}"));
    }
    out
}
