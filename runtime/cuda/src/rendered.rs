//! A kernel rendered to PTX, with what launching it needs: its entry name, block size, the
//! number of blocks that gives every output point (or reduction row) a thread (or block), and
//! its buffer parameters in order.

use tessera_kernel::BufferParam;

/// Blocks per multiprocessor a grid-stride launch asks for: enough resident warps to hide
/// memory latency, few enough that the loop, not the launch, does the work.
pub const BLOCKS_PER_MULTIPROCESSOR: u32 = 8;

/// PTX text of one kernel and its launch configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct RenderedKernel {
    /// The `.entry` name (the kernel's name, made a PTX identifier).
    pub name: String,
    pub ptx: String,
    /// Threads per block (a multiple of 32; the x dimension only).
    pub block: u32,
    /// Blocks that would give each unit of work its own thread (elementwise) or block
    /// (reductions); the kernel loops, so any grid size computes everything.
    pub blocks_needed: u32,
    /// The buffer parameters, in the `.entry`'s parameter order (one `.u64` pointer each).
    pub buffers: Vec<BufferParam>,
    /// Points per thread and iteration: 4 when the kernel uses `ld/st.global.v4.f32`, whose
    /// buffers must then be 16-byte aligned; 1 otherwise.
    pub vector_width: u32,
}

impl RenderedKernel {
    /// The grid size for a device of `multiprocessors` SMs: the blocks needed, at most
    /// [`BLOCKS_PER_MULTIPROCESSOR`] per SM, at least 1.
    pub fn grid_for(&self, multiprocessors: u32) -> u32 {
        let cap = multiprocessors
            .max(1)
            .saturating_mul(BLOCKS_PER_MULTIPROCESSOR);
        self.blocks_needed.min(cap).max(1)
    }
}
