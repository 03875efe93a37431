//! Once warm, a compiled module's calls take every tensor buffer its kernels write from the
//! buffer cache: no call asks the system allocator for a large block. A counting allocator,
//! installed for this test binary alone, checks it. (The `gemm` crate allocates its own
//! packing workspace on each call, so a GEMM step still does; that is the library's, not the
//! program's.)

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use tessera::nn::layers::{ReLU, Softmax, Tanh};
use tessera::nn::{Call, ModuleExt, Sequential};
use tessera::{CompileOptions, DType, Tensor, compile_layer, no_grad};

/// Allocations of at least this many bytes are counted as buffer allocations (the cache keeps
/// buffers from 64 KiB up; smaller ones are the run's bookkeeping).
const LARGE: usize = 64 << 10;

static LARGE_ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);
static ALL_ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

struct Counting;

// SAFETY: every method forwards to `System` with the caller's layout and pointer unchanged;
// the counters only observe sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(layout.size());
        // SAFETY: the caller's contract for `alloc` is passed on as is.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count(layout.size());
        // SAFETY: the caller's contract for `alloc_zeroed` is passed on as is.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was allocated by `System` (through this allocator) with `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count(new_size);
        // SAFETY: `ptr` was allocated by `System` with `layout`; the rest is the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

fn count(bytes: usize) {
    ALL_ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
    if bytes >= LARGE {
        LARGE_ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

#[test]
fn warm_compiled_calls_allocate_no_large_buffers() {
    // A softmax with its prologue (relu, tanh) and epilogue (relu) fused: one kernel writing
    // a 2 MiB output.
    let model = Arc::new(
        Sequential::new()
            .add(ReLU::new())
            .add(Tanh::new())
            .add(Softmax::new(1))
            .add(ReLU::new()),
    );
    model.eval();
    let x = Tensor::randn(&[512, 1024], DType::F32).unwrap();
    let compiled = compile_layer(model, &x, CompileOptions::default()).unwrap();
    let report = compiled.report();
    assert!(
        report.kernels == 1 && report.fallbacks.is_empty(),
        "{report}"
    );
    let _guard = no_grad();
    for _ in 0..3 {
        drop(compiled.call(x.clone()).unwrap());
    }
    let (large, all) = (
        LARGE_ALLOCATIONS.load(Ordering::Relaxed),
        ALL_ALLOCATIONS.load(Ordering::Relaxed),
    );
    let calls = 5;
    for _ in 0..calls {
        drop(compiled.call(x.clone()).unwrap());
    }
    let large = LARGE_ALLOCATIONS.load(Ordering::Relaxed) - large;
    let small = (ALL_ALLOCATIONS.load(Ordering::Relaxed) - all) / calls;
    assert_eq!(large, 0, "large allocations in {calls} warm calls");
    // The bookkeeping of a call (slot tables, argument vectors, tensor handles) is a few
    // hundred small allocations (113 when this test was written); printed to follow it.
    eprintln!("{small} small allocations per warm call");
    assert!(small < 200, "{small} small allocations per call");
}
