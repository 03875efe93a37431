//! Saving an artifact is atomic for the folder as a whole: a save that fails or is killed
//! leaves the previous artifact loadable and byte-identical, its leftovers are removed by the
//! next save, and `run_standalone` refuses graphs and tensors that disagree with the graph.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use tessera_fx::artifact::{load, run_standalone, save};
use tessera_fx::trace::TracedGraph;
use tessera_fx::{FxError, Graph, Role, RunError};
use tessera_nn::checkpoint::TEMP_MARKER;
use tessera_tensor::{DType, Tensor};

/// `x + w` then relu, on `x: f32[1, n]` and `w: f32[n]` with `w = [fill; n]`.
fn model(n: usize, fill: f64) -> TracedGraph {
    let text = format!(
        "graph(x: f32[1, {n}]):
    %w : f32[{n}] = get_attr[w]
    %add : f32[1, {n}] = call_function[add](%x, %w)
    %relu : f32[1, {n}] = call_function[relu](%add)
    return %relu
"
    );
    TracedGraph {
        graph: Graph::parse(&text).unwrap(),
        attributes: [(
            "w".to_string(),
            Tensor::full(&[n], fill, DType::F32).unwrap(),
        )]
        .into_iter()
        .collect(),
    }
}

/// Both files of the artifact in `dir`.
fn files(dir: &Path) -> (Vec<u8>, Vec<u8>) {
    (
        std::fs::read(dir.join("graph.json")).unwrap(),
        std::fs::read(dir.join("weights.safetensors")).unwrap(),
    )
}

/// The names in `folder` that are temporary files or folders of a save.
fn leftovers(folder: &Path) -> Vec<String> {
    std::fs::read_dir(folder)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.contains(TEMP_MARKER))
        .collect()
}

/// Runs `traced` on ones and returns the single output's values.
fn run_on_ones(traced: &TracedGraph) -> Vec<f32> {
    let n = traced.attributes["w"].shape()[0];
    let x = Tensor::full(&[1, n], 1.0, DType::F32).unwrap();
    run_standalone(traced, &[x]).unwrap()[0]
        .to_vec::<f32>()
        .unwrap()
}

#[test]
fn a_save_whose_weights_fail_leaves_the_previous_artifact_loadable_and_identical() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("artifact");
    save(&model(3, 1.0), &dir).unwrap();
    let before = files(&dir);

    // A weight without data (a meta tensor) cannot be written: the save fails at the weights,
    // after the new graph.json was written.
    let mut broken = model(5, 2.0);
    broken
        .attributes
        .insert("w".into(), Tensor::new_meta(&[5], DType::F32));
    assert!(save(&broken, &dir).is_err());

    assert_eq!(files(&dir), before, "the old artifact is untouched");
    assert_eq!(run_on_ones(&load(&dir).unwrap()), [2.0; 3]);
    assert_eq!(leftovers(root.path()), Vec::<String>::new());
}

#[test]
fn a_second_save_replaces_both_files_and_leaves_nothing_behind() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("artifact");
    save(&model(3, 1.0), &dir).unwrap();
    save(&model(4, 5.0), &dir).unwrap();
    assert_eq!(run_on_ones(&load(&dir).unwrap()), [6.0; 4]);
    assert_eq!(leftovers(root.path()), Vec::<String>::new());
}

/// The id of a process that has ended.
fn dead_pid() -> u32 {
    let mut child = Command::new("true").spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();
    pid
}

#[test]
fn temporaries_of_a_killed_save_are_removed_by_the_next_save() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("artifact");
    save(&model(3, 1.0), &dir).unwrap();
    // What a save killed mid-way leaves: a staged folder and a temporary weights file.
    let stale_dir = root
        .path()
        .join(format!(".artifact{TEMP_MARKER}{}-0", dead_pid()));
    std::fs::create_dir(&stale_dir).unwrap();
    std::fs::write(stale_dir.join("graph.json"), "{").unwrap();
    let stale_file = root
        .path()
        .join(format!(".artifact{TEMP_MARKER}{}-7", dead_pid()));
    std::fs::write(&stale_file, "partial").unwrap();
    // A running process's temporary (it may be saving right now) and other files stay.
    let live = root.path().join(format!(
        ".artifact{TEMP_MARKER}{}-0",
        std::os::unix::process::parent_id()
    ));
    std::fs::write(&live, "in progress").unwrap();
    let other = root
        .path()
        .join(format!(".other{TEMP_MARKER}{}-0", dead_pid()));
    std::fs::write(&other, "another target's").unwrap();

    save(&model(3, 2.0), &dir).unwrap();

    assert!(!stale_dir.exists(), "the stale staged folder was removed");
    assert!(!stale_file.exists(), "the stale temporary file was removed");
    assert!(live.exists() && other.exists());
    assert_eq!(run_on_ones(&load(&dir).unwrap()), [3.0; 3]);
}

/// Set in the child process of [`a_save_killed_at_any_point_leaves_one_whole_artifact`]:
/// the folder it saves into, again and again.
const SAVER_DIR: &str = "TESSERA_ARTIFACT_SAVER_DIR";

/// The child: alternates two artifacts of different shapes in one folder until killed.
fn keep_saving(dir: &Path) {
    let models = [model(40_000, 1.0), model(60_000, 2.0)];
    for i in 0..100_000 {
        save(&models[i % 2], dir).unwrap();
        if i == 0 {
            println!("ready");
        }
    }
}

#[test]
fn a_save_killed_at_any_point_leaves_one_whole_artifact() {
    if let Some(dir) = std::env::var_os(SAVER_DIR) {
        keep_saving(Path::new(&dir));
        return;
    }
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("artifact");
    for _ in 0..8 {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "a_save_killed_at_any_point_leaves_one_whole_artifact",
                "--exact",
                "--nocapture",
            ])
            .env(SAVER_DIR, &dir)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        // The test harness prints its own lines first; the saver prints `ready` after its
        // first save.
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        for _ in 0..20 {
            line.clear();
            stdout.read_line(&mut line).unwrap();
            if line.contains("ready") {
                break;
            }
        }
        assert!(line.contains("ready"), "the saver started: {line:?}");
        // Killed wherever it is in one of its next saves.
        child.kill().unwrap();
        child.wait().unwrap();
        drop(stdout);

        let loaded = load(&dir).expect("a killed save leaves a whole artifact");
        let out = run_on_ones(&loaded);
        assert!(
            out == vec![2.0; 40_000] || out == vec![3.0; 60_000],
            "the artifact is one of the two saved"
        );
    }
    save(&model(3, 1.0), &dir).unwrap();
    assert_eq!(leftovers(root.path()), Vec::<String>::new());
}

#[test]
fn run_standalone_refuses_a_graph_that_verify_rejects() {
    let graph = Graph::parse_unverified(
        "graph(x: f32[2, 3]):
    %relu : f32[7] = call_function[relu](%x)
    return %relu
",
    )
    .unwrap();
    let traced = TracedGraph {
        graph,
        attributes: Default::default(),
    };
    let x = Tensor::zeros(&[2, 3], DType::F32).unwrap();
    let err = run_standalone(&traced, &[x]).unwrap_err();
    assert!(matches!(err, FxError::Verify(_)), "{err:?}");
}

#[test]
fn run_standalone_refuses_weights_of_another_shape_than_the_graph_declares() {
    let mut traced = model(3, 1.0);
    // A weight of one element broadcasts, so the old run returned a result.
    traced
        .attributes
        .insert("w".into(), Tensor::full(&[1], 1.0, DType::F32).unwrap());
    let x = Tensor::zeros(&[1, 3], DType::F32).unwrap();
    let err = run_standalone(&traced, &[x]).unwrap_err();
    assert!(matches!(err, FxError::Verify(_)), "{err:?}");
}

#[test]
fn run_standalone_refuses_inputs_of_another_shape_than_the_placeholders() {
    let traced = model(3, 1.0);
    // [4, 3] broadcasts against w: the old run returned an output of shape [4, 3], not the
    // [1, 3] the graph declares.
    let x = Tensor::zeros(&[4, 3], DType::F32).unwrap();
    let err = run_standalone(&traced, &[x]).unwrap_err();
    match err {
        FxError::RunGraph {
            source:
                RunError::Mismatch {
                    role: Role::Input,
                    index: 0,
                    ref shape,
                    ref got_shape,
                    ..
                },
        } => assert_eq!(
            (shape.as_slice(), got_shape.as_slice()),
            ([1, 3].as_slice(), [4, 3].as_slice())
        ),
        other => panic!("{other:?}"),
    }
}
