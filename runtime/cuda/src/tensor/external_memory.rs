//! A CUDA tensor's device memory for a library that works on it in place (NCCL collectives):
//! the address of its first element, how many elements follow, and the driver whose context
//! and stream ([`CudaDriver::external_stream`]) order that work with Tessera's own.

use super::storage::CudaStorage;
use crate::driver::{CudaDriver, DevicePtr};
use crate::{CudaError, Result};
use std::any::Any;
use std::sync::Arc;
use tessera_tensor::{DType, Tensor};

/// The contiguous device memory of one CUDA tensor, valid while the closure given it runs.
#[derive(Debug, Clone, Copy)]
pub struct CudaTensorMemory<'a> {
    /// The device's ordinal (`cuda:N`).
    pub ordinal: usize,
    /// The address of the tensor's first element (its storage offset applied).
    pub ptr: DevicePtr,
    /// The tensor's elements, contiguous from `ptr`.
    pub numel: usize,
    pub dtype: DType,
    /// The driver that allocated the memory and orders work on it.
    pub driver: &'a Arc<dyn CudaDriver>,
}

impl CudaTensorMemory<'_> {
    /// The bytes from `ptr` the tensor's elements take.
    pub fn bytes(&self) -> usize {
        self.numel * self.dtype.size_in_bytes()
    }
}

/// Calls `f` with `tensor`'s device memory. The storage is write-locked (and its version
/// bumped, an in-place write) when `write`, read-locked otherwise, until `f` returns: work `f`
/// enqueues on the memory must be ordered on the driver's stream before other users of the
/// tensor run. A tensor that is not on a CUDA device of this crate, or is not contiguous (a
/// transposed or expanded view), is [`CudaError::InvalidUse`] naming `op`.
pub fn with_cuda_memory<R>(
    tensor: &Tensor,
    op: &'static str,
    write: bool,
    f: impl FnOnce(CudaTensorMemory<'_>) -> R,
) -> Result<R> {
    let invalid = |message: String| CudaError::InvalidUse { call: op, message };
    let shape = tensor.shape();
    tensor
        .with_device_storage(write, |memory, layout| {
            let Some(storage) = (memory as &dyn Any).downcast_ref::<CudaStorage>() else {
                return Err(invalid(format!(
                    "a tensor on {} is not memory of the CUDA backend",
                    memory.device()
                )));
            };
            if !layout.is_contiguous() {
                return Err(invalid(format!(
                    "the tensor of shape {shape:?} (strides {:?}) is not contiguous; call \
                     .contiguous() first",
                    layout.strides
                )));
            }
            if layout.storage_extent() > storage.numel_elements() {
                return Err(invalid(format!(
                    "the view of shape {shape:?} at offset {} reaches past the {} elements of \
                     its storage",
                    layout.offset,
                    storage.numel_elements()
                )));
            }
            Ok(f(CudaTensorMemory {
                ordinal: storage.ordinal(),
                ptr: storage.ptr().add(layout.offset * storage.element_bytes()),
                numel: layout.numel(),
                dtype: storage.dtype_of(),
                driver: storage.allocator().driver(),
            }))
        })
        .unwrap_or_else(|| {
            Err(invalid(format!(
                "the tensor of shape {shape:?} is on {}, not on a CUDA device",
                tensor.device()
            )))
        })
}
