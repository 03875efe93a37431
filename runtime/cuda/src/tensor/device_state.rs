//! What the CUDA backend keeps per device, made on the device's first use: its properties,
//! the PTX target kernels are rendered for, its caching allocator and its cache of eager
//! kernels.

use super::eager::KernelCache;
use crate::allocator::CachingAllocator;
use crate::driver::{CudaDriver, DeviceProperties};
use crate::{PtxTarget, Result};
use std::sync::Arc;

/// One device of the backend.
#[derive(Debug)]
pub(crate) struct DeviceState {
    pub(crate) ordinal: usize,
    pub(crate) properties: DeviceProperties,
    pub(crate) target: PtxTarget,
    pub(crate) allocator: Arc<CachingAllocator>,
    pub(crate) kernels: KernelCache,
}

impl DeviceState {
    pub(crate) fn new(driver: &Arc<dyn CudaDriver>, ordinal: usize) -> Result<DeviceState> {
        let properties = driver.properties(ordinal)?;
        Ok(DeviceState {
            ordinal,
            target: properties.ptx_target(),
            properties,
            allocator: CachingAllocator::new(Arc::clone(driver), ordinal),
            kernels: KernelCache::default(),
        })
    }
}
