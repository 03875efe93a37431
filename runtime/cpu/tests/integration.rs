//! Integration tests of tessera-cpu: the JIT against the kernel-IR interpreter and eager kernels.
//!
//! One test binary instead of one per file: each file below is a module, so the crate links
//! its tests once. Files that change process-wide state (the global generator, environment
//! variables read by child processes) stay separate binaries, listed in Cargo.toml; the
//! `every_test_file_is_built` test fails when a file in tests/ is neither.

mod common;

mod adaptive_pool;
mod arg_reductions;
mod batch_norm_update;
mod bool_int;
mod casts;
mod cat;
mod conv;
mod conv_pool;
mod differential;
mod exp;
mod fake_quant;
mod fake_quant_gradients;
mod fused_updates;
mod gathers;
mod gemm;
mod half;
mod in_place;
mod integer_reductions;
mod interior_split;
mod joint_conformance;
mod joint_graphs;
mod joint_graphs_random;
mod launch_groups;
mod losses;
mod max_pool_backward;
mod max_pool_indices;
mod norms;
mod one_hot;
mod optim_updates;
mod padded_pooling;
mod pool_backward;
mod pooling;
mod quantized;
mod quantized_linear;
mod reductions;
mod scalar_reductions;
mod scatters;
mod softmax_exp_once;
mod unary_backward;
mod winograd;

/// A file in tests/ that is neither a module here nor a `[[test]]` of Cargo.toml is never compiled.
#[test]
fn every_test_file_is_built() {
    tessera_testkit::assert_test_files_registered(env!("CARGO_MANIFEST_DIR"));
}
