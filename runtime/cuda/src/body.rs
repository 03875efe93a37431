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
    /// In a launch group's kernel ([`crate::group`]): the first block of this part's range
    /// of the grid and its block count, which the body reads as its block index and grid
    /// size.
    pub rebase: Option<(u32, u32)>,
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
        let position = LaunchPosition {
            ctaid: read("%ctaid.x"),
            ntid: read("%ntid.x"),
            tid: read("%tid.x"),
            nctaid: read("%nctaid.x"),
        };
        if let Some((first, blocks)) = self.rebase {
            let (ctaid, nctaid) = (position.ctaid, position.nctaid);
            self.e.ins(format!("sub.u32 {ctaid}, {ctaid}, {first}"));
            self.e.ins(format!("mov.u32 {nctaid}, {blocks}"));
        }
        position
    }

    /// Loads the buffer parameters (`buf0`, `buf1`, ...) and converts them to global addresses.
    pub fn new(kernel: &'k Kernel, width: IntWidth) -> Body<'k> {
        Body::with_emitter(kernel, width, Emitter::default(), "")
    }

    /// [`Body::new`] continuing `e` (a launch group's kernel, one part after another), its
    /// parameters named `{prefix}buf0`, `{prefix}buf1`, ...
    pub fn with_emitter(
        kernel: &'k Kernel,
        width: IntWidth,
        mut e: Emitter,
        prefix: &str,
    ) -> Body<'k> {
        let bases = (0..kernel.buffers.len())
            .map(|i| {
                let p = e.reg(RegClass::B64);
                e.ins(format!("ld.param.u64 {p}, [{prefix}buf{i}]"));
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
            rebase: None,
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
