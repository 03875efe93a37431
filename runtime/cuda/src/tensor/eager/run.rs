//! Running a compiled eager op: its outputs and intermediates allocated from the device's
//! caching allocator, each kernel's parameters bound to the operands' storage (the whole
//! buffer: the layout is in the kernel's index arithmetic), checked against what the kernel
//! reads, and launched in order on the device's queue.

use super::compile::{Binding, CompiledOp, SlotPlan};
use crate::driver::KernelArg;
use crate::tensor::copies::alloc_storage;
use crate::tensor::device_state::DeviceState;
use crate::tensor::storage::CudaStorage;
use crate::{CudaError, Result};
use tessera_kernel::ScalarType;
use tessera_tensor::TensorMeta;

/// The memory of a slot during a run.
enum SlotMemory<'a> {
    Operand(&'a CudaStorage),
    Owned(CudaStorage),
    /// An owned result already handed out.
    Taken,
}

impl CompiledOp {
    /// Runs the op on `operands`, returning the storage of each of `outputs`.
    pub(crate) fn run(
        &self,
        state: &DeviceState,
        operands: &[&CudaStorage],
        outputs: &[TensorMeta],
    ) -> Result<Vec<CudaStorage>> {
        let mut memory = Vec::with_capacity(self.slots.len());
        for plan in &self.slots {
            memory.push(match *plan {
                SlotPlan::Operand(n) => {
                    SlotMemory::Operand(operands.get(n).copied().ok_or_else(|| {
                        CudaError::InvalidUse {
                            call: "eager op",
                            message: format!("operand {n} missing: {} given", operands.len()),
                        }
                    })?)
                }
                SlotPlan::Computed { dtype, numel } => {
                    SlotMemory::Owned(alloc_storage(&state.allocator, dtype, numel)?)
                }
            });
        }
        for launch in &self.launches {
            let mut scratch = Vec::new();
            let mut args = Vec::with_capacity(launch.bindings.len());
            for (i, binding) in launch.bindings.iter().enumerate() {
                let storage = match *binding {
                    Binding::Slot { slot, ty, len } => {
                        let storage = match &memory[slot.index()] {
                            SlotMemory::Operand(s) => *s,
                            SlotMemory::Owned(s) => s,
                            SlotMemory::Taken => unreachable_taken(&launch.kernel)?,
                        };
                        check(&launch.kernel, i, storage, ty, len)?;
                        storage.ptr()
                    }
                    Binding::Scratch { ty, len } => {
                        let s = alloc_storage(&state.allocator, ty.dtype(), len)?;
                        let ptr = s.ptr();
                        if launch.status.contains(&i) {
                            // SAFETY: `s` is a live block of this device of `bytes()` bytes.
                            unsafe { self.driver.memset(state.ordinal, ptr, 0, s.bytes())? };
                        }
                        scratch.push((i, s));
                        ptr
                    }
                };
                args.push(KernelArg::Ptr(storage));
            }
            // SAFETY: one `.u64` pointer per buffer parameter, in order (the renderer's
            // `.entry`), each a live block of this device holding at least the elements of the
            // parameter's type the kernel touches (`check`); the kernel touches nothing else
            // (`Kernel::verify`, run by the renderer).
            unsafe { self.driver.launch(launch.function, launch.dims, &args)? };
            for (_, s) in scratch.iter().filter(|(i, _)| launch.status.contains(i)) {
                let status = read_status(&self.driver, state.ordinal, s)?;
                tessera_kernel::gather::check_status(&launch.kernel, &status)?;
            }
            // Scratch goes back to the cache now: later work on the device runs after this.
            drop(scratch);
        }
        let mut results = Vec::with_capacity(self.outputs.len());
        for (slot, meta) in self.outputs.iter().zip(outputs) {
            let taken = std::mem::replace(&mut memory[slot.index()], SlotMemory::Taken);
            let SlotMemory::Owned(storage) = taken else {
                return unreachable_taken("eager op");
            };
            if storage.dtype_of() != meta.dtype || storage.numel_elements() != meta.numel() {
                return Err(CudaError::InvalidUse {
                    call: "eager op",
                    message: format!(
                        "the program's result is {} elements of {}, the op's {} elements of {}",
                        storage.numel_elements(),
                        storage.dtype_of(),
                        meta.numel(),
                        meta.dtype
                    ),
                });
            }
            results.push(storage);
        }
        Ok(results)
    }
}

fn unreachable_taken<T>(kernel: &str) -> Result<T> {
    Err(CudaError::Launch {
        kernel: kernel.to_string(),
        message: "reads a result that was already handed out".into(),
    })
}

/// Checks that `storage` can be parameter `index` of `kernel`: elements of `ty`, at least `len`.
fn check(
    kernel: &str,
    index: usize,
    storage: &CudaStorage,
    ty: ScalarType,
    len: usize,
) -> Result<()> {
    if storage.dtype_of() != ty.dtype() || storage.numel_elements() < len {
        return Err(CudaError::Launch {
            kernel: kernel.to_string(),
            message: format!(
                "buffer {index} is {}[{}], the kernel reads {ty}[{len}]",
                storage.dtype_of(),
                storage.numel_elements()
            ),
        });
    }
    Ok(())
}

/// The status of a kernel with gathers (`tessera_kernel::gather`), copied back from `block`
/// after the work issued before.
pub(crate) fn read_status(
    driver: &std::sync::Arc<dyn crate::driver::CudaDriver>,
    ordinal: usize,
    block: &CudaStorage,
) -> Result<[i64; tessera_kernel::gather::STATUS_LEN]> {
    let mut bytes = [0u8; 8 * tessera_kernel::gather::STATUS_LEN];
    // SAFETY: the block is a live allocation of this device of at least `STATUS_LEN` i64s.
    unsafe { driver.copy_to_host(ordinal, &mut bytes, block.ptr())? };
    let mut status = [0i64; tessera_kernel::gather::STATUS_LEN];
    for (s, b) in status.iter_mut().zip(bytes.chunks_exact(8)) {
        let mut word = [0u8; 8];
        word.copy_from_slice(b);
        *s = i64::from_ne_bytes(word);
    }
    Ok(status)
}
