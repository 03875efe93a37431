//! Measuring the peak heap use of one load: a counting global allocator that a fuzz target or
//! test binary installs, and the bound each loader promises as a multiple of its input.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

static CURRENT: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);
/// One measurement at a time, so that two tests of one binary do not see each other's peaks.
static MEASURING: Mutex<()> = Mutex::new(());

/// The system allocator, counting live bytes and their peak. Install it with
/// `#[global_allocator] static ALLOC: PeakAlloc = PeakAlloc;`; without it, every measured
/// peak is 0 and no memory bound is checked.
pub struct PeakAlloc;

fn grow(bytes: usize) {
    let now = CURRENT.fetch_add(bytes, Ordering::Relaxed) + bytes;
    PEAK.fetch_max(now, Ordering::Relaxed);
}

fn shrink(bytes: usize) {
    CURRENT.fetch_sub(bytes, Ordering::Relaxed);
}

// SAFETY: every method forwards to `System` with the caller's layout and pointer unchanged, so
// `System`'s guarantees carry over; the counters only observe sizes.
unsafe impl GlobalAlloc for PeakAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract for `alloc` is passed on as is.
        let ptr = unsafe { System.alloc(layout) };
        if !ptr.is_null() {
            grow(layout.size());
        }
        ptr
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract for `alloc_zeroed` is passed on as is.
        let ptr = unsafe { System.alloc_zeroed(layout) };
        if !ptr.is_null() {
            grow(layout.size());
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was allocated by `System` (through this allocator) with `layout`.
        unsafe { System.dealloc(ptr, layout) };
        shrink(layout.size());
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: `ptr` was allocated by `System` with `layout`; the rest is the caller's.
        let new = unsafe { System.realloc(ptr, layout, new_size) };
        if !new.is_null() {
            grow(new_size);
            shrink(layout.size());
        }
        new
    }
}

/// Runs `f` and returns its result with the most heap bytes it held at once beyond what was
/// live when it started (0 when [`PeakAlloc`] is not the global allocator).
pub fn measure<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let _one_at_a_time = MEASURING
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let base = CURRENT.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    let out = f();
    let peak = PEAK.load(Ordering::Relaxed).saturating_sub(base);
    (out, peak)
}

/// The most heap a loader may use for an input of `n` bytes: `per_input_byte * n + fixed`.
#[derive(Debug, Clone, Copy)]
pub struct MemoryBound {
    pub per_input_byte: usize,
    pub fixed: usize,
}

impl MemoryBound {
    /// The bound for an input of `input_len` bytes.
    pub fn of(&self, input_len: usize) -> usize {
        self.per_input_byte
            .saturating_mul(input_len)
            .saturating_add(self.fixed)
    }

    /// Panics (the fuzzer's signal) when `peak` exceeds the bound for `input_len`.
    pub fn check(&self, what: &str, input_len: usize, peak: usize) {
        assert!(
            peak <= self.of(input_len),
            "{what}: loading {input_len} bytes held {peak} bytes of heap at once, over the bound \
             {} ({} x input + {})",
            self.of(input_len),
            self.per_input_byte,
            self.fixed
        );
    }
}
