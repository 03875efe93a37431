//! Integration tests of tessera-fx: tracing, printing, parsing, editing, interpreting and differentiating graphs.
//!
//! One test binary instead of one per file: each file below is a module, so the crate links
//! its tests once. Files that change process-wide state (the global generator, environment
//! variables read by child processes) stay separate binaries, listed in Cargo.toml; the
//! `every_test_file_is_built` test fails when a file in tests/ is neither.

mod autodiff_common;
mod common;

mod autodiff;
mod autodiff_conformance;
mod autodiff_gradcheck;
mod autodiff_random;
mod editing;
mod error_causes;
mod graph_module;
mod hostile_text;
mod inline_boxed_layers;
mod inline_code_artifact;
mod interpreter;
mod loaded_graphs;
mod module_kinds;
mod parse_errors;
mod printing;
mod recurrent_leaves;
mod rewrite;
mod round_trip;
mod trace;
mod trace_layers_misc;
mod traced_models;
mod train_state;
mod transformer;
mod verifying;

/// A file in tests/ that is neither a module here nor a `[[test]]` of Cargo.toml is never compiled.
#[test]
fn every_test_file_is_built() {
    tessera_testkit::assert_test_files_registered(env!("CARGO_MANIFEST_DIR"));
}
