//! CUDA memory as tensor storage: a block of the device's caching allocator holding `numel`
//! elements of one dtype, behind the tensor crate's [`DeviceStorage`] seam. Dropping the
//! storage (its last tensor) returns the block to the cache.

use crate::allocator::{CachingAllocator, DeviceBlock};
use crate::driver::DevicePtr;
use std::sync::Arc;
use tessera_tensor::backend::DeviceStorage;
use tessera_tensor::{DType, Device};

/// A tensor's memory on a CUDA device.
#[derive(Debug)]
pub struct CudaStorage {
    block: DeviceBlock,
    dtype: DType,
    numel: usize,
}

impl CudaStorage {
    /// Storage of `numel` elements of `dtype` in `block` (of at least their bytes).
    pub(crate) fn new(block: DeviceBlock, dtype: DType, numel: usize) -> CudaStorage {
        debug_assert!(block.len() >= numel * dtype.size_in_bytes());
        CudaStorage {
            block,
            dtype,
            numel,
        }
    }

    /// The device address of element 0.
    pub fn ptr(&self) -> DevicePtr {
        self.block.ptr()
    }

    /// The device's ordinal.
    pub fn ordinal(&self) -> usize {
        self.block.device()
    }

    /// The bytes the elements take.
    pub fn bytes(&self) -> usize {
        self.numel * self.dtype.size_in_bytes()
    }

    pub(crate) fn element_bytes(&self) -> usize {
        self.dtype.size_in_bytes()
    }

    pub(crate) fn dtype_of(&self) -> DType {
        self.dtype
    }

    pub(crate) fn numel_elements(&self) -> usize {
        self.numel
    }

    pub(crate) fn allocator(&self) -> &Arc<CachingAllocator> {
        self.block.allocator()
    }
}

impl DeviceStorage for CudaStorage {
    fn device(&self) -> Device {
        Device::Cuda(self.block.device())
    }

    fn dtype(&self) -> DType {
        self.dtype
    }

    fn numel(&self) -> usize {
        self.numel
    }
}
