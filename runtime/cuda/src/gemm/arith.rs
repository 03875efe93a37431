//! Integer and address arithmetic shared by the GEMM and convolution kernels: values of the
//! index width (`u32` when every count fits, else `u64`), their conversion from the 32-bit
//! special registers, and byte addresses from element indices.

use crate::emit::{Emitter, Reg, RegClass};
use crate::index::IntWidth;

/// Emits index-width instructions into one emitter.
pub(crate) struct Ints<'e> {
    pub e: &'e mut Emitter,
    pub w: IntWidth,
}

impl Ints<'_> {
    fn t(&self) -> &'static str {
        self.w.ty()
    }

    pub fn reg(&mut self) -> Reg {
        self.e.reg(self.w.class())
    }

    /// A `.b32` register (a special register's copy) widened to the index width.
    pub fn of_u32(&mut self, r: Reg) -> Reg {
        match self.w {
            IntWidth::U32 => r,
            IntWidth::U64 => {
                let d = self.reg();
                self.e.ins(format!("cvt.u64.u32 {d}, {r}"));
                d
            }
        }
    }

    pub fn constant(&mut self, v: usize) -> Reg {
        let d = self.reg();
        let t = self.t();
        self.e.ins(format!("mov.{t} {d}, {v}"));
        d
    }

    /// `op.t d, a, b` for `op` in `add`, `sub`, `div`, `rem` (the immediate `b`).
    fn binary_imm(&mut self, op: &str, a: Reg, b: usize) -> Reg {
        let d = self.reg();
        let t = self.t();
        self.e.ins(format!("{op}.{t} {d}, {a}, {b}"));
        d
    }

    pub fn add_imm(&mut self, a: Reg, b: usize) -> Reg {
        if b == 0 {
            return a;
        }
        self.binary_imm("add", a, b)
    }

    pub fn sub_imm(&mut self, a: Reg, b: usize) -> Reg {
        if b == 0 {
            return a;
        }
        self.binary_imm("sub", a, b)
    }

    pub fn div_imm(&mut self, a: Reg, b: usize) -> Reg {
        if b == 1 {
            return a;
        }
        self.binary_imm("div", a, b)
    }

    pub fn rem_imm(&mut self, a: Reg, b: usize) -> Reg {
        if b == 1 {
            return self.constant(0);
        }
        self.binary_imm("rem", a, b)
    }

    pub fn add(&mut self, a: Reg, b: Reg) -> Reg {
        let d = self.reg();
        let t = self.t();
        self.e.ins(format!("add.{t} {d}, {a}, {b}"));
        d
    }

    /// `a - b`, wrapping below zero.
    pub fn sub(&mut self, a: Reg, b: Reg) -> Reg {
        let d = self.reg();
        let t = self.t();
        self.e.ins(format!("sub.{t} {d}, {a}, {b}"));
        d
    }

    pub fn mul_imm(&mut self, a: Reg, b: usize) -> Reg {
        match b {
            0 => self.constant(0),
            1 => a,
            _ => self.binary_imm("mul.lo", a, b),
        }
    }

    /// `a * b + c`.
    pub fn mad_imm(&mut self, a: Reg, b: usize, c: Reg) -> Reg {
        match b {
            0 => c,
            1 => self.add(a, c),
            _ => {
                let d = self.reg();
                let t = self.t();
                self.e.ins(format!("mad.lo.{t} {d}, {a}, {b}, {c}"));
                d
            }
        }
    }

    /// The predicate `a < b` (unsigned).
    pub fn lt_imm(&mut self, a: Reg, b: usize) -> Reg {
        let p = self.e.reg(RegClass::Pred);
        let t = self.t();
        self.e.ins(format!("setp.lt.{t} {p}, {a}, {b}"));
        p
    }

    /// `a * size` bytes as a `.b64` offset.
    pub fn bytes(&mut self, a: Reg, size: usize) -> Reg {
        let d = self.e.reg(RegClass::B64);
        match self.w {
            IntWidth::U32 => self.e.ins(format!("mul.wide.u32 {d}, {a}, {size}")),
            IntWidth::U64 => self.e.ins(format!("mul.lo.u64 {d}, {a}, {size}")),
        }
        d
    }

    /// `base + a * size`, a `.b64` address.
    pub fn address(&mut self, base: Reg, a: Reg, size: usize) -> Reg {
        let bytes = self.bytes(a, size);
        let d = self.e.reg(RegClass::B64);
        self.e.ins(format!("add.s64 {d}, {base}, {bytes}"));
        d
    }
}

/// `p && q` as a new predicate.
pub(crate) fn and_pred(e: &mut Emitter, p: Reg, q: Reg) -> Reg {
    let d = e.reg(RegClass::Pred);
    e.ins(format!("and.pred {d}, {p}, {q}"));
    d
}

/// `base + offset` bytes, a `.b64` address (the base itself for 0).
pub(crate) fn offset_address(e: &mut Emitter, base: Reg, offset: usize) -> Reg {
    if offset == 0 {
        return base;
    }
    let d = e.reg(RegClass::B64);
    e.ins(format!("add.s64 {d}, {base}, {offset}"));
    d
}
