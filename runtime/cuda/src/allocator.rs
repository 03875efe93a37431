//! A caching allocator of device memory over a [`CudaDriver`], as PyTorch's: a freed block
//! goes back to a cache, keyed by its size class, and the next request of that class takes it
//! without a driver call (`cuMemAlloc` and `cuMemFree` synchronise the device, so an eager op
//! that allocated through the driver every time would wait for the GPU on every call).
//! [`CachingAllocator::empty_cache`] returns the cached blocks to the driver, and an
//! allocation the driver refuses for lack of memory is retried once after emptying the cache.
//!
//! A block may go back to the cache while work that uses it is still queued: the driver runs a
//! device's work in order (see [`crate::driver`]), so whoever reuses it later runs after.

use crate::driver::{CudaDriver, DevicePtr};
use crate::{CudaError, Result};
use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};

/// The smallest block handed out (requests round up to it).
pub const MIN_BLOCK_BYTES: usize = 512;

/// The size class of a request of `bytes` bytes: at least [`MIN_BLOCK_BYTES`], and above that
/// rounded up to one of four steps between consecutive powers of two (so a block wastes at
/// most a quarter of its size, and requests of similar sizes share a class). `None` when the
/// rounding overflows.
pub fn size_class(bytes: usize) -> Option<usize> {
    let bytes = bytes.max(MIN_BLOCK_BYTES);
    let power = bytes.checked_next_power_of_two()?;
    if power == bytes {
        return Some(bytes);
    }
    let step = power / 8;
    bytes.checked_next_multiple_of(step)
}

/// What an allocator holds and has done, for tests and for `memory_stats`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AllocatorStats {
    /// Bytes of the blocks handed out and not yet dropped (by size class).
    pub bytes_in_use: usize,
    /// Bytes of the blocks in the cache.
    pub bytes_cached: usize,
    pub blocks_in_use: usize,
    pub blocks_cached: usize,
    /// Calls to the driver's `alloc` (successful ones).
    pub driver_allocations: u64,
    /// Calls to the driver's `free`.
    pub driver_frees: u64,
    /// Requests served from the cache.
    pub cache_hits: u64,
}

#[derive(Default)]
struct Pool {
    /// Cached blocks by size class.
    free: BTreeMap<usize, Vec<DevicePtr>>,
    stats: AllocatorStats,
}

/// The caching allocator of one device.
pub struct CachingAllocator {
    driver: Arc<dyn CudaDriver>,
    device: usize,
    pool: Mutex<Pool>,
}

impl fmt::Debug for CachingAllocator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CachingAllocator")
            .field("device", &self.device)
            .field("stats", &self.stats())
            .finish()
    }
}

impl CachingAllocator {
    /// An allocator of `device`'s memory through `driver`, with an empty cache.
    pub fn new(driver: Arc<dyn CudaDriver>, device: usize) -> Arc<CachingAllocator> {
        Arc::new(CachingAllocator {
            driver,
            device,
            pool: Mutex::new(Pool::default()),
        })
    }

    pub fn device(&self) -> usize {
        self.device
    }

    pub fn driver(&self) -> &Arc<dyn CudaDriver> {
        &self.driver
    }

    fn pool(&self) -> MutexGuard<'_, Pool> {
        self.pool.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A block of at least `bytes` bytes (uninitialised), from the cache when one of its size
    /// class is there, else from the driver.
    pub fn alloc(self: &Arc<Self>, bytes: usize) -> Result<DeviceBlock> {
        let class = size_class(bytes).ok_or(CudaError::OutOfMemory {
            device: self.device,
            bytes,
            code: "the size overflows the address space".into(),
        })?;
        {
            let mut pool = self.pool();
            let cached = pool.free.get_mut(&class).and_then(|blocks| blocks.pop());
            if let Some(ptr) = cached {
                pool.stats.cache_hits += 1;
                pool.stats.bytes_cached -= class;
                pool.stats.blocks_cached -= 1;
                pool.stats.bytes_in_use += class;
                pool.stats.blocks_in_use += 1;
                return Ok(self.block(ptr, bytes, class));
            }
        }
        let ptr = match self.driver.alloc(self.device, class) {
            Err(CudaError::OutOfMemory { .. }) => {
                self.empty_cache()?;
                self.driver.alloc(self.device, class)?
            }
            other => other?,
        };
        let mut pool = self.pool();
        pool.stats.driver_allocations += 1;
        pool.stats.bytes_in_use += class;
        pool.stats.blocks_in_use += 1;
        Ok(self.block(ptr, bytes, class))
    }

    fn block(self: &Arc<Self>, ptr: DevicePtr, bytes: usize, class: usize) -> DeviceBlock {
        DeviceBlock {
            ptr,
            bytes,
            class,
            allocator: Arc::clone(self),
        }
    }

    /// Returns every cached block to the driver (blocks in use stay).
    pub fn empty_cache(&self) -> Result<()> {
        let blocks: Vec<(usize, DevicePtr)> = {
            let mut pool = self.pool();
            let taken = std::mem::take(&mut pool.free);
            pool.stats.bytes_cached = 0;
            pool.stats.blocks_cached = 0;
            taken
                .into_iter()
                .flat_map(|(class, ptrs)| ptrs.into_iter().map(move |p| (class, p)))
                .collect()
        };
        let mut first_error = None;
        for (_, ptr) in blocks {
            // SAFETY: a cached block came from this driver and device, is owned by the cache
            // alone, and leaves it here, so it is freed once.
            match unsafe { self.driver.free(self.device, ptr) } {
                Ok(()) => self.pool().stats.driver_frees += 1,
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    pub fn stats(&self) -> AllocatorStats {
        self.pool().stats
    }

    /// Takes a dropped block back into the cache.
    fn release(&self, ptr: DevicePtr, class: usize) {
        let mut pool = self.pool();
        pool.free.entry(class).or_default().push(ptr);
        pool.stats.bytes_in_use -= class;
        pool.stats.blocks_in_use -= 1;
        pool.stats.bytes_cached += class;
        pool.stats.blocks_cached += 1;
    }
}

impl Drop for CachingAllocator {
    /// Every block is back by now (each holds the allocator): free the cache.
    fn drop(&mut self) {
        let _ = self.empty_cache();
    }
}

/// Device memory from a [`CachingAllocator`]; dropping it returns it to the cache.
pub struct DeviceBlock {
    ptr: DevicePtr,
    /// The bytes asked for (the block holds at least its class).
    bytes: usize,
    class: usize,
    allocator: Arc<CachingAllocator>,
}

impl fmt::Debug for DeviceBlock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "DeviceBlock({} on cuda:{}, {} bytes)",
            self.ptr, self.allocator.device, self.bytes
        )
    }
}

impl DeviceBlock {
    /// The block's first byte.
    pub fn ptr(&self) -> DevicePtr {
        self.ptr
    }

    /// The bytes asked for; the block may hold more.
    pub fn len(&self) -> usize {
        self.bytes
    }

    pub fn is_empty(&self) -> bool {
        self.bytes == 0
    }

    pub fn device(&self) -> usize {
        self.allocator.device
    }

    pub fn allocator(&self) -> &Arc<CachingAllocator> {
        &self.allocator
    }
}

impl Drop for DeviceBlock {
    fn drop(&mut self) {
        self.allocator.release(self.ptr, self.class);
    }
}

#[cfg(test)]
mod tests {
    use super::{MIN_BLOCK_BYTES, size_class};

    #[test]
    fn size_classes_round_up_by_at_most_a_quarter() {
        assert_eq!(size_class(0), Some(MIN_BLOCK_BYTES));
        assert_eq!(size_class(1), Some(512));
        assert_eq!(size_class(512), Some(512));
        assert_eq!(size_class(513), Some(640));
        assert_eq!(size_class(600), Some(640));
        assert_eq!(size_class(1000), Some(1024));
        assert_eq!(size_class(1025), Some(1280));
        assert_eq!(size_class(3 << 20), Some(3 << 20));
        assert_eq!(size_class(usize::MAX), None);
        for bytes in (1..100_000).step_by(37) {
            let class = size_class(bytes).unwrap();
            assert!(
                class >= bytes && (class - bytes) * 4 <= class.max(2048),
                "{bytes}"
            );
        }
    }
}
