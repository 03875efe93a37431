//! A cache of freed host buffers, so that large outputs reuse memory whose pages are already
//! mapped instead of paying ~16k page faults per fresh 64 MiB (the cost that dominates eager
//! elementwise work; see `../shared/reference/BASELINE.md`).

use crate::DType;
use crate::storage::{CpuStorage, StorageElement};
use std::collections::HashMap;
use std::sync::Mutex;

/// Buffers smaller than this come from malloc directly (which reuses them cheaply already).
const MIN_CACHED_BYTES: usize = 64 << 10;
/// The most memory the cache keeps; beyond it freed buffers go back to the system.
const MAX_CACHED_BYTES: usize = 1 << 30;

struct BufferCache {
    free: HashMap<(DType, usize), Vec<CpuStorage>>,
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
/// that overwrite every element.
pub(crate) fn uninit_buffer<T: StorageElement>(len: usize) -> Vec<T> {
    let bytes = len * T::DTYPE.size_in_bytes();
    if bytes >= MIN_CACHED_BYTES {
        let reused = with_cache(|cache| {
            let list = cache.free.get_mut(&(T::DTYPE, len))?;
            let storage = list.pop()?;
            cache.bytes -= bytes;
            Some(storage)
        });
        if let Some(v) = reused.and_then(T::unwrap) {
            return v;
        }
    }
    vec![T::default(); len]
}

/// Takes a freed buffer into the cache when it is large and the cache has room.
pub(crate) fn recycle(storage: CpuStorage) {
    let bytes = storage.len() * storage.dtype().size_in_bytes();
    if bytes < MIN_CACHED_BYTES {
        return;
    }
    with_cache(|cache| {
        if cache.bytes + bytes <= MAX_CACHED_BYTES {
            cache.bytes += bytes;
            cache
                .free
                .entry((storage.dtype(), storage.len()))
                .or_default()
                .push(storage);
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
