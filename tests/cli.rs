//! The `tessera` command end to end: every subcommand on files the test makes (a SmallCnn
//! artifact, its state dict as .pt and safetensors, and a batch-size-agnostic MLP artifact),
//! checking exit codes and output; every subcommand's `--help` is snapshot-reviewed; a bad or
//! missing file is a one-line error with exit code 2, never a panic, for every subcommand.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use tessera::fx::GraphModule;
use tessera::fx::trace::{LeafPolicy, trace};
use tessera::nn::layers::{Linear, ReLU};
use tessera::nn::models::SmallCnn;
use tessera::nn::{ModuleExt, Sequential, save_pt_state_dict, save_safetensors};
use tessera::tensor::TensorMeta;
use tessera::{DType, manual_seed};

fn tessera(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(args)
        .output()
        .expect("the tessera binary runs")
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Asserts success and returns stdout.
fn ok(args: &[&str]) -> String {
    let out = tessera(args);
    assert!(
        out.status.success(),
        "tessera {args:?} failed: {}",
        stderr(&out)
    );
    stdout(&out)
}

/// Every subcommand.
const SUBCOMMANDS: [&str; 9] = [
    "inspect", "summary", "draw", "optimize", "compile", "run", "bench", "profile", "convert",
];

/// A folder with `cnn/` (a SmallCnn graph artifact traced at batch 2, whose flatten fixes the
/// batch size), `cnn.pt`, `cnn.safetensors` and `mlp/` (8 -> 16 -> 4 linear layers with a
/// ReLU, traced at batch 2, which runs at any batch size).
fn fixtures() -> tempfile::TempDir {
    manual_seed(0);
    let dir = tempfile::tempdir().unwrap();
    let cnn = SmallCnn::new().unwrap();
    cnn.eval();
    let traced = trace(
        &cnn,
        TensorMeta::new([2, 3, 16, 16], DType::F32),
        LeafPolicy::default(),
    )
    .unwrap();
    let cnn_state = cnn.state_dict().unwrap();
    GraphModule::new(std::sync::Arc::new(cnn), traced)
        .save(dir.path().join("cnn"))
        .unwrap();
    save_pt_state_dict(&cnn_state, dir.path().join("cnn.pt")).unwrap();
    save_safetensors(&cnn_state, dir.path().join("cnn.safetensors")).unwrap();
    let mlp = Sequential::new()
        .add(Linear::new(8, 16).unwrap())
        .add(ReLU::new())
        .add(Linear::new(16, 4).unwrap());
    let traced = trace(
        &mlp,
        TensorMeta::new([2, 8], DType::F32),
        LeafPolicy::default(),
    )
    .unwrap();
    GraphModule::new(std::sync::Arc::new(mlp), traced)
        .save(dir.path().join("mlp"))
        .unwrap();
    dir
}

/// Runs `tessera optimize` on the fixture CNN with `passes`, writing artifact `name`: its
/// path and the command's output.
fn optimize_cnn(dir: &Path, name: &str, passes: &str) -> (String, String) {
    let optimized = path(dir, name);
    let text = ok(&[
        "optimize",
        &path(dir, "cnn"),
        "--passes",
        passes,
        "-o",
        &optimized,
    ]);
    (optimized, text)
}

fn path(dir: &Path, name: &str) -> String {
    dir.join(name).display().to_string()
}

#[test]
fn help_lists_every_subcommand() {
    let text = ok(&["--help"]);
    for sub in SUBCOMMANDS {
        assert!(text.contains(sub), "{sub} missing from:\n{text}");
        let help = ok(&[sub, "--help"]);
        assert!(help.contains("Usage: tessera"), "{help}");
    }
}

#[test]
fn help_texts_are_as_reviewed() {
    let settings = tessera_testkit::snapshots();
    settings.bind(|| {
        insta::assert_snapshot!("cli_help", ok(&["--help"]));
        for sub in SUBCOMMANDS {
            insta::assert_snapshot!(format!("cli_{sub}_help"), ok(&[sub, "--help"]));
        }
    });
}

#[test]
fn inspect_reads_artifacts_and_state_dicts() {
    let dir = fixtures();
    let text = ok(&["inspect", &path(dir.path(), "cnn")]);
    assert!(text.contains("graph(x: f32[2, 3, 16, 16])"), "{text}");
    assert!(text.contains("%conv2d"), "{text}");
    assert!(text.contains("FLOPs:"), "{text}");
    // Every SmallCnn parameter is f32, so all can train: conv1 (16x3x3x3 + 16), bn1 (2x16),
    // conv2 (32x16x3x3 + 32), bn2 (2x32), fc (10x32 + 10).
    let parameters = 448 + 32 + 4640 + 64 + 330;
    assert!(text.contains("Trainable:  5,514"), "{text}");
    let json = ok(&["inspect", "--json", &path(dir.path(), "cnn")]);
    let doc: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert!(doc["flops"].as_u64().unwrap() > 0);
    assert_eq!(doc["parameters"].as_u64(), Some(parameters));
    assert_eq!(doc["trainable_parameters"].as_u64(), Some(parameters));
    for file in ["cnn.pt", "cnn.safetensors"] {
        let text = ok(&["inspect", &path(dir.path(), file)]);
        assert!(text.contains("conv1.weight"), "{text}");
        assert!(text.contains("[16, 3, 3, 3]"), "{text}");
        assert!(text.contains("Buffers:"), "{text}");
        assert!(text.contains("Trainable:  5,514"), "{text}");
        let json = ok(&["inspect", "--json", &path(dir.path(), file)]);
        let doc: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(doc["trainable_parameters"].as_u64(), Some(parameters));
    }
}

#[test]
fn summary_tables_layers_for_another_input_shape() {
    let dir = fixtures();
    let text = ok(&["summary", &path(dir.path(), "cnn")]);
    assert!(text.contains("conv1"), "{text}");
    assert!(text.contains("Total params:"), "{text}");
    assert!(text.contains("Trainable params: 5,514"), "{text}");
    assert!(text.contains("[2, 16, 16, 16]"), "{text}");
    let text = ok(&[
        "summary",
        &path(dir.path(), "cnn"),
        "--input-shape",
        "2,3,24,24",
    ]);
    assert!(text.contains("[2, 16, 24, 24]"), "{text}");
}

#[test]
fn input_shape_runs_every_command_at_another_batch_size() {
    let dir = fixtures();
    let mlp = path(dir.path(), "mlp");
    let shape = ["--input-shape", "5,8"];
    let with = |args: &[&str]| -> String {
        let mut all = args.to_vec();
        all.extend(shape);
        ok(&all)
    };
    let text = with(&["summary", &mlp]);
    assert!(
        text.contains("[5, 16]") && text.contains("[5, 4]"),
        "{text}"
    );
    for backend in ["interp", "cpu"] {
        let text = with(&["run", &mlp, "--backend", backend]);
        assert!(text.contains("output0: F32 [5, 4]"), "{backend}: {text}");
    }
    let text = with(&["bench", &mlp, "--compare", "--runs", "2", "--warmup", "0"]);
    assert_eq!(text.lines().count(), 3, "{text}");
    let kernels = dir.path().join("kernels");
    let text = with(&[
        "compile",
        &mlp,
        "--dump-kernels",
        &kernels.display().to_string(),
    ]);
    assert!(text.contains("largest difference"), "{text}");
    let graph = std::fs::read_to_string(kernels.join("graph.txt")).unwrap();
    assert!(graph.contains("f32[5, 8]"), "{graph}");
    let trace_file = path(dir.path(), "trace.json");
    with(&["profile", &mlp, "-o", &trace_file]);
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&trace_file).unwrap()).unwrap();
    let relu = doc["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["args"]["op"] == "relu")
        .unwrap();
    assert_eq!(relu["args"]["output_bytes"].as_u64(), Some(5 * 16 * 4));
    // The saved batch size is not baked in: a shape the graph cannot take is refused.
    let out = tessera(&["run", &mlp, "--input-shape", "5,9"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
}

#[test]
fn draw_writes_dot_coloured_by_fusion_group() {
    let dir = fixtures();
    let out = path(dir.path(), "cnn.dot");
    ok(&["draw", &path(dir.path(), "cnn"), "-o", &out]);
    let dot = std::fs::read_to_string(&out).unwrap();
    assert!(dot.starts_with("digraph G {"), "{dot}");
    assert!(dot.contains("fillcolor="), "{dot}");
    ok(&[
        "draw",
        &path(dir.path(), "cnn"),
        "-o",
        &out,
        "--passes",
        "fold_batch_norm",
    ]);
    assert!(dir.path().join("cnn.0-input.dot").exists());
    assert!(dir.path().join("cnn.1-fold_batch_norm.dot").exists());
}

#[test]
fn optimize_writes_an_artifact_that_runs_alike() {
    let dir = fixtures();
    let (optimized, text) = optimize_cnn(
        dir.path(),
        "folded",
        "fold_batch_norm,dead_code_elimination",
    );
    assert!(text.contains("fold_batch_norm"), "{text}");
    assert!(text.contains("batch_norm -"), "{text}");
    let before = path(dir.path(), "before.safetensors");
    let after = path(dir.path(), "after.safetensors");
    ok(&["run", &path(dir.path(), "cnn"), "-o", &before]);
    ok(&["run", &optimized, "-o", &after]);
    let a = tessera::nn::load_safetensors(&before).unwrap();
    let b = tessera::nn::load_safetensors(&after).unwrap();
    let (a, b) = (
        a.get("output0").unwrap().to_vec::<f32>().unwrap(),
        b.get("output0").unwrap().to_vec::<f32>().unwrap(),
    );
    for (x, y) in a.iter().zip(&b) {
        assert!((x - y).abs() < 1e-4, "{x} vs {y}");
    }
    assert!(ok(&["optimize", "--list"]).contains("structured_prune"));
}

#[test]
fn optimize_with_the_whole_pipeline_writes_an_artifact_that_loads_and_runs() {
    let dir = fixtures();
    let (optimized, text) = optimize_cnn(
        dir.path(),
        "small",
        "fold_batch_norm,structured_prune=0.3,quantize_dynamic,simplify",
    );
    for pass in [
        "fold_batch_norm",
        "structured_prune=0.3",
        "quantize_dynamic",
        "simplify",
    ] {
        assert!(text.contains(pass), "{pass} missing from:\n{text}");
    }
    assert!(text.contains("batch_norm -2"), "{text}");
    let inspected = ok(&["inspect", "--json", &optimized]);
    let doc: serde_json::Value = serde_json::from_str(&inspected).unwrap();
    assert!(
        !doc["graph"].as_str().unwrap().contains("batch_norm"),
        "{doc}"
    );
    // Pruning removed 30% of the channels: fewer weights than the original's 5,514.
    assert!(doc["parameters"].as_u64().unwrap() < 5514, "{doc}");
    for backend in ["interp", "cpu"] {
        let out = path(dir.path(), &format!("{backend}.safetensors"));
        ok(&["run", &optimized, "--backend", backend, "-o", &out]);
        let y = tessera::nn::load_safetensors(&out).unwrap();
        let y = y.get("output0").unwrap();
        assert_eq!(y.shape(), [2, 10]);
        assert!(y.to_vec::<f32>().unwrap().iter().all(|v| v.is_finite()));
    }
}

#[test]
fn run_reads_inputs_from_safetensors() {
    let dir = fixtures();
    let x = tessera::Tensor::ones(&[2, 3, 16, 16], DType::F32).unwrap();
    let mut inputs = tessera::nn::StateDict::new();
    inputs.insert("x", x);
    let file = path(dir.path(), "x.safetensors");
    save_safetensors(&inputs, &file).unwrap();
    let text = ok(&["run", &path(dir.path(), "cnn"), "--input", &file]);
    assert!(text.contains("output0: F32 [2, 10]"), "{text}");
}

#[test]
fn compile_reports_kernels_fallbacks_and_agrees_with_the_interpreter() {
    let dir = fixtures();
    let dump = dir.path().join("kernels");
    let text = ok(&[
        "compile",
        &path(dir.path(), "cnn"),
        "--dump-kernels",
        &dump.display().to_string(),
    ]);
    assert!(text.contains("kernels,"), "{text}");
    assert!(text.contains("passes: fold_batch_norm"), "{text}");
    let difference: f64 = text
        .lines()
        .find_map(|l| l.strip_prefix("largest difference from the interpreter: "))
        .expect("the comparison line")
        .parse()
        .unwrap();
    assert!(difference < 1e-4, "{text}");
    let kernels = std::fs::read_to_string(dump.join("kernels.txt")).unwrap();
    assert!(kernels.contains("CLIF"), "{kernels}");
    let graph = std::fs::read_to_string(dump.join("graph.txt")).unwrap();
    assert!(graph.contains("graph("), "{graph}");
}

#[test]
fn run_on_the_cpu_backend_writes_what_the_interpreter_writes() {
    let dir = fixtures();
    let outputs: Vec<Vec<f64>> = ["interp", "cpu"]
        .iter()
        .map(|backend| {
            let file = path(dir.path(), &format!("{backend}.safetensors"));
            ok(&[
                "run",
                &path(dir.path(), "cnn"),
                "--backend",
                backend,
                "-o",
                &file,
            ]);
            let dict = tessera::nn::load_safetensors(&file).unwrap();
            dict.get("output0").unwrap().to_vec_f64().unwrap()
        })
        .collect();
    assert_eq!(outputs[0].len(), 20);
    for (a, b) in outputs[0].iter().zip(&outputs[1]) {
        assert!((a - b).abs() < 1e-4, "{a} vs {b}");
    }
}

#[test]
fn bench_compare_prints_percentiles_of_the_interpreter_and_the_compiled_code() {
    let dir = fixtures();
    let text = ok(&[
        "bench",
        &path(dir.path(), "cnn"),
        "--compare",
        "--runs",
        "2",
        "--warmup",
        "1",
    ]);
    let rows: Vec<&str> = text.lines().skip(1).collect();
    assert!(rows[0].starts_with("interp"), "{text}");
    assert!(rows[1].starts_with("cpu"), "{text}");
    assert!(text.contains("median ms"), "{text}");
    assert!(text.contains("compile ms"), "{text}");
    // --compare runs both backends: naming one as well is refused.
    let out = tessera(&[
        "bench",
        &path(dir.path(), "cnn"),
        "--compare",
        "--backend",
        "cpu",
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("--backend"), "{}", stderr(&out));
}

#[test]
fn cuda_without_a_cuda_backend_is_a_one_line_error() {
    let dir = fixtures();
    for (args, instead) in [
        (
            vec!["run", "--backend", "cuda"],
            "use --backend cpu or interp",
        ),
        (
            vec!["bench", "--backend", "cuda"],
            "use --backend cpu or interp",
        ),
        (
            vec!["profile", "--backend", "cuda"],
            "use --backend cpu or interp",
        ),
        (vec!["compile", "--device", "cuda"], "use --device cpu"),
    ] {
        let mut args = args;
        let file = path(dir.path(), "cnn");
        args.insert(1, &file);
        let out = tessera(&args);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains("no CUDA backend"), "{err}");
        assert!(err.trim_end().ends_with(instead), "{args:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    }
}

#[test]
fn profile_writes_a_chrome_trace_that_parses() {
    let dir = fixtures();
    let trace_file = path(dir.path(), "trace.json");
    let text = ok(&["profile", &path(dir.path(), "cnn"), "-o", &trace_file]);
    let compiled = ok(&["profile", &path(dir.path(), "cnn"), "--backend", "cpu"]);
    assert!(compiled.contains("conv2d"), "{compiled}");
    assert!(compiled.contains("Self (ms)"), "{compiled}");
    assert!(text.contains("conv2d"), "{text}");
    assert!(text.contains("Self (ms)"), "{text}");
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&trace_file).unwrap()).unwrap();
    let events = doc["traceEvents"].as_array().unwrap();
    assert!(events.iter().any(|e| e["args"]["op"] == "conv2d"
        && e["ph"] == "X"
        && e["args"]["flops"].as_u64().unwrap() > 0));
}

#[test]
fn convert_goes_both_ways() {
    let dir = fixtures();
    let st = path(dir.path(), "back.safetensors");
    let pt = path(dir.path(), "back.pt");
    ok(&["convert", &path(dir.path(), "cnn.pt"), "-o", &st]);
    ok(&["convert", &st, "-o", &pt]);
    let original = tessera::nn::load_pt_state_dict(dir.path().join("cnn.pt")).unwrap();
    let round = tessera::nn::load_pt_state_dict(&pt).unwrap();
    assert_eq!(
        original.keys().collect::<Vec<_>>(),
        round.keys().collect::<Vec<_>>()
    );
    for (k, v) in original.iter() {
        assert_eq!(
            v.to_vec_f64().unwrap(),
            round.get(k).unwrap().to_vec_f64().unwrap()
        );
    }
}

#[test]
fn bad_files_are_one_line_errors_with_exit_code_2() {
    let dir = fixtures();
    let garbage = dir.path().join("garbage.pt");
    std::fs::write(&garbage, b"PK\x03\x04 not really a zip").unwrap();
    let truncated = dir.path().join("truncated.safetensors");
    let bytes = std::fs::read(dir.path().join("cnn.safetensors")).unwrap();
    std::fs::write(&truncated, &bytes[..bytes.len() / 2]).unwrap();
    let broken: PathBuf = dir.path().join("broken");
    std::fs::create_dir(&broken).unwrap();
    std::fs::write(broken.join("graph.json"), b"{\"nodes\": [").unwrap();
    let noise = dir.path().join("noise");
    std::fs::write(
        &noise,
        (0..4096u32)
            .map(|i| (i * 7919 % 251) as u8)
            .collect::<Vec<_>>(),
    )
    .unwrap();
    let missing = dir.path().join("missing.pt");
    let missing_folder = dir.path().join("missing");
    let out_dir = path(dir.path(), "out");
    let out_file = path(dir.path(), "out.safetensors");
    let out_dot = path(dir.path(), "out.dot");
    for file in [
        &garbage,
        &truncated,
        &broken,
        &noise,
        &missing,
        &missing_folder,
    ] {
        let file = file.display().to_string();
        for sub in SUBCOMMANDS {
            let rest: &[&str] = match sub {
                "draw" => &["-o", &out_dot],
                "optimize" => &["--passes", "simplify", "-o", &out_dir],
                "bench" => &["--runs", "1", "--warmup", "0"],
                "convert" => &["-o", &out_file],
                _ => &[],
            };
            let mut args = vec![sub, file.as_str()];
            args.extend(rest);
            let out = tessera(&args);
            let err = stderr(&out);
            assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
            assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
            assert!(err.starts_with("tessera: "), "{args:?}: {err}");
            assert!(!err.contains("panicked"), "{args:?}: {err}");
            assert!(stdout(&out).is_empty(), "{args:?}: {}", stdout(&out));
        }
    }
    // A state dict has no graph: commands that need one say so.
    let out = tessera(&["summary", &path(dir.path(), "cnn.pt")]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("no graph"), "{}", stderr(&out));
    // Unknown passes list the known ones.
    let out = tessera(&[
        "optimize",
        &path(dir.path(), "cnn"),
        "--passes",
        "fold_everything",
        "-o",
        &path(dir.path(), "x"),
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("fold_batch_norm"), "{}", stderr(&out));
}
