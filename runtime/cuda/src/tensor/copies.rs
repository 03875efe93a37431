//! Copies between host tensors and CUDA storage: a packed upload, a download of the elements
//! a layout selects, and an in-place write of them. A contiguous view moves only its bytes; a
//! strided one moves its span (`offset..storage_extent`) and is gathered or scattered on the
//! host (a write is then read, modify, write of that span, ordered after earlier work on the
//! device like every copy).

use super::host_bytes::{from_bytes, gather, scatter, span, to_bytes};
use super::storage::CudaStorage;
use crate::allocator::CachingAllocator;
use crate::{CudaError, Result};
use std::sync::Arc;
use tessera_tensor::DType;
use tessera_tensor::layout::Layout;
use tessera_tensor::storage::CpuStorage;

/// New storage on `allocator`'s device holding `numel` elements of `dtype`, uninitialised.
pub(crate) fn alloc_storage(
    allocator: &Arc<CachingAllocator>,
    dtype: DType,
    numel: usize,
) -> Result<CudaStorage> {
    let bytes = numel
        .checked_mul(dtype.size_in_bytes())
        .ok_or(CudaError::OutOfMemory {
            device: allocator.device(),
            bytes: usize::MAX,
            code: format!("{numel} elements of {dtype} overflow the address space"),
        })?;
    Ok(CudaStorage::new(allocator.alloc(bytes)?, dtype, numel))
}

/// `host`'s elements copied to new storage on `allocator`'s device.
pub(crate) fn upload(allocator: &Arc<CachingAllocator>, host: &CpuStorage) -> Result<CudaStorage> {
    let storage = alloc_storage(allocator, host.dtype(), host.len())?;
    let bytes = to_bytes(host);
    // SAFETY: the block was just allocated on this device with room for these bytes.
    unsafe {
        allocator
            .driver()
            .copy_to_device(allocator.device(), storage.ptr(), &bytes)?
    };
    Ok(storage)
}

/// Checks that `layout` stays inside `storage`, for the copies below.
fn check_span(storage: &CudaStorage, layout: &Layout, call: &'static str) -> Result<()> {
    if layout.storage_extent() > storage.numel_elements() {
        return Err(CudaError::InvalidUse {
            call,
            message: format!(
                "the view {:?} (strides {:?}, offset {}) reaches past the {} elements of its storage",
                layout.shape,
                layout.strides,
                layout.offset,
                storage.numel_elements()
            ),
        });
    }
    Ok(())
}

/// The bytes of `layout`'s span in `storage`.
fn read_span(storage: &CudaStorage, layout: &Layout) -> Result<Vec<u8>> {
    let element = storage.element_bytes();
    let range = span(layout);
    let mut bytes = vec![0u8; range.len() * element];
    let allocator = storage.allocator();
    // SAFETY: the span lies in the storage (`check_span`), which is a live block.
    unsafe {
        allocator.driver().copy_to_host(
            allocator.device(),
            &mut bytes,
            storage.ptr().add(range.start * element),
        )?
    };
    Ok(bytes)
}

/// The elements `layout` selects in `storage`, packed row-major on the host.
pub(crate) fn download(storage: &CudaStorage, layout: &Layout) -> Result<CpuStorage> {
    check_span(storage, layout, "copy to host")?;
    let dtype = storage.dtype_of();
    let bytes = read_span(storage, layout)?;
    if layout.is_contiguous() {
        return Ok(from_bytes(dtype, &bytes));
    }
    Ok(from_bytes(
        dtype,
        &gather(&bytes, layout, storage.element_bytes()),
    ))
}

/// Overwrites the elements `layout` selects in `storage` with `values` (packed row-major, of
/// the storage's dtype).
pub(crate) fn write(storage: &CudaStorage, layout: &Layout, values: &CpuStorage) -> Result<()> {
    check_span(storage, layout, "copy to device")?;
    if values.dtype() != storage.dtype_of() || values.len() != layout.numel() {
        return Err(CudaError::InvalidUse {
            call: "copy to device",
            message: format!(
                "writing {} elements of {} into a view of {} elements of {}",
                values.len(),
                values.dtype(),
                layout.numel(),
                storage.dtype_of()
            ),
        });
    }
    let element = storage.element_bytes();
    let packed = to_bytes(values);
    let bytes = if layout.is_contiguous() {
        packed
    } else {
        let mut bytes = read_span(storage, layout)?;
        scatter(&mut bytes, layout, element, &packed);
        bytes
    };
    let allocator = storage.allocator();
    // SAFETY: the span lies in the storage (`check_span`), which is a live block.
    unsafe {
        allocator.driver().copy_to_device(
            allocator.device(),
            storage.ptr().add(layout.offset * element),
            &bytes,
        )
    }
}
