//! This machine's f32 multiply-add ceiling, measured in the same run as the workloads (the
//! `fma_peak_gflops` row): each thread of the pool runs independent chains of fused
//! multiply-adds, enough of them to cover the instruction's latency, with nothing to load or
//! store. A GEMM-bound workload cannot run faster than its FLOPs at this rate.

use rayon::prelude::*;
use tessera::Result;

/// Iterations of each thread's loop.
const ITERATIONS: usize = 1 << 20;
/// Independent accumulators, each a vector of [`LANES`] f32s.
const CHAINS: usize = 12;
/// f32 lanes of one AVX2 multiply-add.
const LANES: usize = 8;

/// FLOPs one thread does per call (a multiply-add counts two).
pub const FLOPS_PER_THREAD: f64 = (ITERATIONS * CHAINS * LANES * 2) as f64;

/// The workload: every thread of the pool runs [`chains`] once.
pub fn fma_peak() -> Result<Box<dyn FnMut() -> Result<()>>> {
    Ok(Box::new(|| {
        let threads = rayon::current_num_threads();
        let sums: Vec<f32> = (0..threads).into_par_iter().map(|_| chains()).collect();
        std::hint::black_box(sums);
        Ok(())
    }))
}

/// The chains with AVX2 and FMA where the CPU has them, else with scalar `mul_add`s.
fn chains() -> f32 {
    #[cfg(target_arch = "x86_64")]
    if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
        // SAFETY: the CPU has the features `chains_fma` is compiled for.
        return unsafe { chains_fma() };
    }
    chains_portable()
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn chains_fma() -> f32 {
    use std::arch::x86_64::{
        __m256, _mm256_add_ps, _mm256_fmadd_ps, _mm256_set1_ps, _mm256_storeu_ps,
    };
    let (b, c) = (_mm256_set1_ps(0.999_999), _mm256_set1_ps(1e-7));
    let mut acc: [__m256; CHAINS] = std::array::from_fn(|i| _mm256_set1_ps(i as f32));
    for _ in 0..ITERATIONS {
        for a in acc.iter_mut() {
            *a = _mm256_fmadd_ps(*a, b, c);
        }
    }
    let total = acc
        .iter()
        .fold(_mm256_set1_ps(0.0), |s, &a| _mm256_add_ps(s, a));
    let mut lanes = [0.0f32; LANES];
    // SAFETY: `lanes` holds the eight f32s stored.
    unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), total) };
    lanes.iter().sum()
}

fn chains_portable() -> f32 {
    let mut acc: [[f32; LANES]; CHAINS] = std::array::from_fn(|i| [i as f32; LANES]);
    for _ in 0..ITERATIONS {
        for lanes in acc.iter_mut() {
            for a in lanes.iter_mut() {
                *a = a.mul_add(0.999_999, 1e-7);
            }
        }
    }
    acc.iter().flatten().sum()
}
