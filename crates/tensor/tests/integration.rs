//! Integration tests of tessera-tensor: ops, autograd, layouts and kernels against references.
//!
//! One test binary instead of one per file: each file below is a module, so the crate links
//! its tests once. Files that change process-wide state (the global generator, environment
//! variables read by child processes) stay separate binaries, listed in Cargo.toml; the
//! `every_test_file_is_built` test fails when a file in tests/ is neither.

mod common;

mod activations_losses;
mod attention;
mod autograd;
mod batch_norm_update;
mod conformance_cnn;
mod conformance_linear;
mod conv3d_bag;
mod conv_pool;
mod conv_winograd;
mod display;
mod error_texts;
mod fake_quant;
mod grad_hooks;
mod gradcheck_core;
mod hostile_shapes;
mod index;
mod meta;
mod norm_loss;
mod op_shapes_property;
mod optim_ops;
mod quant;
mod quant_conv_exact;
mod quant_pool;
mod rebind;
mod resample_pool;
mod tensor_basics;

/// A file in tests/ that is neither a module here nor a `[[test]]` of Cargo.toml is never compiled.
#[test]
fn every_test_file_is_built() {
    tessera_testkit::assert_test_files_registered(env!("CARGO_MANIFEST_DIR"));
}
