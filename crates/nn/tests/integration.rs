//! Integration tests of tessera-nn: layers, containers, checkpoints, conformance with PyTorch.
//!
//! One test binary instead of one per file: each file below is a module, so the crate links
//! its tests once. Files that change process-wide state (the global generator, environment
//! variables read by child processes) stay separate binaries, listed in Cargo.toml; the
//! `every_test_file_is_built` test fails when a file in tests/ is neither.

mod common;

mod checkpoint;
mod checkpoint_crc;
mod checkpoint_errors;
mod checkpoint_leftovers;
mod checkpoint_quantized;
mod conformance_attention;
mod conformance_layers_misc;
mod conformance_models;
mod conformance_modules;
mod conformance_norm_layers;
mod conformance_rnn;
mod containers_hooks;
mod layers;
mod layers_misc_definitions;
mod learnable_fake_quantize;
mod module_basics;
mod module_kind;
mod module_trace;
mod optim;
mod parametrize;
mod quantized_x86;
mod recurrent_layers;
mod torchvision_models;
mod transformer_stacks;

/// A file in tests/ that is neither a module here nor a `[[test]]` of Cargo.toml is never compiled.
#[test]
fn every_test_file_is_built() {
    tessera_testkit::assert_test_files_registered(env!("CARGO_MANIFEST_DIR"));
}
