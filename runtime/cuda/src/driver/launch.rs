//! What a launch takes besides the function: its grid, block and dynamic shared memory
//! ([`LaunchDims`]), and its arguments ([`KernelArg`]), one per `.param` of the entry.

use super::DevicePtr;

/// A launch's grid of blocks and threads per block (x, y, z), and the bytes of dynamic
/// shared memory each block gets (besides the module's static `.shared` arrays).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaunchDims {
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub shared_bytes: u32,
}

impl LaunchDims {
    /// A 1-D launch of `grid` blocks of `block` threads, no dynamic shared memory (what the
    /// PTX renderer's kernels take).
    pub const fn linear(grid: u32, block: u32) -> LaunchDims {
        LaunchDims {
            grid: [grid, 1, 1],
            block: [block, 1, 1],
            shared_bytes: 0,
        }
    }
}

/// One kernel argument, in the type of the entry's `.param`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum KernelArg {
    /// A `.u64` pointer parameter.
    Ptr(DevicePtr),
    U32(u32),
    U64(u64),
    I32(i32),
    F32(f32),
    F64(f64),
}

impl KernelArg {
    /// The argument's bytes as the driver reads them (little-endian, its own size), padded
    /// to 8 bytes.
    pub fn bytes(self) -> [u8; 8] {
        let mut out = [0u8; 8];
        match self {
            KernelArg::Ptr(p) => out = p.address().to_le_bytes(),
            KernelArg::U64(v) => out = v.to_le_bytes(),
            KernelArg::F64(v) => out = v.to_le_bytes(),
            KernelArg::U32(v) => out[..4].copy_from_slice(&v.to_le_bytes()),
            KernelArg::I32(v) => out[..4].copy_from_slice(&v.to_le_bytes()),
            KernelArg::F32(v) => out[..4].copy_from_slice(&v.to_le_bytes()),
        }
        out
    }

    /// The parameter's size in bytes.
    pub fn size(self) -> usize {
        match self {
            KernelArg::Ptr(_) | KernelArg::U64(_) | KernelArg::F64(_) => 8,
            KernelArg::U32(_) | KernelArg::I32(_) | KernelArg::F32(_) => 4,
        }
    }
}
