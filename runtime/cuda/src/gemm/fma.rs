//! The FMA path's arithmetic: each of the 256 threads owns a 4 x 4 micro-tile of the 64 x 64
//! block tile (rows `4 ty ..`, columns `4 tx ..`, `tx = tid % 16`, `ty = tid / 16`). Per k
//! of a step it reads 4 values of A's column and 4 of B's row from shared memory (one
//! `ld.shared.v4.f32`, or two `v2.f64`, each) and does 16 `fma.rn`, so each output's sum runs
//! over k in order, one rounding per term, in the element type.

use super::config::{FMA_MICRO, Tiles};
use super::element::Element;
use super::shared_layout::SharedLayout;
use crate::emit::{Emitter, Reg, RegClass};

/// A thread's registers on the FMA path.
pub(crate) struct FmaThread {
    /// Shared addresses of the thread's first A value (k = 0) and first B value.
    a: Reg,
    b: Reg,
    /// Where the thread's first accumulator is staged.
    c: Reg,
    /// `acc[i * 4 + j]`: row `i`, column `j` of the micro-tile.
    pub acc: Vec<Reg>,
    element: Element,
}

impl FmaThread {
    /// The thread's addresses, from its `tid` (`.b32`) and the shared array's address.
    pub fn new(
        e: &mut Emitter,
        tid: Reg,
        shared: Reg,
        layout: &SharedLayout,
        element: Element,
    ) -> FmaThread {
        let columns = (super::config::FMA_TILES.bn / FMA_MICRO) as u32;
        let (tx, ty) = (e.reg(RegClass::B32), e.reg(RegClass::B32));
        e.ins(format!("rem.u32 {tx}, {tid}, {columns}"));
        e.ins(format!("div.u32 {ty}, {tid}, {columns}"));
        let at = |e: &mut Emitter, base: Reg, i: Reg, bytes: usize, extra: usize| {
            let off = e.reg(RegClass::B64);
            e.ins(format!("mul.wide.u32 {off}, {i}, {bytes}"));
            let d = e.reg(RegClass::B64);
            e.ins(format!("add.s64 {d}, {base}, {off}"));
            if extra == 0 {
                return d;
            }
            let d2 = e.reg(RegClass::B64);
            e.ins(format!("add.s64 {d2}, {d}, {extra}"));
            d2
        };
        let size = layout.element;
        let a = at(e, shared, ty, FMA_MICRO * size, 0);
        let b = at(e, shared, tx, FMA_MICRO * size, layout.b_offset);
        let c_rows = at(e, shared, ty, FMA_MICRO * layout.c_row, 0);
        let c = at(e, c_rows, tx, FMA_MICRO * layout.acc, 0);
        let acc = (0..FMA_MICRO * FMA_MICRO)
            .map(|_| e.reg(element.acc_class()))
            .collect();
        FmaThread {
            a,
            b,
            c,
            acc,
            element,
        }
    }

    /// Zeroes the accumulators (once per tile).
    pub fn clear(&self, e: &mut Emitter) {
        let zero = match self.element {
            Element::F64 => "0d0000000000000000",
            _ => "0f00000000",
        };
        let s = self.element.acc_suffix();
        for r in &self.acc {
            e.ins(format!("mov.{s} {r}, {zero}"));
        }
    }

    /// `count` values from shared `base + offset`, with vector loads of 16 bytes.
    fn vector(&self, e: &mut Emitter, base: Reg, offset: usize) -> Vec<Reg> {
        let s = self.element.acc_suffix();
        let class = self.element.acc_class();
        let regs: Vec<Reg> = (0..FMA_MICRO).map(|_| e.reg(class)).collect();
        let per = 16 / self.element.bytes().max(4);
        for (i, chunk) in regs.chunks(per).enumerate() {
            let list: Vec<String> = chunk.iter().map(|r| r.to_string()).collect();
            e.ins(format!(
                "ld.shared.v{per}.{s} {{{}}}, [{base}+{}]",
                list.join(", "),
                offset + i * 16
            ));
        }
        regs
    }

    /// The arithmetic of one step: `bk` rank-1 updates from the staged tiles.
    pub fn step(&self, e: &mut Emitter, tiles: Tiles, layout: &SharedLayout) {
        let s = self.element.acc_suffix();
        for kk in 0..tiles.bk {
            let a = self.vector(e, self.a, kk * layout.a_row);
            let b = self.vector(e, self.b, kk * layout.b_row);
            for (i, ai) in a.iter().enumerate() {
                for (j, bj) in b.iter().enumerate() {
                    let acc = self.acc[i * FMA_MICRO + j];
                    e.ins(format!("fma.rn.{s} {acc}, {ai}, {bj}, {acc}"));
                }
            }
        }
    }

    /// Writes the accumulators into the staged tile.
    pub fn stage(&self, e: &mut Emitter, layout: &SharedLayout) {
        let s = self.element.acc_suffix();
        let per = 16 / layout.acc;
        for i in 0..FMA_MICRO {
            let row = &self.acc[i * FMA_MICRO..(i + 1) * FMA_MICRO];
            for (c, chunk) in row.chunks(per).enumerate() {
                let list: Vec<String> = chunk.iter().map(|r| r.to_string()).collect();
                e.ins(format!(
                    "st.shared.v{per}.{s} [{}+{}], {{{}}}",
                    self.c,
                    i * layout.c_row + c * 16,
                    list.join(", ")
                ));
            }
        }
    }
}
