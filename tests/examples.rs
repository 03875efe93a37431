//! The examples end to end, in one test binary: each example's source is a module here,
//! run with small settings. An example returns an error (its non-zero exit) when its own
//! check fails: `train_shapes` unless checkpoints reload into bit-identical models, `trace`
//! unless the interpreter and the inlined graph equal eager execution. `optimize` on its
//! default CNN and the benchmarks take a minute in a debug build: CI runs them in release
//! (`.ci/run`); here `optimize` runs on the two small transformers only.

use clap::Parser;

#[allow(dead_code)]
#[path = "../examples/demo.rs"]
mod demo;
#[allow(dead_code)]
#[path = "../examples/modules_basics.rs"]
mod modules_basics;
#[allow(dead_code)]
#[path = "../examples/modules_hooks.rs"]
mod modules_hooks;
#[allow(dead_code)]
#[path = "../examples/modules_training.rs"]
mod modules_training;
#[allow(dead_code)]
#[path = "../examples/optimize.rs"]
mod optimize;
#[allow(dead_code, clippy::duplicate_mod)]
#[path = "../examples/qat.rs"]
mod qat;
#[allow(dead_code)]
#[path = "../examples/trace.rs"]
mod trace;
// `qat` and `train_shapes` each include `examples/shapes_net.rs` as their own module, as
// standalone examples must.
#[allow(dead_code, clippy::duplicate_mod)]
#[path = "../examples/train_shapes.rs"]
mod train_shapes;

type Outcome = Result<(), Box<dyn std::error::Error>>;

#[test]
fn demo_trains_traces_prunes_and_compiles_a_cnn() -> Outcome {
    demo::run(&demo::Args::parse_from([
        "demo",
        "--epochs",
        "1",
        "--train-size",
        "120",
        "--runs",
        "1",
    ]))?;
    Ok(())
}

#[test]
fn modules_note_examples_run_to_the_end() -> Outcome {
    modules_basics::main()?;
    modules_training::main()?;
    modules_hooks::main()
}

#[test]
fn trace_example_graph_reproduces_eager_execution() -> Outcome {
    let dir = tempfile::tempdir()?;
    let dot = dir.path().join("small_cnn.dot");
    let dot_arg = dot.to_str().ok_or("temporary path is not UTF-8")?;
    trace::run_example(&trace::Args::parse_from(["trace", "--dot", dot_arg]))?;
    assert!(std::fs::read_to_string(&dot)?.starts_with("digraph"));
    Ok(())
}

#[test]
fn train_shapes_checkpoints_reload_into_identical_models() -> Outcome {
    let dir = tempfile::tempdir()?;
    let out = dir.path().to_str().ok_or("temporary path is not UTF-8")?;
    train_shapes::run(&train_shapes::Args::parse_from([
        "train_shapes",
        "--epochs",
        "1",
        "--out",
        out,
    ]))?;
    assert!(dir.path().join("checkpoint.pt").is_file());
    assert!(dir.path().join("model.safetensors").is_file());
    Ok(())
}

#[test]
fn qat_example_trains_quantizes_and_converts_the_shapes_cnn() -> Outcome {
    qat::run(&qat::Args::parse_from([
        "qat",
        "--epochs",
        "1",
        "--qat-epochs",
        "1",
        "--train-size",
        "96",
        "--test-size",
        "48",
    ]))?;
    Ok(())
}

#[test]
fn optimize_runs_its_pipeline_on_the_small_transformers() -> Outcome {
    for model in ["vit", "gpt"] {
        optimize::run(&optimize::Args::parse_from([
            "optimize", "--model", model, "--quiet",
        ]))?;
    }
    Ok(())
}
