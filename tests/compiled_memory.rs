//! Once warm, a compiled module's calls allocate nothing of their own: intermediate values
//! live in the module's arena at the offsets its memory plan gave them, the run's tables are
//! kept between calls, and `run_into` writes the outputs into the caller's tensors. A counting
//! allocator, installed for this test binary alone, checks it exactly. The `gemm` crate (0.19)
//! allocates its own packing workspace inside each product it packs for and has no way to be
//! given one; those allocations are measured by calling it directly with the same shapes and
//! strides, and are the only ones allowed.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use tessera::nn::layers::{Linear, ReLU, Softmax, Tanh};
use tessera::nn::{Call, ModuleExt, Sequential};
use tessera::{CompileOptions, CompiledModule, DType, Tensor, compile_layer, no_grad};

/// Allocations of at least this many bytes are counted as buffer allocations (the buffer cache
/// keeps buffers from 64 KiB up).
const LARGE: usize = 64 << 10;

static LARGE_ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);
static ALL_ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);
/// The tests of this binary measure one at a time (the counters are process-wide).
static MEASURING: Mutex<()> = Mutex::new(());

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

/// Allocations (all, large) per call of `f` over `calls` calls, after three warm-up calls.
fn allocations_per_call(calls: usize, mut f: impl FnMut()) -> (f64, usize) {
    for _ in 0..3 {
        f();
    }
    let (all, large) = (
        ALL_ALLOCATIONS.load(Ordering::Relaxed),
        LARGE_ALLOCATIONS.load(Ordering::Relaxed),
    );
    for _ in 0..calls {
        f();
    }
    let all = ALL_ALLOCATIONS.load(Ordering::Relaxed) - all;
    let large = LARGE_ALLOCATIONS.load(Ordering::Relaxed) - large;
    (all as f64 / calls as f64, large)
}

/// One thread: GEMMs run without splitting (a split hands jobs to rayon's queues, which
/// allocate a block now and then), as every measurement here needs.
fn one_thread() -> std::sync::MutexGuard<'static, ()> {
    let guard = MEASURING.lock().unwrap_or_else(|e| e.into_inner());
    tessera::tensor::set_num_threads(1).unwrap();
    guard
}

/// An all-kernel MLP head: Linear(128 -> width), ReLU, Softmax, Linear(width -> out), Tanh.
fn mlp(width: usize, out: usize, batch: usize) -> (CompiledModule, Tensor) {
    let model = Arc::new(
        Sequential::new()
            .add(Linear::new(128, width).unwrap())
            .add(ReLU::new())
            .add(Softmax::new(1))
            .add(Linear::new(width, out).unwrap())
            .add(Tanh::new()),
    );
    model.eval();
    let x = Tensor::randn(&[batch, 128], DType::F32).unwrap();
    let compiled = compile_layer(model, &x, CompileOptions::default()).unwrap();
    let report = compiled.report();
    assert!(report.fallbacks.is_empty(), "{report}");
    (compiled, x)
}

/// Allocations (all, large) per call the `gemm` crate makes by itself for
/// `x[m x k] @ w^T`, `w^T` the packed `[k, n]` transpose a compiled `Linear` derives once from
/// its `[n, k]` weight and multiplies by.
fn gemm_crate_allocations(m: usize, n: usize, k: usize) -> (f64, f64) {
    let (a, w, mut c) = (
        vec![1.0f32; m * k],
        vec![1.0f32; n * k],
        vec![0.0f32; m * n],
    );
    let (m, n, k) = (m as i64, n as i64, k as i64);
    let per_call = allocations_per_call(5, || {
        // SAFETY: `a`, `w` and `c` hold the `m x k`, `k x n` and `m x n` matrices the strides
        // describe, and `c` aliases neither operand.
        unsafe {
            tessera::kernel::gemm::tessera_gemm_f32(
                m,
                n,
                k,
                a.as_ptr(),
                k,
                1,
                w.as_ptr(),
                n,
                1,
                c.as_mut_ptr(),
            )
        }
    });
    (per_call.0, per_call.1 as f64 / 5.0)
}

/// What the gemm crate allocates by itself in one call of [`mlp`]`(256, 64, 64)`.
fn mlp_gemm_allocations() -> (f64, f64) {
    let (first, second) = (
        gemm_crate_allocations(64, 256, 128),
        gemm_crate_allocations(64, 64, 256),
    );
    (first.0 + second.0, first.1 + second.1)
}

#[test]
fn warm_run_into_allocates_nothing_of_its_own() {
    let _guard = one_thread();
    let _grad = no_grad();
    let (compiled, x) = mlp(256, 64, 64);
    let out = Tensor::zeros(&[64, 64], DType::F32).unwrap();
    let want = compiled.run(std::slice::from_ref(&x)).unwrap()[0]
        .to_vec::<f32>()
        .unwrap();
    let (per_call, large) = allocations_per_call(5, || {
        compiled
            .run_into(std::slice::from_ref(&x), std::slice::from_ref(&out))
            .unwrap()
    });
    let (gemm, gemm_large) = mlp_gemm_allocations();
    eprintln!("run_into: {per_call} allocations per warm call, {gemm} of them the gemm crate's");
    assert_eq!(
        large as f64 / 5.0,
        gemm_large,
        "large allocations per warm call"
    );
    assert_eq!(
        per_call, gemm,
        "allocations per warm call besides the gemm crate's"
    );
    assert_eq!(out.to_vec::<f32>().unwrap(), want);
}

#[test]
fn warm_run_into_with_an_unpacked_gemm_allocates_nothing_at_all() {
    let _guard = one_thread();
    let _grad = no_grad();
    // One output column: the gemm crate multiplies without a packing workspace.
    let (compiled, x) = mlp(1, 1, 64);
    assert_eq!(gemm_crate_allocations(64, 1, 128), (0.0, 0.0));
    let out = Tensor::zeros(&[64, 1], DType::F32).unwrap();
    let (per_call, _) = allocations_per_call(5, || {
        compiled
            .run_into(std::slice::from_ref(&x), std::slice::from_ref(&out))
            .unwrap()
    });
    assert_eq!(per_call, 0.0, "allocations per warm run_into");
}

#[test]
fn warm_runs_allocate_only_their_output_tensors() {
    let _guard = one_thread();
    let _grad = no_grad();
    let (compiled, x) = mlp(256, 64, 64);
    // What returning one [64, 64] tensor in a vector costs by itself.
    let (output, _) = allocations_per_call(5, || {
        let v: Vec<f32> = tessera::tensor::try_uninit_buffer("out", 64 * 64).unwrap();
        drop(vec![Tensor::from_vec(v, &[64, 64]).unwrap()]);
    });
    let (per_call, large) =
        allocations_per_call(5, || drop(compiled.run(std::slice::from_ref(&x)).unwrap()));
    let (gemm, gemm_large) = mlp_gemm_allocations();
    eprintln!("run: {per_call} allocations per warm call: output {output}, gemm crate {gemm}");
    assert_eq!(
        large as f64 / 5.0,
        gemm_large,
        "large allocations per warm call"
    );
    assert_eq!(per_call, output + gemm, "allocations per warm run");
}

#[test]
fn warm_compiled_calls_allocate_no_large_buffers() {
    let _guard = one_thread();
    // A softmax with its prologue (relu, tanh) and epilogue (relu) fused: one kernel writing
    // a 2 MiB output, which comes from the buffer cache once warm.
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
    let _grad = no_grad();
    let (_, large) = allocations_per_call(5, || drop(compiled.call(x.clone()).unwrap()));
    assert_eq!(large, 0, "large allocations in 5 warm calls");
}
