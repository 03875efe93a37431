//! A [`KernelExecutor`] that renders each kernel to PTX and runs it in the PTX emulator, so a
//! whole lowered program runs "on the GPU" on any machine and can be compared with the
//! kernel-IR interpreter; a launch group runs as the one kernel `render_group` writes for it.
//! A kernel that fails to render, parse or run panics with the error and the numbered PTX
//! text.

use super::emulator::{GlobalMemory, LaunchConfig, Module, ParamValue};
use tessera_cuda::{PtxTarget, render, render_group};
use tessera_kernel::{BufferPtr, BufferRole, GroupPart, Kernel, KernelExecutor, ScalarType};

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
        // Elementwise kernels read their block size from `%ntid.x`; reductions and GEMM or
        // convolution tiles are written for theirs.
        let external = kernel.gemm.is_some() || kernel.conv.is_some();
        let block = if kernel.reduce.is_empty() && !external {
            self.elementwise_block
        } else {
            rendered.block
        };
        let config = LaunchConfig::new(rendered.blocks_needed.clamp(1, self.max_grid), block);
        let (name, ptx) = (&rendered.name, &rendered.ptx);
        run_parsed(name, ptx, config, &[(kernel, buffers)], "");
        Ok(())
    }

    /// The group as one kernel, each part on the blocks it would take alone.
    unsafe fn execute_group(&self, parts: &[GroupPart<'_>]) -> tessera_kernel::Result<()> {
        let kernels: Vec<&Kernel> = parts.iter().map(|p| p.kernel).collect();
        let max_grid = self.max_grid;
        let rendered = render_group(&kernels, &PtxTarget::SM80, &|r| {
            r.blocks_needed.clamp(1, max_grid)
        })
        .unwrap_or_else(|e| panic!("rendering a group of {}: {e}", kernels[0].name));
        let pairs: Vec<(&Kernel, &[BufferPtr])> =
            parts.iter().map(|p| (p.kernel, p.buffers)).collect();
        let config = LaunchConfig::new(rendered.grid, self.elementwise_block);
        run_parsed(&rendered.name, &rendered.ptx, config, &pairs, "p");
        Ok(())
    }
}

/// Parses `ptx`, runs its entry `name` with `config` on the parts' buffers (named with
/// `prefix`, see [`buffer_name`]) and copies their outputs back; a failure to parse, run or
/// read back panics with the error and the numbered PTX text.
fn run_parsed(
    name: &str,
    ptx: &str,
    config: LaunchConfig,
    parts: &[(&Kernel, &[BufferPtr])],
    prefix: &str,
) {
    let fail = |what: &str, e: &dyn std::fmt::Display| -> ! {
        panic!("{what} {name} failed: {e}\n{}", numbered(ptx))
    };
    let module = Module::parse(ptx).unwrap_or_else(|e| fail("parsing", &e));
    let mut memory = GlobalMemory::default();
    let params = upload(&mut memory, parts, prefix);
    module
        .launch(name, config, &params, &mut memory)
        .unwrap_or_else(|e| fail("running", &e));
    download(&memory, parts, prefix).unwrap_or_else(|e| fail("reading back", &e));
}

/// The emulator's name of buffer `i` of part `part` (of the one kernel when `prefix` is
/// empty).
fn buffer_name(prefix: &str, part: usize, i: usize) -> String {
    if prefix.is_empty() {
        format!("buf{i}")
    } else {
        format!("{prefix}{part}_buf{i}")
    }
}

/// Copies every part's inputs (and scratch, which a gather's status needs zeroed) into
/// `memory` and allocates its outputs; the kernel parameters, in order.
fn upload(
    memory: &mut GlobalMemory,
    parts: &[(&Kernel, &[BufferPtr])],
    prefix: &str,
) -> Vec<ParamValue> {
    let mut params = Vec::new();
    for (part, (kernel, buffers)) in parts.iter().enumerate() {
        for (i, (param, buffer)) in kernel.buffers.iter().zip(buffers.iter()).enumerate() {
            let bytes = buffer.len * element_bytes(buffer.ty);
            let name = buffer_name(prefix, part, i);
            let address = match param.role {
                // SAFETY: the runner passes live buffers of the lengths and types given.
                BufferRole::Input | BufferRole::Scratch => memory.upload_bytes(&name, unsafe {
                    std::slice::from_raw_parts(buffer.ptr, bytes)
                }),
                BufferRole::Output => memory.alloc(&name, bytes),
            };
            params.push(ParamValue::Ptr(address));
        }
    }
    params
}

/// Copies every part's outputs and scratch back out of `memory`.
fn download(
    memory: &GlobalMemory,
    parts: &[(&Kernel, &[BufferPtr])],
    prefix: &str,
) -> Result<(), String> {
    for (part, (kernel, buffers)) in parts.iter().enumerate() {
        for (i, (param, buffer)) in kernel.buffers.iter().zip(buffers.iter()).enumerate() {
            if param.role != BufferRole::Input {
                let bytes = memory
                    .read_bytes(&buffer_name(prefix, part, i))
                    .map_err(|e| e.to_string())?;
                // SAFETY: outputs are writable and of `bytes.len()` bytes, as the runner
                // promises.
                unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), buffer.ptr, bytes.len()) };
            }
        }
    }
    Ok(())
}
