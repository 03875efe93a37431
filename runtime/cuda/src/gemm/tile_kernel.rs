//! The body every GEMM and convolution kernel shares: a grid-stride loop over output tiles
//! (batch, tile row, tile column; any grid size computes everything), per tile a loop over k
//! in steps of `bk` (the threads copy the step's A and B elements into shared memory, zero
//! outside the operands, then the math path accumulates from there while the next step's
//! elements are loaded into registers), then the accumulator
//! tile staged in shared memory and the epilogue run once per output point inside the
//! product, neighbouring threads on neighbouring columns. Every branch but the point test is
//! uniform across the block, so the barriers are reached by all threads.

use super::arith::{Ints, and_pred};
use super::config::{MathPath, Tiles};
use super::element::Element;
use super::fma::FmaThread;
use super::mma::MmaThread;
use super::shared_layout::{SharedLayout, TILES_ARRAY};
use super::source::{Operand, Slot, SlotTile};
use crate::emit::{Emitter, Reg, RegClass};
use crate::index::IntWidth;

/// An output point of the product: its batch (or convolution group), row and column (index
/// width), and its value (an accumulator-typed register).
pub(crate) struct OutputPoint {
    pub batch: Reg,
    pub row: Reg,
    pub col: Reg,
    pub value: Reg,
}

/// What a kernel does with each output point: store it, or evaluate a kernel's epilogue.
pub(crate) trait Epilogue {
    fn point(&mut self, e: &mut Emitter, at: &OutputPoint);
}

/// A batched product `C[b] = A[b] @ B[b]` of `m x k` by `k x n`, on one math path.
pub(crate) struct TileKernel {
    pub path: MathPath,
    pub width: IntWidth,
    pub batch: usize,
    pub m: usize,
    pub n: usize,
    pub k: usize,
    /// Read as `m x k` (outer = row).
    pub a: Operand,
    /// Read as `n x k` (outer = column).
    pub b: Operand,
}

/// What the emitted body needs from its launch.
pub(crate) struct Emitted {
    pub shared_bytes: usize,
    pub tiles: usize,
    pub block: u32,
}

enum Math {
    Fma(FmaThread),
    Mma(MmaThread),
}

impl Math {
    fn clear(&self, e: &mut Emitter) {
        match self {
            Math::Fma(t) => t.clear(e),
            Math::Mma(t) => t.clear(e),
        }
    }

    fn step(&self, e: &mut Emitter, tiles: Tiles, layout: &SharedLayout) {
        match self {
            Math::Fma(t) => t.step(e, tiles, layout),
            Math::Mma(t) => t.step(e, tiles, layout),
        }
    }

    fn stage(&self, e: &mut Emitter, layout: &SharedLayout) {
        match self {
            Math::Fma(t) => t.stage(e, layout),
            Math::Mma(t) => t.stage(e, layout),
        }
    }
}

impl TileKernel {
    fn element(&self) -> Element {
        self.a.element
    }

    /// The slots one thread copies per step for an operand whose tile has `outer` rows, and
    /// the shared address each goes to.
    fn slots(
        &self,
        e: &mut Emitter,
        tid: Reg,
        shared: Reg,
        layout: &SharedLayout,
        operand: &Operand,
        for_a: bool,
    ) -> Vec<(Slot, Reg)> {
        let tiles = self.path.tiles();
        let outer = if for_a { tiles.bm } else { tiles.bn };
        let count = outer * tiles.bk / tiles.threads;
        let k_fastest = operand.source.k_fastest();
        let (base, row) = if for_a {
            (0, layout.a_row)
        } else {
            (layout.b_offset, layout.b_row)
        };
        let mut ix = Ints { e, w: self.width };
        (0..count)
            .map(|p| {
                let idx = ix.add_imm(tid, p * tiles.threads);
                let (o, k) = if k_fastest {
                    (ix.div_imm(idx, tiles.bk), ix.rem_imm(idx, tiles.bk))
                } else {
                    (ix.rem_imm(idx, outer), ix.div_imm(idx, outer))
                };
                // FMA tiles are k-major (rows of k), tensor-core tiles k-contiguous.
                let (slow, slow_bytes, fast, fast_bytes) = if self.path.is_mma() {
                    (o, row, k, layout.element)
                } else {
                    (k, row, o, layout.element)
                };
                let a = ix.address(shared, slow, slow_bytes);
                let a = ix.address(a, fast, fast_bytes);
                let a = super::arith::offset_address(ix.e, a, base);
                (Slot { outer: o, k }, a)
            })
            .collect()
    }

    /// Loads every slot's element of the step at `k0` (A's slots, then B's) into registers.
    fn load_step(
        &self,
        e: &mut Emitter,
        a_slots: &[(Slot, Reg)],
        a_tiles: &[SlotTile],
        b_slots: &[(Slot, Reg)],
        b_tiles: &[SlotTile],
        k0: Reg,
    ) -> Vec<Reg> {
        let w = self.width;
        let a = a_slots
            .iter()
            .zip(a_tiles)
            .map(|((slot, _), tile)| self.a.load(e, w, *slot, tile, k0))
            .collect::<Vec<_>>();
        let b = b_slots
            .iter()
            .zip(b_tiles)
            .map(|((slot, _), tile)| self.b.load(e, w, *slot, tile, k0));
        a.into_iter().chain(b.collect::<Vec<_>>()).collect()
    }

    /// Copies one loaded element into shared memory, converted as the path stages it.
    fn stage_element(&self, e: &mut Emitter, at: Reg, value: Reg) {
        match self.path {
            MathPath::MmaTf32 => {
                let t = e.reg(RegClass::B32);
                e.ins(format!("cvt.rna.tf32.f32 {t}, {value}"));
                e.ins(format!("st.shared.b32 [{at}], {t}"));
            }
            MathPath::MmaF16 | MathPath::MmaBf16 => e.ins(format!("st.shared.u16 [{at}], {value}")),
            MathPath::FmaF32 => e.ins(format!("st.shared.f32 [{at}], {value}")),
            MathPath::FmaF64 => e.ins(format!("st.shared.f64 [{at}], {value}")),
        }
    }

    /// Emits the kernel body after the parameters are loaded; `epilogue` handles each point.
    pub fn emit(&self, e: &mut Emitter, epilogue: &mut dyn Epilogue) -> Emitted {
        let tiles = self.path.tiles();
        let layout = SharedLayout::new(self.path, tiles, self.element());
        let w = self.width;
        let t = w.ty();
        let b32 = |e: &mut Emitter, special: &str| {
            let r = e.reg(RegClass::B32);
            e.ins(format!("mov.u32 {r}, {special}"));
            r
        };
        let (tid32, ctaid, nctaid) = (b32(e, "%tid.x"), b32(e, "%ctaid.x"), b32(e, "%nctaid.x"));
        let shared = e.reg(RegClass::B64);
        e.ins(format!("mov.u64 {shared}, {TILES_ARRAY}"));
        let math = if self.path.is_mma() {
            Math::Mma(MmaThread::new(e, tid32, shared, &layout, self.path))
        } else {
            Math::Fma(FmaThread::new(e, tid32, shared, &layout, self.element()))
        };
        let mut ix = Ints { e, w };
        let tid = ix.of_u32(tid32);
        let a_slots = self.slots(ix.e, tid, shared, &layout, &self.a, true);
        let b_slots = self.slots(ix.e, tid, shared, &layout, &self.b, false);
        let mut ix = Ints { e, w };
        let (tiles_m, tiles_n) = (self.m.div_ceil(tiles.bm), self.n.div_ceil(tiles.bn));
        let total = self.batch * tiles_m * tiles_n;
        let first = ix.of_u32(ctaid);
        let tile = ix.reg();
        ix.e.ins(format!("mov.{t} {tile}, {first}"));
        let grid = ix.of_u32(nctaid);
        let (top, done) = (ix.e.new_label("tile"), ix.e.new_label("tiles_done"));
        ix.e.label(&top);
        let past = ix.e.reg(RegClass::Pred);
        ix.e.ins(format!("setp.ge.{t} {past}, {tile}, {total}"));
        ix.e.ins(format!("@{past} bra {done}"));
        let tn = ix.rem_imm(tile, tiles_n);
        let rest = ix.div_imm(tile, tiles_n);
        let tm = ix.rem_imm(rest, tiles_m);
        let batch = ix.div_imm(rest, tiles_m);
        let m0 = ix.mul_imm(tm, tiles.bm);
        let n0 = ix.mul_imm(tn, tiles.bn);
        let a_tiles: Vec<SlotTile> = a_slots
            .iter()
            .map(|(s, _)| self.a.begin_tile(e, w, *s, m0, batch))
            .collect();
        let b_tiles: Vec<SlotTile> = b_slots
            .iter()
            .map(|(s, _)| self.b.begin_tile(e, w, *s, n0, batch))
            .collect();
        math.clear(e);
        let k0 = Ints { e, w }.constant(0);
        // Software pipelining: the elements of step s + 1 are loaded from global memory into
        // registers while step s computes from shared memory (loads past k read nothing).
        let held: Vec<Reg> = self.load_step(e, &a_slots, &a_tiles, &b_slots, &b_tiles, k0);
        let (k_top, k_done) = (e.new_label("k_step"), e.new_label("k_done"));
        e.label(&k_top);
        let k_past = e.reg(RegClass::Pred);
        e.ins(format!("setp.ge.{t} {k_past}, {k0}, {}", self.k));
        e.ins(format!("@{k_past} bra {k_done}"));
        let destinations = a_slots.iter().chain(&b_slots).map(|(_, at)| *at);
        for (at, v) in destinations.zip(&held) {
            self.stage_element(e, at, *v);
        }
        e.ins("bar.sync 0");
        let k_next = Ints { e, w }.add_imm(k0, tiles.bk);
        let next = self.load_step(e, &a_slots, &a_tiles, &b_slots, &b_tiles, k_next);
        math.step(e, tiles, &layout);
        e.ins("bar.sync 0");
        let ty = match self.element().load_class() {
            RegClass::F64 => "f64",
            RegClass::F32 => "f32",
            _ => "b32",
        };
        for (h, n) in held.iter().zip(&next) {
            e.ins(format!("mov.{ty} {h}, {n}"));
        }
        e.ins(format!("mov.{t} {k0}, {k_next}"));
        e.ins(format!("bra.uni {k_top}"));
        e.label(&k_done);
        math.stage(e, &layout);
        e.ins("bar.sync 0");
        self.points(e, &layout, tid, (batch, m0, n0), epilogue);
        e.ins("bar.sync 0");
        e.ins(format!("add.{t} {tile}, {tile}, {grid}"));
        e.ins(format!("bra.uni {top}"));
        e.label(&done);
        e.ins("ret");
        Emitted {
            shared_bytes: layout.total,
            tiles: total,
            block: tiles.threads as u32,
        }
    }

    /// The epilogue loop over the staged tile: point `p = tid, tid + threads, ...` is row
    /// `p / bn`, column `p % bn`; points outside the product are skipped.
    fn points(
        &self,
        e: &mut Emitter,
        layout: &SharedLayout,
        tid: Reg,
        (batch, m0, n0): (Reg, Reg, Reg),
        epilogue: &mut dyn Epilogue,
    ) {
        let tiles = self.path.tiles();
        let w = self.width;
        let t = w.ty();
        let p = Ints { e, w }.reg();
        e.ins(format!("mov.{t} {p}, {tid}"));
        let (top, done, skip) = (
            e.new_label("point"),
            e.new_label("points_done"),
            e.new_label("point_next"),
        );
        e.label(&top);
        let past = e.reg(RegClass::Pred);
        e.ins(format!("setp.ge.{t} {past}, {p}, {}", tiles.bm * tiles.bn));
        e.ins(format!("@{past} bra {done}"));
        let mut ix = Ints { e, w };
        let r = ix.div_imm(p, tiles.bn);
        let c = ix.rem_imm(p, tiles.bn);
        let row = ix.add(m0, r);
        let col = ix.add(n0, c);
        let row_inside = ix.lt_imm(row, self.m);
        let col_inside = ix.lt_imm(col, self.n);
        let inside = and_pred(ix.e, row_inside, col_inside);
        ix.e.ins(format!("@!{inside} bra {skip}"));
        let shared = ix.e.reg(RegClass::B64);
        ix.e.ins(format!("mov.u64 {shared}, {TILES_ARRAY}"));
        let at = ix.address(shared, r, layout.c_row);
        let at = ix.address(at, c, layout.acc);
        let value = e.reg(self.element().acc_class());
        e.ins(format!(
            "ld.shared.{} {value}, [{at}]",
            self.element().acc_suffix()
        ));
        epilogue.point(
            e,
            &OutputPoint {
                batch,
                row,
                col,
                value,
            },
        );
        e.label(&skip);
        e.ins(format!("add.{t} {p}, {p}, {}", tiles.threads));
        e.ins(format!("bra.uni {top}"));
        e.label(&done);
    }
}
