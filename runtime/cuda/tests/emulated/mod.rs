//! A [`KernelExecutor`] that renders each kernel to PTX and runs it in the PTX emulator, so a
//! whole lowered program runs "on the GPU" on any machine and can be compared with the
//! kernel-IR interpreter. A kernel that fails to render, parse or run panics with the error
//! and the numbered PTX text.

use super::emulator::{GlobalMemory, LaunchConfig, Module, ParamValue};
use tessera_cuda::{PtxTarget, render};
use tessera_kernel::{BufferPtr, BufferRole, Kernel, KernelExecutor, ScalarType};

/// Runs kernels in the emulator with at most `max_grid` blocks; elementwise kernels (whose
/// code reads the block size from `%ntid.x`) run with `elementwise_block` threads per block,
/// reductions and GEMM or convolution kernels with the block size they were rendered for.
pub struct EmulatedPtx {
    pub max_grid: u32,
    pub elementwise_block: u32,
}

impl Default for EmulatedPtx {
    /// Two blocks, of 32 threads for elementwise kernels: small odd shapes then loop in the
    /// grid-stride loops and reductions take several rows per block.
    fn default() -> Self {
        EmulatedPtx {
            max_grid: 2,
            elementwise_block: 32,
        }
    }
}

fn element_bytes(ty: ScalarType) -> usize {
    ty.bytes()
}

fn numbered(ptx: &str) -> String {
    ptx.lines()
        .enumerate()
        .map(|(i, l)| format!("{:4} {l}\n", i + 1))
        .collect()
}

impl KernelExecutor for EmulatedPtx {
    unsafe fn execute(
        &self,
        _step: usize,
        kernel: &Kernel,
        buffers: &[BufferPtr],
    ) -> tessera_kernel::Result<()> {
        let rendered = render(kernel, &PtxTarget::SM80)
            .unwrap_or_else(|e| panic!("rendering {}: {e}", kernel.name));
        let fail = |what: &str, e: &dyn std::fmt::Display| -> ! {
            panic!(
                "{what} {} failed: {e}\n{}",
                rendered.name,
                numbered(&rendered.ptx)
            )
        };
        let module = Module::parse(&rendered.ptx).unwrap_or_else(|e| fail("parsing", &e));
        let mut memory = GlobalMemory::default();
        let mut params = Vec::with_capacity(buffers.len());
        for (i, (param, buffer)) in kernel.buffers.iter().zip(buffers).enumerate() {
            let bytes = buffer.len * element_bytes(buffer.ty);
            let address = match param.role {
                // SAFETY: the runner passes live buffers of the lengths and types given.
                // Scratch too: a gather's status comes zeroed by the runner.
                BufferRole::Input | BufferRole::Scratch => memory
                    .upload_bytes(&format!("buf{i}"), unsafe {
                        std::slice::from_raw_parts(buffer.ptr, bytes)
                    }),
                BufferRole::Output => memory.alloc(&format!("buf{i}"), bytes),
            };
            params.push(ParamValue::Ptr(address));
        }
        // Elementwise kernels read their block size from `%ntid.x`; reductions and GEMM or
        // convolution tiles are written for theirs.
        let external = kernel.gemm.is_some() || kernel.conv.is_some();
        let block = if kernel.reduce.is_empty() && !external {
            self.elementwise_block
        } else {
            rendered.block
        };
        let config = LaunchConfig::new(rendered.blocks_needed.clamp(1, self.max_grid), block);
        module
            .launch(&rendered.name, config, &params, &mut memory)
            .unwrap_or_else(|e| fail("running", &e));
        for (i, (param, buffer)) in kernel.buffers.iter().zip(buffers).enumerate() {
            if param.role != BufferRole::Input {
                let bytes = memory
                    .read_bytes(&format!("buf{i}"))
                    .unwrap_or_else(|e| fail("reading back", &e));
                // SAFETY: outputs are writable and of `bytes.len()` bytes, as the runner promises.
                unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), buffer.ptr, bytes.len()) };
            }
        }
        Ok(())
    }
}
