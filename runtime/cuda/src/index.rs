//! Index arithmetic: the integer width of a kernel's indices, the decomposition of a flat
//! (grid-stride) index into loop indices by division and remainder, and the global address of
//! an affine [`IndexExpr`] (`offset + sum(stride * index)`, in elements, times the element
//! size, plus the buffer's base).

use crate::body::Body;
use crate::emit::{Reg, RegClass};
use tessera_kernel::{BufferId, IndexExpr, ScalarType};

/// The width of index arithmetic: 32 bits when every index, count and buffer length of the
/// kernel stays below 2^31 (so a flat index plus a grid stride cannot wrap), 64 otherwise.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IntWidth {
    U32,
    U64,
}

/// The largest count that still uses 32-bit indices.
const U32_LIMIT: usize = (1 << 31) - 1;

impl IntWidth {
    /// The width `kernel` needs.
    pub fn of(kernel: &tessera_kernel::Kernel) -> IntWidth {
        let largest = kernel
            .buffers
            .iter()
            .map(|b| b.len)
            .chain([kernel.points(), kernel.reduce_points()])
            .max()
            .unwrap_or(0);
        if largest <= U32_LIMIT {
            IntWidth::U32
        } else {
            IntWidth::U64
        }
    }

    pub fn class(self) -> RegClass {
        match self {
            IntWidth::U32 => RegClass::B32,
            IntWidth::U64 => RegClass::B64,
        }
    }

    /// The unsigned type suffix (`u32`).
    pub fn ty(self) -> &'static str {
        match self {
            IntWidth::U32 => "u32",
            IntWidth::U64 => "u64",
        }
    }
}

/// The size in bytes of a buffer element.
pub fn element_size(ty: ScalarType) -> usize {
    ty.bytes()
}

impl Body<'_> {
    /// Sets the indices of loops `first..first + extents.len()` from the flat row-major index
    /// `flat` over `extents`: the innermost is `flat % n`, the next `(flat / n) % m`, ...
    pub fn decompose(&mut self, flat: Reg, extents: &[usize], first: usize) {
        let t = self.width.ty();
        let mut rest = flat;
        for l in (0..extents.len()).rev() {
            let n = extents[l];
            if l == 0 {
                self.loops[first] = Some(rest);
                break;
            }
            if n == 1 {
                let zero = self.int_reg();
                self.e.ins(format!("mov.{t} {zero}, 0"));
                self.loops[first + l] = Some(zero);
                continue;
            }
            let i = self.int_reg();
            self.e.ins(format!("rem.{t} {i}, {rest}, {n}"));
            self.loops[first + l] = Some(i);
            let q = self.int_reg();
            self.e.ins(format!("div.{t} {q}, {rest}, {n}"));
            rest = q;
        }
    }

    /// The global address (`.b64`) of `buffer[index]` at the current loop indices.
    pub fn address(&mut self, buffer: BufferId, index: &IndexExpr) -> Reg {
        let t = self.width.ty();
        let extents = self.kernel.extents();
        let mut element: Option<Reg> = None;
        for (l, &stride) in index.strides.iter().enumerate() {
            // A loop of extent 1 only ever has index 0.
            if stride == 0 || extents[l] <= 1 {
                continue;
            }
            let i = self.loops[l].unwrap_or(Reg {
                class: self.width.class(),
                number: 0,
            });
            element = Some(match (element, stride) {
                (None, 1) => i,
                (None, _) => {
                    let d = self.int_reg();
                    self.e.ins(format!("mul.lo.{t} {d}, {i}, {stride}"));
                    d
                }
                (Some(acc), 1) => {
                    let d = self.int_reg();
                    self.e.ins(format!("add.{t} {d}, {acc}, {i}"));
                    d
                }
                (Some(acc), _) => {
                    let d = self.int_reg();
                    self.e.ins(format!("mad.lo.{t} {d}, {i}, {stride}, {acc}"));
                    d
                }
            });
        }
        let base = self.bases[buffer.index()];
        let size = element_size(self.kernel.buffer(buffer).ty);
        let Some(element) = element else {
            if index.offset == 0 {
                return base;
            }
            let a = self.e.reg(RegClass::B64);
            let bytes = index.offset * size;
            self.e.ins(format!("add.s64 {a}, {base}, {bytes}"));
            return a;
        };
        let element = if index.offset == 0 {
            element
        } else {
            let d = self.int_reg();
            self.e
                .ins(format!("add.{t} {d}, {element}, {}", index.offset));
            d
        };
        let bytes = self.e.reg(RegClass::B64);
        match self.width {
            IntWidth::U32 => self
                .e
                .ins(format!("mul.wide.u32 {bytes}, {element}, {size}")),
            IntWidth::U64 => self.e.ins(format!("mul.lo.u64 {bytes}, {element}, {size}")),
        }
        let a = self.e.reg(RegClass::B64);
        self.e.ins(format!("add.s64 {a}, {base}, {bytes}"));
        a
    }
}
