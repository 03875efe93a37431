//! A per-thread count of the bytes of tensor storage created: every new host or device
//! buffer a tensor owns adds its size, views and clones add nothing. Profilers read it before
//! and after a step; nothing else does, so it costs one thread-local add per new storage.

use std::cell::Cell;

thread_local! {
    static ALLOCATED: Cell<u64> = const { Cell::new(0) };
}

/// Bytes of tensor storage created on this thread since it started (host buffers, including
/// those the buffer cache hands out again, and device buffers; meta tensors hold none).
/// Storage that kernels create on worker threads counts on those threads.
pub fn allocated_bytes() -> u64 {
    ALLOCATED.with(Cell::get)
}

/// Counts a new storage of `bytes` on this thread.
pub(crate) fn count(bytes: usize) {
    ALLOCATED.with(|a| a.set(a.get().wrapping_add(bytes as u64)));
}
