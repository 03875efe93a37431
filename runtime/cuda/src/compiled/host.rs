//! Host steps of a [`CudaProgram`]: what the device does not run as a generated kernel.
//! A kernel the PTX renderer refuses (bf16 rounding below sm_80, a read of a product's
//! result at another point) runs on the host: its buffers copied from the arena, the kernel run by the
//! caller's CPU executor, its outputs and scratch copied back. An external op runs as an eager op on CUDA tensors when the CUDA backend has its
//! kernels, else on the CPU (operands copied to the host and the results back).

use super::program::CudaProgram;
use super::update::Binding;
use crate::{CudaError, Result};
use tessera_kernel::{BufferPtr, BufferRole, ExternalCall, KernelExecutor, Step};
use tessera_tensor::{Device, Tensor, TensorError};

impl CudaProgram {
    pub(crate) fn run_host(
        &self,
        step: usize,
        executor: &dyn KernelExecutor,
        bound: &Binding,
    ) -> Result<()> {
        match &self.program.steps[step] {
            Step::Kernel {
                kernel,
                inputs,
                outputs,
                ..
            } => {
                let (mut ins, mut outs) = (inputs.iter(), outputs.iter());
                let mut scratch = self.scratch.get(step).into_iter().flatten();
                // Per parameter: its device address, whether the kernel writes it, and a
                // host copy (8-byte words: aligned for every element type).
                let mut buffers = Vec::with_capacity(kernel.buffers.len());
                for p in &kernel.buffers {
                    let bytes = p.len * p.ty.dtype().size_in_bytes();
                    let (found, written) = match p.role {
                        BufferRole::Input => {
                            let s = ins.next().copied();
                            (s.map(|s| self.slot_memory(s, bound)).transpose()?, false)
                        }
                        BufferRole::Output => {
                            let s = outs.next().copied();
                            (s.map(|s| self.slot_memory(s, bound)).transpose()?, true)
                        }
                        BufferRole::Scratch => (
                            scratch
                                .next()
                                .map(|b| (self.arena.ptr().add(b.offset), b.bytes())),
                            true,
                        ),
                    };
                    let (ptr, place) = found.ok_or_else(|| CudaError::Launch {
                        kernel: kernel.name.clone(),
                        message: "has more buffer parameters than its step has slots".into(),
                    })?;
                    if place < bytes {
                        return Err(CudaError::Launch {
                            kernel: kernel.name.clone(),
                            message: format!("a buffer of {place} bytes where {bytes} are read"),
                        });
                    }
                    let mut host = vec![0u64; bytes.div_ceil(8)];
                    if !written || p.role == BufferRole::Output {
                        // SAFETY: `bytes` lie in the slot's place (checked above).
                        unsafe {
                            self.driver.copy_to_host(
                                self.state.ordinal,
                                &mut bytemuck_bytes(&mut host)[..bytes],
                                ptr,
                            )?
                        };
                    }
                    buffers.push((ptr, bytes, written, host));
                }
                let ptrs: Vec<BufferPtr> = buffers
                    .iter_mut()
                    .zip(&kernel.buffers)
                    .map(|((_, _, _, host), p)| BufferPtr {
                        ptr: host.as_mut_ptr() as *mut u8,
                        len: p.len,
                        ty: p.ty,
                    })
                    .collect();
                // SAFETY: each pointer is a host buffer of its parameter's length and type,
                // owned by `buffers`, distinct from every other.
                unsafe { executor.execute(step, kernel, &ptrs)? };
                // A gather's status starts zeroed (scratch is not copied in) and is read here.
                for b in kernel.status_buffers() {
                    let host = &buffers[b.index()].3;
                    let status: Vec<i64> = host.iter().map(|w| *w as i64).collect();
                    tessera_kernel::gather::check_status(&kernel.name, &status)?;
                }
                for (ptr, bytes, written, mut host) in buffers {
                    if written {
                        // SAFETY: the same range the buffer was sized from.
                        unsafe {
                            self.driver.copy_to_device(
                                self.state.ordinal,
                                ptr,
                                &bytemuck_bytes(&mut host)[..bytes],
                            )?
                        };
                    }
                }
                Ok(())
            }
            Step::External {
                node,
                call,
                inputs,
                outputs,
            } => {
                let ExternalCall::Op(op) = call else {
                    return Err(CudaError::InvalidUse {
                        call: "compiled program",
                        message: format!("%{node} calls a module, which compiling inlines"),
                    });
                };
                let args = inputs
                    .iter()
                    .map(|v| self.output(v, bound))
                    .collect::<Result<Vec<_>>>()?;
                let refs: Vec<&Tensor> = args.iter().collect();
                let results = match op.apply(&refs) {
                    Err(TensorError::UnsupportedOnDevice { .. }) => {
                        let host: Vec<Tensor> = args
                            .iter()
                            .map(|t| t.to_device(Device::Cpu))
                            .collect::<std::result::Result<_, _>>()?;
                        let refs: Vec<&Tensor> = host.iter().collect();
                        op.apply(&refs)?
                            .iter()
                            .map(|t| t.to_device(Device::Cuda(self.state.ordinal)))
                            .collect::<std::result::Result<Vec<_>, _>>()?
                    }
                    other => other?,
                };
                if results.len() != outputs.len() {
                    return Err(CudaError::InvalidUse {
                        call: "compiled program",
                        message: format!(
                            "%{node} gave {} values, {} expected",
                            results.len(),
                            outputs.len()
                        ),
                    });
                }
                for (slot, t) in outputs.iter().zip(&results) {
                    let (_keep, src, bytes) = self.packed_memory(t)?;
                    let (dst, place) = self.slot_memory(*slot, bound)?;
                    if bytes != place {
                        return Err(CudaError::InvalidUse {
                            call: "compiled program",
                            message: format!(
                                "%{node} gave {bytes} bytes for a slot of {place} bytes"
                            ),
                        });
                    }
                    // SAFETY: both ranges are live device memory of `bytes` bytes.
                    unsafe {
                        self.driver
                            .copy_on_device(self.state.ordinal, dst, src, bytes)?
                    };
                }
                Ok(())
            }
        }
    }
}

/// The bytes of `words`.
fn bytemuck_bytes(words: &mut [u64]) -> &mut [u8] {
    let len = std::mem::size_of_val(words);
    // SAFETY: u64 has no padding and every byte pattern is a valid u8.
    unsafe { std::slice::from_raw_parts_mut(words.as_mut_ptr() as *mut u8, len) }
}
