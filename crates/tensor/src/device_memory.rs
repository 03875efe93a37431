//! Device memory of tensors for device crates' own executors (a compiled program on a GPU
//! binds its inputs' memory to kernels and returns results it computed as tensors):
//! [`Tensor::with_device_memory`] reads the memory behind a device tensor, and
//! [`Tensor::from_device_memory`] makes a tensor of memory a registered backend made.

use crate::backend::{DeviceStorage, backend_for};
use crate::tensor_storage::{DeviceBuffer, Storage};
use crate::{Layout, Result, Tensor};

impl Tensor {
    /// Calls `f` with the device memory behind this tensor and the tensor's layout into it
    /// (read-locked while `f` runs); `None` for a CPU or meta tensor.
    pub fn with_device_memory<R>(
        &self,
        f: impl FnOnce(&dyn DeviceStorage, &Layout) -> R,
    ) -> Option<R> {
        self.with_storage(|storage, layout| match storage {
            Storage::Device(buffer) => Some(f(buffer.memory.as_ref(), layout)),
            _ => None,
        })
    }

    /// A contiguous tensor of `shape` over `memory`, which the backend registered for its
    /// device made; `memory` must hold exactly `shape.product()` elements.
    pub fn from_device_memory(memory: Box<dyn DeviceStorage>, shape: &[usize]) -> Result<Tensor> {
        let (device, dtype) = (memory.device(), memory.dtype());
        let backend = backend_for(device)?;
        let numel = crate::size::saturating_numel(shape);
        let buffer =
            DeviceBuffer::new("from_device_memory", memory, backend, device, dtype, numel)?;
        Ok(Tensor::from_device(buffer, shape))
    }
}
