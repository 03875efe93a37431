//! Writes the seed inputs of the fuzz corpus: small PyTorch conformance files and files the
//! library writes itself. Run by hand (`cargo test -p tessera-fuzz-entries --test seed_corpus
//! -- --ignored`), then minimise with `cargo +nightly fuzz cmin TARGET`.

use std::path::Path;

use tessera_fuzz_entries::{artifact_input, fuzz_dir};
use tessera_fx::trace::{LeafPolicy, trace};
use tessera_nn::models::SmallCnn;
use tessera_nn::{Key, Linear, ModuleExt, StateDict, Value};
use tessera_tensor::{DType, Tensor, TensorMeta};

fn put(target: &str, name: &str, bytes: &[u8]) {
    let dir = fuzz_dir().join("corpus").join(target);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(name), bytes).unwrap();
}

/// Conformance files named `file` of at most `max` bytes.
fn conformance_files(file: &str, max: u64) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    for case in std::fs::read_dir(tessera_testkit::conformance_dir())
        .unwrap()
        .flatten()
    {
        let path = case.path().join(file);
        if path.metadata().is_ok_and(|m| m.len() <= max) {
            let name = case.file_name().to_string_lossy().into_owned();
            out.push((name, std::fs::read(path).unwrap()));
        }
    }
    out
}

/// A state dict of every dtype, with a 0-dim, an empty and a 2-D tensor.
fn every_dtype() -> StateDict {
    let mut state = StateDict::new();
    let values = Tensor::from_vec(vec![0.0f64, -1.5, 2.0, f64::NAN, 7.0, 1e9], &[2, 3]).unwrap();
    for dtype in DType::ALL {
        state.insert(format!("t.{dtype}"), values.to_dtype(dtype).unwrap());
    }
    state.insert("scalar", Tensor::from_vec(vec![3.0f32], &[]).unwrap());
    state.insert("empty", Tensor::zeros(&[0, 4], DType::F32).unwrap());
    state.metadata.insert("t".into(), 2);
    state
}

/// A training checkpoint with every kind of value.
fn checkpoint() -> Value {
    let mut dict = indexmap::IndexMap::new();
    dict.insert(Key::from("epoch"), Value::Int(3));
    dict.insert(Key::from("loss"), Value::Float(0.25));
    dict.insert(Key::from("name"), Value::Str("run".into()));
    dict.insert(Key::from("done"), Value::Bool(false));
    dict.insert(Key::from("none"), Value::None);
    dict.insert(
        Key::from("shapes"),
        Value::List(vec![Value::Tuple(vec![Value::Int(1), Value::Int(2)])]),
    );
    let mut state = indexmap::IndexMap::new();
    state.insert(
        Key::Int(0),
        Value::Tensor(Tensor::from_vec(vec![1.0f32, 2.0], &[2]).unwrap()),
    );
    dict.insert(Key::from("state"), Value::Dict(state));
    Value::Dict(dict)
}

fn written(save: impl FnOnce(&Path)) -> Vec<u8> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("seed.bin");
    save(&path);
    std::fs::read(path).unwrap()
}

#[test]
#[ignore = "writes the seed corpus; run by hand"]
fn write_seed_corpus() {
    let linear = Linear::new(4, 3).unwrap();
    let small_state = linear.state_dict().unwrap();
    for (case, bytes) in conformance_files("state_dict.pt", 20_000) {
        put("pt", &format!("conformance_{case}.pt"), &bytes);
    }
    put(
        "pt",
        "written_linear.pt",
        &written(|p| tessera_nn::save_pt_state_dict(&small_state, p).unwrap()),
    );
    put(
        "pt",
        "written_every_dtype.pt",
        &written(|p| tessera_nn::save_pt_state_dict(&every_dtype(), p).unwrap()),
    );
    put(
        "pt",
        "written_checkpoint.pt",
        &written(|p| tessera_nn::save_pt(&checkpoint(), p).unwrap()),
    );

    for (case, bytes) in conformance_files("weights.safetensors", 4_000) {
        put(
            "safetensors",
            &format!("conformance_{case}.safetensors"),
            &bytes,
        );
    }
    put(
        "safetensors",
        "written_linear.safetensors",
        &written(|p| tessera_nn::save_safetensors(&small_state, p).unwrap()),
    );
    put(
        "safetensors",
        "written_every_dtype.safetensors",
        &written(|p| tessera_nn::save_safetensors(&every_dtype(), p).unwrap()),
    );

    let cnn = SmallCnn::new().unwrap();
    cnn.eval();
    let meta = TensorMeta::new([1, 3, 8, 8], DType::F32);
    let modules = trace(&cnn, meta.clone(), LeafPolicy::default()).unwrap();
    let ops = trace(&cnn, meta, LeafPolicy::none()).unwrap();
    put(
        "graph_text",
        "small_cnn_modules.txt",
        modules.graph.to_string().as_bytes(),
    );
    put(
        "graph_text",
        "small_cnn_ops.txt",
        ops.graph.to_string().as_bytes(),
    );
    let snapshots = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../snapshots");
    for snap in std::fs::read_dir(snapshots).unwrap().flatten() {
        let text = std::fs::read_to_string(snap.path()).unwrap();
        // An insta snapshot: a `---` header, then the expression's value.
        let Some(body) = text.splitn(3, "---\n").nth(2) else {
            continue;
        };
        if body.starts_with("graph(") && body.len() < 8_000 {
            put(
                "graph_text",
                &snap.file_name().to_string_lossy().replace(".snap", ".txt"),
                body.as_bytes(),
            );
        }
    }

    let linear_traced = trace(
        &linear,
        TensorMeta::new([2, 4], DType::F32),
        LeafPolicy::none(),
    )
    .unwrap();
    for (name, traced) in [("linear", &linear_traced), ("small_cnn", &ops)] {
        let dir = tempfile::tempdir().unwrap();
        tessera_fx::artifact::save(traced, dir.path()).unwrap();
        let graph = std::fs::read(dir.path().join("graph.json")).unwrap();
        let weights = std::fs::read(dir.path().join("weights.safetensors")).unwrap();
        put(
            "artifact",
            &format!("{name}.artifact"),
            &artifact_input(&graph, &weights),
        );
    }
}
