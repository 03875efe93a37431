//! The caching allocator on the emulated driver: freed blocks are reused by size class
//! without a driver call, `empty_cache` returns them, and a request the driver refuses for
//! lack of memory is retried after emptying the cache.

use crate::emulated_driver;

use emulated_driver::EmulatedDriver;
use std::sync::Arc;
use tessera_cuda::{AllocatorStats, CachingAllocator, CudaDriver, CudaError};

/// An allocator of an emulated device of 4 MiB.
fn allocator() -> (Arc<EmulatedDriver>, Arc<CachingAllocator>) {
    let driver = Arc::new(EmulatedDriver::with_memory(1, 4 << 20));
    let allocator = CachingAllocator::new(driver.clone() as Arc<dyn CudaDriver>, 0);
    (driver, allocator)
}

#[test]
fn a_freed_block_is_reused_for_its_size_class_without_the_driver() -> tessera_cuda::Result<()> {
    let (driver, allocator) = allocator();
    let first = allocator.alloc(1000)?;
    let address = first.ptr();
    drop(first);
    assert_eq!(
        allocator.stats(),
        AllocatorStats {
            bytes_in_use: 0,
            bytes_cached: 1024,
            blocks_in_use: 0,
            blocks_cached: 1,
            driver_allocations: 1,
            driver_frees: 0,
            cache_hits: 0,
        }
    );
    // 900 bytes is the same class (1024): the cached block comes back.
    let second = allocator.alloc(900)?;
    assert_eq!(second.ptr(), address);
    assert_eq!(second.len(), 900);
    let stats = allocator.stats();
    assert_eq!((stats.cache_hits, stats.driver_allocations), (1, 1));
    assert_eq!((stats.bytes_in_use, stats.bytes_cached), (1024, 0));
    // Another class goes to the driver.
    let third = allocator.alloc(5000)?;
    assert_ne!(third.ptr(), address);
    assert_eq!(allocator.stats().driver_allocations, 2);
    assert_eq!(driver.counters().allocations, 2);
    Ok(())
}

#[test]
fn empty_cache_returns_cached_blocks_to_the_driver_and_keeps_live_ones() -> tessera_cuda::Result<()>
{
    let (driver, allocator) = allocator();
    let kept = allocator.alloc(100)?;
    let blocks: Vec<_> = (0..3)
        .map(|i| allocator.alloc(4096 * (i + 1)))
        .collect::<Result<_, _>>()?;
    drop(blocks);
    assert_eq!(allocator.stats().blocks_cached, 3);
    assert_eq!(driver.live_allocations(0), 4);
    allocator.empty_cache()?;
    let stats = allocator.stats();
    assert_eq!((stats.blocks_cached, stats.bytes_cached), (0, 0));
    assert_eq!((stats.blocks_in_use, stats.driver_frees), (1, 3));
    assert_eq!(driver.live_allocations(0), 1);
    drop(kept);
    drop(allocator);
    assert_eq!(
        driver.live_allocations(0),
        0,
        "dropping the allocator frees its cache"
    );
    Ok(())
}

#[test]
fn out_of_memory_empties_the_cache_and_retries() -> tessera_cuda::Result<()> {
    // The emulated device holds 4 MiB: 3 MiB fit only once the cached 2 MiB are freed.
    let (driver, allocator) = allocator();
    drop(allocator.alloc(2 << 20)?);
    assert_eq!(allocator.stats().bytes_cached, 2 << 20);
    let big = allocator.alloc(3 << 20)?;
    let stats = allocator.stats();
    assert_eq!((stats.bytes_cached, stats.driver_frees), (0, 1));
    assert_eq!(stats.bytes_in_use, 3 << 20);
    assert_eq!(driver.live_allocations(0), 1);
    // More than the device holds fails, typed, after the same retry.
    match allocator.alloc(8 << 20) {
        Err(CudaError::OutOfMemory { device: 0, .. }) => {}
        other => panic!("expected OutOfMemory, got {other:?}"),
    }
    drop(big);
    Ok(())
}
