//! The state of one kernel body while it is rendered: the emitter, the global address of each
//! buffer, the integer width of the index arithmetic, the register of each loop index and of
//! each value computed so far.

use crate::emit::{Emitter, Reg, RegClass};
use crate::index::IntWidth;
use tessera_kernel::{Kernel, ValueId};

pub(crate) struct Body<'k> {
    pub kernel: &'k Kernel,
    pub e: Emitter,
    /// Per buffer, its global address (`.b64`).
    pub bases: Vec<Reg>,
    pub width: IntWidth,
    /// Per loop (output loops, then reduction loops), its current index, once decomposed.
    pub loops: Vec<Option<Reg>>,
    /// Per value, the register holding it where it was last computed.
    pub values: Vec<Option<Reg>>,
    /// Per load, a register already holding it (a lane of a vector load), used instead of
    /// loading again.
    pub preloaded: Vec<Option<Reg>>,
}

/// The launch position registers a kernel reads: `%ctaid.x`, `%ntid.x`, `%tid.x`, `%nctaid.x`.
pub(crate) struct LaunchPosition {
    pub ctaid: Reg,
    pub ntid: Reg,
    pub tid: Reg,
    pub nctaid: Reg,
}

impl<'k> Body<'k> {
    /// Copies the block index, block size, thread index and grid size into `.b32` registers.
    pub fn launch_position(&mut self) -> LaunchPosition {
        let mut read = |special: &str| {
            let r = self.e.reg(RegClass::B32);
            self.e.ins(format!("mov.u32 {r}, {special}"));
            r
        };
        LaunchPosition {
            ctaid: read("%ctaid.x"),
            ntid: read("%ntid.x"),
            tid: read("%tid.x"),
            nctaid: read("%nctaid.x"),
        }
    }

    /// Loads the buffer parameters (`buf0`, `buf1`, ...) and converts them to global addresses.
    pub fn new(kernel: &'k Kernel, width: IntWidth) -> Body<'k> {
        let mut e = Emitter::default();
        let bases = (0..kernel.buffers.len())
            .map(|i| {
                let p = e.reg(RegClass::B64);
                e.ins(format!("ld.param.u64 {p}, [buf{i}]"));
                let g = e.reg(RegClass::B64);
                e.ins(format!("cvta.to.global.u64 {g}, {p}"));
                g
            })
            .collect();
        Body {
            kernel,
            e,
            bases,
            width,
            loops: vec![None; kernel.extents().len()],
            values: vec![None; kernel.values.len()],
            preloaded: vec![None; kernel.values.len()],
        }
    }

    /// The register of `v`, which must have been computed.
    pub fn value(&self, v: ValueId) -> Reg {
        // Values are emitted in topological order, so operands always have registers; a
        // missing one is a renderer bug, reported as an invalid register in the PTX.
        self.values[v.index()].unwrap_or(Reg {
            class: RegClass::B32,
            number: 0,
        })
    }

    /// A fresh integer register of the index width.
    pub fn int_reg(&mut self) -> Reg {
        self.e.reg(self.width.class())
    }
}
