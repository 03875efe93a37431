//! The tensor-core path's arithmetic: 4 warps in a 2 x 2 grid over the 64 x 64 block tile,
//! each computing its 32 x 32 warp tile as 2 x 4 tiles of 16 x 8 with `mma.sync.aligned`
//! (`m16n8k16` on f16/bf16 pairs, `m16n8k8` on tf32), f32 accumulators in registers. The
//! A and B tiles are staged k-contiguous (`A[m][k]`, `B[n][k]`), so each fragment register is
//! one `ld.shared.b32`, at the positions of the PTX ISA's fragment layouts (`g = lane / 4`,
//! `t = lane % 4`): A holds rows `g`, `g + 8` and k `2t, 2t + 1` (`+ 8`) for k16, k `t`
//! (`+ 4`) for tf32; B holds column `g` at the same k; accumulator `c_i` is row `g + 8 (i / 2)`,
//! column `2t + i % 2`.

use super::config::{MMA_TILES, MMA_WARP_TILE, MathPath, Tiles};
use super::shared_layout::SharedLayout;
use crate::emit::{Emitter, Reg, RegClass};

/// Rows of one `mma` tile.
const MMA_M: usize = 16;
/// Columns of one `mma` tile.
const MMA_N: usize = 8;
/// `mma` tiles of a warp tile, down and across.
const TILES_DOWN: usize = MMA_WARP_TILE / MMA_M;
const TILES_ACROSS: usize = MMA_WARP_TILE / MMA_N;

/// A thread's registers on the tensor-core path.
pub(crate) struct MmaThread {
    path: MathPath,
    /// Shared addresses of the thread's first A and B fragment elements.
    a: Reg,
    b: Reg,
    /// Where its first accumulator is staged.
    c: Reg,
    /// `acc[(mi * TILES_ACROSS + ni) * 4 + i]`.
    acc: Vec<Reg>,
}

impl MmaThread {
    pub fn new(
        e: &mut Emitter,
        tid: Reg,
        shared: Reg,
        layout: &SharedLayout,
        path: MathPath,
    ) -> MmaThread {
        let b32 = |e: &mut Emitter| e.reg(RegClass::B32);
        let warps_across = (MMA_TILES.bn / MMA_WARP_TILE) as u32;
        let (warp, lane, g, t, wm, wn) = (b32(e), b32(e), b32(e), b32(e), b32(e), b32(e));
        e.ins(format!("shr.u32 {warp}, {tid}, 5"));
        e.ins(format!("and.b32 {lane}, {tid}, 31"));
        e.ins(format!("shr.u32 {g}, {lane}, 2"));
        e.ins(format!("and.b32 {t}, {lane}, 3"));
        e.ins(format!("div.u32 {wm}, {warp}, {warps_across}"));
        e.ins(format!("rem.u32 {wn}, {warp}, {warps_across}"));
        // Each thread's k offset within a fragment row: 2t elements (pairs) or t (tf32).
        let k_step = if path == MathPath::MmaTf32 { 1 } else { 2 } * layout.element;
        let operand = |e: &mut Emitter, w: Reg, base: usize, row: usize| {
            let first = e.reg(RegClass::B32);
            e.ins(format!("mad.lo.u32 {first}, {w}, {MMA_WARP_TILE}, {g}"));
            let rows = e.reg(RegClass::B64);
            e.ins(format!("mul.wide.u32 {rows}, {first}, {row}"));
            let ks = e.reg(RegClass::B64);
            e.ins(format!("mul.wide.u32 {ks}, {t}, {k_step}"));
            let off = e.reg(RegClass::B64);
            e.ins(format!("add.s64 {off}, {rows}, {ks}"));
            let d = e.reg(RegClass::B64);
            e.ins(format!("add.s64 {d}, {shared}, {off}"));
            if base == 0 {
                return d;
            }
            let d2 = e.reg(RegClass::B64);
            e.ins(format!("add.s64 {d2}, {d}, {base}"));
            d2
        };
        let a = operand(e, wm, 0, layout.a_row);
        let b = operand(e, wn, layout.b_offset, layout.b_row);
        // Staging: row wm * 32 + g, column wn * 32 + 2t.
        let row = e.reg(RegClass::B32);
        e.ins(format!("mad.lo.u32 {row}, {wm}, {MMA_WARP_TILE}, {g}"));
        let col = e.reg(RegClass::B32);
        e.ins(format!("shl.b32 {col}, {t}, 1"));
        let col2 = e.reg(RegClass::B32);
        e.ins(format!("mad.lo.u32 {col2}, {wn}, {MMA_WARP_TILE}, {col}"));
        let rows = e.reg(RegClass::B64);
        e.ins(format!("mul.wide.u32 {rows}, {row}, {}", layout.c_row));
        let cols = e.reg(RegClass::B64);
        e.ins(format!("mul.wide.u32 {cols}, {col2}, {}", layout.acc));
        let off = e.reg(RegClass::B64);
        e.ins(format!("add.s64 {off}, {rows}, {cols}"));
        let c = e.reg(RegClass::B64);
        e.ins(format!("add.s64 {c}, {shared}, {off}"));
        let acc = (0..TILES_DOWN * TILES_ACROSS * 4)
            .map(|_| e.reg(RegClass::F32))
            .collect();
        MmaThread { path, a, b, c, acc }
    }

    pub fn clear(&self, e: &mut Emitter) {
        for r in &self.acc {
            e.ins(format!("mov.f32 {r}, 0f00000000"));
        }
    }

    fn b32_at(e: &mut Emitter, base: Reg, offset: usize) -> Reg {
        let d = e.reg(RegClass::B32);
        e.ins(format!("ld.shared.b32 {d}, [{base}+{offset}]"));
        d
    }

    /// The arithmetic of one step: the warp's `mma`s over the staged `bk` values of k.
    pub fn step(&self, e: &mut Emitter, tiles: Tiles, layout: &SharedLayout) {
        let (k_mma, shape, types) = match self.path {
            MathPath::MmaTf32 => (8, "m16n8k8", "tf32.tf32"),
            MathPath::MmaBf16 => (16, "m16n8k16", "bf16.bf16"),
            _ => (16, "m16n8k16", "f16.f16"),
        };
        let size = layout.element;
        // The k offsets (in elements) of a fragment's second register pair: the upper half
        // of the k range a thread holds.
        let upper = k_mma / 2;
        for ks in (0..tiles.bk).step_by(k_mma) {
            let k_bytes = |k: usize| (ks + k) * size;
            let a: Vec<[Reg; 4]> = (0..TILES_DOWN)
                .map(|mi| {
                    let top = mi * MMA_M * layout.a_row;
                    let bottom = top + 8 * layout.a_row;
                    [
                        Self::b32_at(e, self.a, top + k_bytes(0)),
                        Self::b32_at(e, self.a, bottom + k_bytes(0)),
                        Self::b32_at(e, self.a, top + k_bytes(upper)),
                        Self::b32_at(e, self.a, bottom + k_bytes(upper)),
                    ]
                })
                .collect();
            let b: Vec<[Reg; 2]> = (0..TILES_ACROSS)
                .map(|ni| {
                    let column = ni * MMA_N * layout.b_row;
                    [
                        Self::b32_at(e, self.b, column + k_bytes(0)),
                        Self::b32_at(e, self.b, column + k_bytes(upper)),
                    ]
                })
                .collect();
            for (mi, a) in a.iter().enumerate() {
                for (ni, b) in b.iter().enumerate() {
                    let d = &self.acc[(mi * TILES_ACROSS + ni) * 4..][..4];
                    let d = format!("{{{}, {}, {}, {}}}", d[0], d[1], d[2], d[3]);
                    e.ins(format!(
                        "mma.sync.aligned.{shape}.row.col.f32.{types}.f32 {d}, {{{}, {}, {}, {}}}, {{{}, {}}}, {d}",
                        a[0], a[1], a[2], a[3], b[0], b[1]
                    ));
                }
            }
        }
    }

    /// Writes the accumulators into the staged tile.
    pub fn stage(&self, e: &mut Emitter, layout: &SharedLayout) {
        for mi in 0..TILES_DOWN {
            for ni in 0..TILES_ACROSS {
                for i in 0..4 {
                    let row = mi * MMA_M + 8 * (i / 2);
                    let col = ni * MMA_N + i % 2;
                    let offset = row * layout.c_row + col * layout.acc;
                    let r = self.acc[(mi * TILES_ACROSS + ni) * 4 + i];
                    e.ins(format!("st.shared.f32 [{}+{offset}], {r}", self.c));
                }
            }
        }
    }
}
