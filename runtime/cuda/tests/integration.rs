//! Integration tests of tessera-cuda that share one process: the PTX emulator, the renderer,
//! ptxas, the caching allocator and driver on emulated devices, and the eager CUDA tensors of
//! `cuda_half` and `cuda_products`.
//!
//! One test binary instead of one per file: each file below is a module, so the crate links
//! its tests once. The CUDA backend registry is per process, so only one backend may be
//! registered here: `eager_common::backend`, once, on three emulated devices (the emulated
//! op tests' eager checks run on its `cuda:0`). Files that
//! register another backend (`cuda_tensors`, `cuda_losses`, `external_memory`, ...), need none
//! registered (`cuda_unavailable`), or hold GPU tests run by name (`device`,
//! `device_conformance`) stay separate binaries, listed in Cargo.toml; the
//! `every_test_file_is_built` test fails when a file in tests/ is neither.

mod common;
mod eager_common;
mod emulated;
mod emulated_agreement;
mod emulated_driver;
mod emulator;

mod allocator;
mod cuda_half;
mod cuda_products;
mod driver;
mod emulated_arg_reductions;
mod emulated_backward;
mod emulated_bool_int;
mod emulated_casts;
mod emulated_differential;
mod emulated_fake_quant;
mod emulated_gathers;
mod emulated_gemm;
mod emulated_half;
mod emulated_launch_groups;
mod emulated_pool_indices;
mod emulator_errors;
mod emulator_kernels;
mod emulator_mma;
mod hand_written_ptx;
mod ptxas;
mod ptxas_gemm;
mod render;
mod snapshots;
mod subset;

/// A file in tests/ that is neither a module here nor a `[[test]]` of Cargo.toml is never compiled.
#[test]
fn every_test_file_is_built() {
    tessera_testkit::assert_test_files_registered(env!("CARGO_MANIFEST_DIR"));
}
