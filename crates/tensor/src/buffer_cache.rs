//! A cache of freed host buffers, so that large outputs reuse memory whose pages are already
//! mapped instead of paying ~16k page faults per fresh 64 MiB (the cost that dominates eager
//! elementwise work; see `../shared/reference/BASELINE.md`). It holds typed vectors only, so
//! it depends on the element types and nothing else (`CpuStorage` hands its vector back).

use crate::{DType, Element, Result, TensorError};
use std::any::Any;
use std::collections::HashMap;
use std::sync::Mutex;

/// Buffers smaller than this come from malloc directly (which reuses them cheaply already).
const MIN_CACHED_BYTES: usize = 64 << 10;
/// The most memory the cache keeps; beyond it freed buffers go back to the system.
const MAX_CACHED_BYTES: usize = 1 << 30;

struct BufferCache {
    /// Freed buffers by dtype and length; each is a `Vec<T>` of that dtype's element type.
    free: HashMap<(DType, usize), Vec<Box<dyn Any + Send>>>,
    bytes: usize,
}

static CACHE: Mutex<Option<BufferCache>> = Mutex::new(None);

fn with_cache<R>(f: impl FnOnce(&mut BufferCache) -> R) -> R {
    let mut guard = CACHE.lock().unwrap_or_else(|e| e.into_inner());
    f(guard.get_or_insert_with(|| BufferCache {
        free: HashMap::new(),
        bytes: 0,
    }))
}

/// A buffer of `len` elements whose contents are unspecified (but initialised): for kernels
/// that overwrite every element. Aborts if the allocator cannot provide it; kernel outputs use
/// [`try_uninit_buffer`].
pub(crate) fn uninit_buffer<T: Element>(len: usize) -> Vec<T> {
    reuse(len).unwrap_or_else(|| vec![T::default(); len])
}

/// A buffer of `len` elements for a kernel that overwrites every element (its contents are
/// unspecified but initialised), taken from the cache of freed buffers when one of that
/// length is there; or `OutOfMemory` naming `op` when the allocator cannot provide it (as
/// PyTorch's allocator raises instead of aborting). Compiled programs take their outputs here
/// too, so a buffer a call frees is the next call's output, its pages already mapped.
pub fn try_uninit_buffer<T: Element>(op: &str, len: usize) -> Result<Vec<T>> {
    if let Some(v) = reuse(len) {
        return Ok(v);
    }
    // Zeroed by the allocator (calloc maps fresh pages lazily), not written element by element.
    bytemuck::allocation::try_zeroed_vec(len).map_err(|()| out_of_memory(op, len, T::DTYPE))
}

/// An empty vector with room for `len` elements of `dtype`, or `OutOfMemory` naming `op`.
pub(crate) fn with_capacity<T>(op: &str, len: usize, dtype: DType) -> Result<Vec<T>> {
    let mut v = Vec::new();
    v.try_reserve_exact(len)
        .map_err(|_| out_of_memory(op, len, dtype))?;
    Ok(v)
}

pub(crate) fn out_of_memory(op: &str, len: usize, dtype: DType) -> TensorError {
    TensorError::OutOfMemory {
        op: op.into(),
        shape: vec![len],
        bytes: len.saturating_mul(dtype.size_in_bytes()),
    }
}

/// A cached buffer of exactly `len` elements, if a large one was freed.
fn reuse<T: Element>(len: usize) -> Option<Vec<T>> {
    let bytes = len.saturating_mul(T::DTYPE.size_in_bytes());
    if bytes < MIN_CACHED_BYTES {
        return None;
    }
    let reused = with_cache(|cache| {
        let list = cache.free.get_mut(&(T::DTYPE, len))?;
        let buffer = list.pop()?;
        cache.bytes -= bytes;
        Some(buffer)
    });
    reused?.downcast::<Vec<T>>().ok().map(|v| *v)
}

/// Takes a freed buffer into the cache when it is large and the cache has room (a compiled
/// program hands its scratch buffers back this way).
pub fn recycle<T: Element>(buffer: Vec<T>) {
    let bytes = buffer.len() * T::DTYPE.size_in_bytes();
    if bytes < MIN_CACHED_BYTES {
        return;
    }
    with_cache(|cache| {
        if cache.bytes + bytes <= MAX_CACHED_BYTES {
            cache.bytes += bytes;
            cache
                .free
                .entry((T::DTYPE, buffer.len()))
                .or_default()
                .push(Box::new(buffer));
        }
    });
}

/// Returns every cached buffer to the system (PyTorch's `empty_cache`).
pub fn empty_cache() {
    with_cache(|cache| {
        cache.free.clear();
        cache.bytes = 0;
    });
}

/// Bytes held by the cache of freed buffers.
pub fn cached_bytes() -> usize {
    with_cache(|cache| cache.bytes)
}
