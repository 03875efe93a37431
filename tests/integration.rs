//! Workspace-level integration tests through the facade: `tessera::compile` and compiled
//! training steps on the CPU, compiled modules, the PyTorch conformance models traced, the
//! `tessera` command and the examples end to end.
//!
//! One test binary instead of one per file: each file below is a module, so the facade links
//! its tests once. Files that change process-wide state stay separate binaries, listed in
//! crates/tessera/Cargo.toml: a counting global allocator and the thread count
//! (`compiled_memory`), the global random stream checked exactly (`random_stream`), global
//! module hooks (`profiler`), a registered CUDA backend or none (`compile_cuda*`,
//! `bench_cuda`). The files here seed the global generator only for plausible weights and
//! compare two runs of one model, so other tests drawing from it in parallel change nothing
//! they check. The `every_test_file_is_built` test fails when a file in tests/ is neither.

mod cli;
mod compile;
mod compile_dynamic_batch;
mod compile_norms_pools;
mod compile_train;
mod compile_train_remat;
mod compile_transposed_weights;
mod compile_winograd;
mod compiled_module;
mod compiled_reload;
mod conformance_traced;
mod examples;

/// A file in tests/ that is neither a module here nor a `[[test]]` of Cargo.toml is never compiled.
#[test]
fn every_test_file_is_built() {
    tessera_testkit::assert_test_files_registered_in(env!("CARGO_MANIFEST_DIR"), "../../tests");
}
