//! Checkpoint files: safetensors and PyTorch `.pt` round trips for every dtype, the
//! PyTorch-written conformance checkpoints, the layout of written `.pt` files, atomic
//! saves, and malformed or hostile inputs that must fail cleanly.

use std::collections::BTreeSet;
use std::io::{Cursor, Read, Write};
use std::path::{Path, PathBuf};

use half::{bf16, f16};
use indexmap::IndexMap;
use tessera_nn::checkpoint::{
    load_checkpoint, load_pt, load_pt_state_dict, load_safetensors, save_checkpoint, save_pt,
    save_pt_state_dict, save_safetensors,
};
use tessera_nn::{Key, NnError, StateDict, Value};
use tessera_tensor::{DType, Tensor};

// ----- fixtures -----

/// The folder of PyTorch-generated cases (`TESSERA_CONFORMANCE` overrides it).
fn conformance_dir() -> PathBuf {
    match std::env::var("TESSERA_CONFORMANCE") {
        Ok(dir) => PathBuf::from(dir),
        Err(_) => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/conformance"),
    }
}

/// Every conformance case that ships a `state_dict.pt`.
fn conformance_cases() -> Vec<PathBuf> {
    let dir = conformance_dir();
    let mut cases: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("conformance folder {}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("state_dict.pt").exists())
        .collect();
    cases.sort();
    assert!(
        !cases.is_empty(),
        "no conformance cases in {}",
        dir.display()
    );
    cases
}

/// One tensor of each dtype, a 0-dim tensor and two empty ones, in a deliberately
/// unsorted key order.
fn every_dtype_state() -> StateDict {
    let mut s = StateDict::new();
    s.insert(
        "z.f32",
        Tensor::from_vec(
            vec![1.5f32, -0.0, f32::INFINITY, 3.25, 1e-40, -7.0],
            &[2, 3],
        )
        .unwrap(),
    );
    s.insert(
        "a.f64",
        Tensor::from_vec(vec![std::f64::consts::PI, -1e300, 0.5], &[3]).unwrap(),
    );
    s.insert(
        "m.f16",
        Tensor::from_vec(
            vec![f16::from_f32(0.5), f16::MAX, f16::MIN_POSITIVE],
            &[3, 1],
        )
        .unwrap(),
    );
    s.insert(
        "b.bf16",
        Tensor::from_vec(vec![bf16::from_f32(-2.5), bf16::MAX], &[1, 2]).unwrap(),
    );
    s.insert(
        "num_batches_tracked",
        Tensor::from_vec(vec![i64::MIN, -1, 3, i64::MAX], &[2, 2]).unwrap(),
    );
    s.insert(
        "i32",
        Tensor::from_vec(vec![i32::MIN, 0, i32::MAX], &[3]).unwrap(),
    );
    s.insert("i8", Tensor::from_vec(vec![-128i8, 5, 127], &[3]).unwrap());
    s.insert(
        "u8",
        Tensor::from_vec(vec![0u8, 200, 255, 1], &[4]).unwrap(),
    );
    s.insert(
        "mask",
        Tensor::from_vec(vec![true, false, true], &[3, 1, 1]).unwrap(),
    );
    s.insert("scalar", Tensor::scalar(42.0f32));
    s.insert(
        "empty",
        Tensor::from_vec(Vec::<f32>::new(), &[0, 3]).unwrap(),
    );
    s.insert(
        "empty_i64",
        Tensor::from_vec(Vec::<i64>::new(), &[2, 0]).unwrap(),
    );
    s.metadata.insert(String::new(), 1);
    s.metadata.insert("bn".into(), 2);
    s
}

/// The raw little-endian bytes of a tensor, for bit-exact comparison.
fn bits(t: &Tensor) -> Vec<u8> {
    match t.dtype() {
        DType::F32 => t
            .to_vec::<f32>()
            .unwrap()
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect(),
        DType::F64 => t
            .to_vec::<f64>()
            .unwrap()
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect(),
        DType::F16 => t
            .to_vec::<f16>()
            .unwrap()
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect(),
        DType::BF16 => t
            .to_vec::<bf16>()
            .unwrap()
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect(),
        DType::I64 => t
            .to_vec::<i64>()
            .unwrap()
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect(),
        DType::I32 => t
            .to_vec::<i32>()
            .unwrap()
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect(),
        DType::I8 => t
            .to_vec::<i8>()
            .unwrap()
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect(),
        DType::U8 => t.to_vec::<u8>().unwrap(),
        DType::Bool => t
            .to_vec::<bool>()
            .unwrap()
            .iter()
            .map(|&b| b as u8)
            .collect(),
    }
}

fn assert_same_tensor(key: &str, a: &Tensor, b: &Tensor) {
    assert_eq!(a.dtype(), b.dtype(), "{key}: dtype");
    assert_eq!(a.shape(), b.shape(), "{key}: shape");
    assert_eq!(bits(a), bits(b), "{key}: bits");
}

fn assert_same_state(a: &StateDict, b: &StateDict) {
    assert_eq!(a.keys().collect::<Vec<_>>(), b.keys().collect::<Vec<_>>());
    for (k, t) in a.iter() {
        assert_same_tensor(k, t, b.get(k).unwrap());
    }
}

/// Structural equality of values, tensors compared bit for bit.
fn assert_same_value(path: &str, a: &Value, b: &Value) {
    match (a, b) {
        (Value::None, Value::None) => {}
        (Value::Bool(x), Value::Bool(y)) => assert_eq!(x, y, "{path}"),
        (Value::Int(x), Value::Int(y)) => assert_eq!(x, y, "{path}"),
        (Value::Float(x), Value::Float(y)) => assert_eq!(x.to_bits(), y.to_bits(), "{path}"),
        (Value::Str(x), Value::Str(y)) => assert_eq!(x, y, "{path}"),
        (Value::Tensor(x), Value::Tensor(y)) => assert_same_tensor(path, x, y),
        (Value::List(x), Value::List(y)) | (Value::Tuple(x), Value::Tuple(y)) => {
            assert_eq!(x.len(), y.len(), "{path}: length");
            for (i, (x, y)) in x.iter().zip(y).enumerate() {
                assert_same_value(&format!("{path}[{i}]"), x, y);
            }
        }
        (Value::Dict(x), Value::Dict(y)) => {
            assert_eq!(
                x.keys().collect::<Vec<_>>(),
                y.keys().collect::<Vec<_>>(),
                "{path}: keys"
            );
            for (k, v) in x {
                assert_same_value(&format!("{path}.{k}"), v, &y[k]);
            }
        }
        _ => panic!("{path}: {a:?} vs {b:?}"),
    }
}

fn dict(items: Vec<(&str, Value)>) -> Value {
    Value::Dict(items.into_iter().map(|(k, v)| (Key::from(k), v)).collect())
}

fn t32(data: &[f32], shape: &[usize]) -> Value {
    Value::Tensor(Tensor::from_slice(data, shape).unwrap())
}

// ----- round trips -----

#[test]
fn safetensors_round_trip_keeps_every_dtype_order_and_versions() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.safetensors");
    let state = every_dtype_state();
    save_safetensors(&state, &path).unwrap();
    let loaded = load_safetensors(&path).unwrap();
    assert_same_state(&state, &loaded);
    assert_eq!(loaded.metadata, state.metadata);
}

#[test]
fn safetensors_without_recorded_order_loads_in_offset_order() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("plain.safetensors");
    let a = [1.0f32, 2.0].map(f32::to_le_bytes).concat();
    let b = [3i64].map(i64::to_le_bytes).concat();
    let views = vec![
        (
            "b",
            safetensors::tensor::TensorView::new(safetensors::Dtype::F32, vec![2], &a).unwrap(),
        ),
        (
            "a",
            safetensors::tensor::TensorView::new(safetensors::Dtype::I64, vec![1], &b).unwrap(),
        ),
    ];
    std::fs::write(&path, safetensors::serialize(views, None).unwrap()).unwrap();
    let loaded = load_safetensors(&path).unwrap();
    // safetensors lays out wider dtypes first: i64 `a`, then f32 `b`.
    assert_eq!(loaded.keys().collect::<Vec<_>>(), ["a", "b"]);
    assert_eq!(
        loaded.get("b").unwrap().to_vec::<f32>().unwrap(),
        [1.0, 2.0]
    );
}

#[test]
fn pt_state_dict_round_trip_keeps_every_dtype_order_and_versions() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.pt");
    let state = every_dtype_state();
    save_pt_state_dict(&state, &path).unwrap();
    let loaded = load_pt_state_dict(&path).unwrap();
    assert_same_state(&state, &loaded);
    assert_eq!(loaded.metadata, state.metadata);
}

#[test]
fn pt_save_writes_strided_views_as_contiguous_tensors() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.pt");
    let base = Tensor::from_vec((0..6).map(|v| v as f32).collect(), &[2, 3]).unwrap();
    let transposed = base.transpose(0, 1).unwrap();
    let mut state = StateDict::new();
    state.insert("t", transposed.clone());
    save_pt_state_dict(&state, &path).unwrap();
    let loaded = load_pt_state_dict(&path).unwrap();
    assert_eq!(loaded.get("t").unwrap().shape(), [3, 2]);
    assert_eq!(
        loaded.get("t").unwrap().to_vec::<f32>().unwrap(),
        transposed.to_vec::<f32>().unwrap()
    );
}

#[test]
fn pt_keeps_requires_grad_in_values_but_not_in_state_dicts() {
    let weight = Tensor::from_vec(vec![1.0f32, 2.0], &[2])
        .unwrap()
        .requires_grad_(true)
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("g.pt");
    save_pt(&dict(vec![("w", Value::Tensor(weight.clone()))]), &path).unwrap();
    assert!(
        load_pt(&path)
            .unwrap()
            .get("w")
            .unwrap()
            .as_tensor()
            .unwrap()
            .requires_grad()
    );
    let mut state = StateDict::new();
    state.insert("w", weight);
    save_pt_state_dict(&state, &path).unwrap();
    assert!(
        !load_pt_state_dict(&path)
            .unwrap()
            .get("w")
            .unwrap()
            .requires_grad()
    );
}

#[test]
fn training_checkpoint_round_trips() {
    let mut model = StateDict::new();
    model.insert(
        "fc1.weight",
        Tensor::from_vec(vec![0.1f32, -0.2, 0.3, 0.4], &[2, 2]).unwrap(),
    );
    model.insert(
        "fc1.bias",
        Tensor::from_vec(vec![0.0f32, 1.0], &[2]).unwrap(),
    );
    let param_group = dict(vec![
        ("lr", Value::Float(0.01)),
        ("momentum", Value::Float(0.9)),
        ("dampening", Value::Int(0)),
        ("weight_decay", Value::Float(0.0)),
        ("nesterov", Value::Bool(false)),
        ("foreach", Value::None),
        ("params", Value::List(vec![Value::Int(0), Value::Int(1)])),
    ]);
    let mut state = IndexMap::new();
    state.insert(
        Key::Int(0),
        dict(vec![(
            "momentum_buffer",
            t32(&[0.5, 0.5, 0.5, 0.5], &[2, 2]),
        )]),
    );
    state.insert(
        Key::Int(1),
        dict(vec![("momentum_buffer", t32(&[0.25, 0.0], &[2]))]),
    );
    let checkpoint = dict(vec![
        ("epoch", Value::Int(5)),
        ("model_state_dict", Value::from(&model)),
        (
            "optimizer_state_dict",
            dict(vec![
                ("state", Value::Dict(state)),
                ("param_groups", Value::List(vec![param_group])),
            ]),
        ),
        ("loss", Value::Float(0.4242)),
    ]);

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("checkpoint.tar");
    save_checkpoint(&path, &checkpoint).unwrap();
    let loaded = load_checkpoint(&path).unwrap();
    assert_same_value("checkpoint", &checkpoint, &loaded);
    let restored = StateDict::try_from(loaded.get("model_state_dict").unwrap()).unwrap();
    assert_same_state(&model, &restored);
    assert_eq!(loaded.get("epoch").and_then(Value::as_i64), Some(5));
}

#[test]
fn pt_value_round_trip_covers_every_pickle_shape() {
    let ints = [
        0,
        1,
        255,
        256,
        65535,
        65536,
        -1,
        -129,
        i32::MIN as i64,
        i32::MAX as i64,
        i32::MAX as i64 + 1,
        i32::MIN as i64 - 1,
        1 << 40,
        -(1 << 40),
        i64::MIN,
        i64::MAX,
    ];
    let tuples = (0..6)
        .map(|n| Value::Tuple((0..n).map(Value::Int).collect()))
        .collect();
    let mut int_keys = IndexMap::new();
    int_keys.insert(Key::Int(-3), Value::Str("minus three".into()));
    int_keys.insert(Key::Int(1 << 33), Value::Str("big".into()));
    let value = dict(vec![
        (
            "ints",
            Value::List(ints.into_iter().map(Value::Int).collect()),
        ),
        (
            "floats",
            Value::List(
                [
                    0.0,
                    -0.0,
                    1.5,
                    f64::MAX,
                    f64::MIN_POSITIVE,
                    f64::NAN,
                    f64::NEG_INFINITY,
                ]
                .into_iter()
                .map(Value::Float)
                .collect(),
            ),
        ),
        (
            "strings",
            Value::List(vec![
                Value::Str(String::new()),
                Value::Str("héllo ✓".into()),
            ]),
        ),
        (
            "flags",
            Value::Tuple(vec![Value::Bool(true), Value::Bool(false), Value::None]),
        ),
        ("tuples", Value::List(tuples)),
        ("int keys", Value::Dict(int_keys)),
        ("one item", Value::List(vec![Value::Int(7)])),
        ("empty list", Value::List(vec![])),
        ("empty dict", Value::dict()),
        (
            "long list",
            Value::List((0..2500).map(Value::Int).collect()),
        ),
        ("scalar", Value::Tensor(Tensor::scalar(3i64))),
        (
            "empty tensor",
            Value::Tensor(Tensor::from_vec(Vec::<f64>::new(), &[0]).unwrap()),
        ),
    ]);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v.pt");
    save_pt(&value, &path).unwrap();
    assert_same_value("value", &value, &load_pt(&path).unwrap());
}

#[test]
fn pt_keeps_a_tensor_shared_between_two_keys_as_one_storage() {
    let shared = Tensor::from_vec(vec![1.0f32, 2.0], &[2]).unwrap();
    let value = dict(vec![
        ("a", Value::Tensor(shared.clone())),
        ("b", Value::Tensor(shared)),
    ]);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tied.pt");
    save_pt(&value, &path).unwrap();
    let names = zip_entry_names(&std::fs::read(&path).unwrap());
    assert_eq!(names.iter().filter(|n| n.contains("/data/")).count(), 1);
    let loaded = load_pt(&path).unwrap();
    let (a, b) = (loaded.get("a").unwrap(), loaded.get("b").unwrap());
    assert_eq!(a.as_tensor().unwrap().id(), b.as_tensor().unwrap().id());
}

// ----- PyTorch's files -----

#[test]
fn conformance_state_dicts_equal_their_safetensors_bit_for_bit() {
    for case in conformance_cases() {
        let name = case.file_name().unwrap().to_string_lossy().into_owned();
        let json: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(case.join("case.json")).unwrap())
                .unwrap();
        let keys: Vec<&str> = json["state_dict_keys"]
            .as_array()
            .unwrap()
            .iter()
            .map(|k| k.as_str().unwrap())
            .collect();
        let pt = load_pt_state_dict(case.join("state_dict.pt"))
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let expected = load_safetensors(case.join("weights.safetensors")).unwrap();
        assert_eq!(pt.keys().collect::<Vec<_>>(), keys, "{name}: key order");
        assert_eq!(pt.len(), expected.len(), "{name}");
        for (k, t) in pt.iter() {
            assert_same_tensor(&format!("{name}/{k}"), t, expected.get(k).unwrap());
        }
        assert_eq!(pt.metadata.get(""), Some(&1), "{name}: root version");
        // The same file read as a general value.
        let value = load_pt(case.join("state_dict.pt")).unwrap();
        assert_eq!(value.as_dict().unwrap().len(), keys.len(), "{name}");
    }
}

#[test]
fn conformance_batch_norm_metadata_has_version_2() {
    let state = load_pt_state_dict(conformance_dir().join("d_cnn_eval/state_dict.pt")).unwrap();
    assert_eq!(state.metadata.get("bn1"), Some(&2));
    assert_eq!(state.metadata.get("bn2"), Some(&2));
    assert_eq!(state.metadata.get("conv1"), Some(&1));
    let bn = state.get("bn1.num_batches_tracked").unwrap();
    assert_eq!((bn.dtype(), bn.shape()), (DType::I64, vec![]));
    assert_eq!(bn.to_vec::<i64>().unwrap(), [3]);
}

#[test]
fn written_pt_has_the_layout_of_torch_save() {
    for case in conformance_cases() {
        let original = std::fs::read(case.join("state_dict.pt")).unwrap();
        let state = load_pt_state_dict(case.join("state_dict.pt")).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state_dict.pt");
        save_pt_state_dict(&state, &path).unwrap();
        let written = std::fs::read(&path).unwrap();

        let name = case.display();
        assert_eq!(
            zip_entry_names(&written),
            zip_entry_names(&original),
            "{name}"
        );
        for (entry, offset) in zip_data_offsets(&written) {
            assert_eq!(offset % 64, 0, "{name}: {entry} starts at {offset}");
        }
        let pickle = |zip: &[u8]| zip_entry(zip, "state_dict/data.pkl");
        assert_eq!(
            opcodes(&pickle(&written)),
            opcodes(&pickle(&original)),
            "{name}: opcodes"
        );
        for entry in [
            "byteorder",
            "version",
            ".format_version",
            ".storage_alignment",
        ] {
            let entry = format!("state_dict/{entry}");
            assert_eq!(
                zip_entry(&written, &entry),
                zip_entry(&original, &entry),
                "{entry}"
            );
        }
        assert_eq!(
            zip_entry(&written, "state_dict/.data/serialization_id").len(),
            40
        );
    }
}

#[test]
fn written_pickle_is_byte_identical_to_torch_save_when_metadata_round_trips() {
    // h_module_api's `_metadata` has prefixes without a version, which StateDict drops.
    for case in ["a_mylinear", "b_sequential", "d_cnn_eval", "f_train_sgd"] {
        let file = conformance_dir().join(case).join("state_dict.pt");
        let state = load_pt_state_dict(&file).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state_dict.pt");
        save_pt_state_dict(&state, &path).unwrap();
        let original = zip_entry(&std::fs::read(&file).unwrap(), "state_dict/data.pkl");
        let written = zip_entry(&std::fs::read(&path).unwrap(), "state_dict/data.pkl");
        assert!(
            original == written,
            "{case}: data.pkl differs from torch.save's"
        );
    }
}

// ----- atomic saves -----

fn leftovers(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".tmp-"))
        .collect()
}

#[test]
fn save_replaces_an_existing_file_and_leaves_no_temporary() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.pt");
    let mut state = StateDict::new();
    state.insert("w", Tensor::from_vec(vec![1.0f32], &[1]).unwrap());
    save_pt_state_dict(&state, &path).unwrap();
    state.insert("w", Tensor::from_vec(vec![2.0f32, 3.0], &[2]).unwrap());
    save_pt_state_dict(&state, &path).unwrap();
    let st = dir.path().join("w.safetensors");
    save_safetensors(&state, &st).unwrap();
    save_safetensors(&state, &st).unwrap();
    assert_eq!(
        load_pt_state_dict(&path)
            .unwrap()
            .get("w")
            .unwrap()
            .to_vec::<f32>()
            .unwrap(),
        [2.0, 3.0]
    );
    assert!(leftovers(dir.path()).is_empty());
}

#[test]
fn failed_save_leaves_the_target_untouched_and_cleans_up() {
    let dir = tempfile::tempdir().unwrap();
    let state = every_dtype_state();
    // A directory in the way: the rename at the end fails after the data was written.
    let blocked = dir.path().join("blocked.pt");
    std::fs::create_dir(&blocked).unwrap();
    std::fs::write(blocked.join("keep"), b"x").unwrap();
    let err = save_pt_state_dict(&state, &blocked).unwrap_err();
    assert!(err.to_string().contains("blocked.pt"), "{err}");
    assert_eq!(std::fs::read(blocked.join("keep")).unwrap(), b"x");
    assert!(leftovers(dir.path()).is_empty());
    // A missing directory.
    let missing = dir.path().join("no/such/dir/w.safetensors");
    assert!(matches!(
        save_safetensors(&state, &missing),
        Err(NnError::Io { .. })
    ));
}

#[cfg(unix)]
#[test]
fn save_into_a_read_only_directory_errors_and_keeps_the_old_file() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.pt");
    let mut state = StateDict::new();
    state.insert("w", Tensor::from_vec(vec![1.0f32], &[1]).unwrap());
    save_pt_state_dict(&state, &path).unwrap();
    let before = std::fs::read(&path).unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o555)).unwrap();
    // Root ignores directory permissions; the check only means something for other users.
    let enforced = std::fs::File::create(dir.path().join("probe")).is_err();
    if enforced {
        state.insert("w", Tensor::from_vec(vec![9.0f32], &[1]).unwrap());
        assert!(save_pt_state_dict(&state, &path).is_err());
        assert_eq!(std::fs::read(&path).unwrap(), before);
    }
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
}

// ----- hostile and malformed input -----

/// Builds pickles opcode by opcode.
#[derive(Default)]
struct Pk(Vec<u8>);

impl Pk {
    fn op(&mut self, code: u8) -> &mut Self {
        self.0.push(code);
        self
    }
    fn int(&mut self, v: i64) -> &mut Self {
        self.0.push(0x8a); // LONG1
        self.0.push(8);
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn str(&mut self, s: &str) -> &mut Self {
        self.0.push(b'X');
        self.0.extend_from_slice(&(s.len() as u32).to_le_bytes());
        self.0.extend_from_slice(s.as_bytes());
        self
    }
    fn global(&mut self, module: &str, name: &str) -> &mut Self {
        self.0.push(b'c');
        self.0
            .extend_from_slice(format!("{module}\n{name}\n").as_bytes());
        self
    }
    fn ints(&mut self, vs: &[i64]) -> &mut Self {
        self.op(b'(');
        for &v in vs {
            self.int(v);
        }
        self.op(b't')
    }
    /// `_rebuild_tensor_v2(persistent_id(("storage", torch.<class>, key, "cpu", numel)),
    /// offset, size, stride, False, OrderedDict())`.
    fn tensor(
        &mut self,
        class: &str,
        key: &str,
        numel: i64,
        offset: i64,
        size: &[i64],
        stride: &[i64],
    ) -> &mut Self {
        self.global("torch._utils", "_rebuild_tensor_v2").op(b'(');
        self.op(b'(')
            .str("storage")
            .global("torch", class)
            .str(key)
            .str("cpu")
            .int(numel);
        self.op(b't')
            .op(b'Q')
            .int(offset)
            .ints(size)
            .ints(stride)
            .op(0x89);
        self.global("collections", "OrderedDict").op(b')').op(b'R');
        self.op(b't').op(b'R')
    }
    fn ordered_dict(&mut self) -> &mut Self {
        self.op(0x80)
            .op(2)
            .global("collections", "OrderedDict")
            .op(b')')
            .op(b'R')
    }
    fn bytes(&self) -> Vec<u8> {
        let mut b = self.0.clone();
        b.push(b'.');
        b
    }
}

/// A `.pt` zip holding `archive/data.pkl` and the given storage records.
fn pt_zip(pickle: &[u8], storages: &[(&str, Vec<u8>)]) -> Vec<u8> {
    let mut zip = zip::ZipWriter::new(Cursor::new(Vec::new()));
    let opts =
        zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
    zip.start_file("archive/data.pkl", opts).unwrap();
    zip.write_all(pickle).unwrap();
    for (key, bytes) in storages {
        zip.start_file(format!("archive/data/{key}"), opts).unwrap();
        zip.write_all(bytes).unwrap();
    }
    zip.finish().unwrap().into_inner()
}

fn f32_bytes(n: usize) -> Vec<u8> {
    (0..n).flat_map(|i| (i as f32).to_le_bytes()).collect()
}

/// Loads `bytes` as a `.pt` state dict.
fn load_bytes(bytes: &[u8]) -> Result<StateDict, String> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("x.pt");
    std::fs::write(&path, bytes).unwrap();
    load_pt_state_dict(&path).map_err(|e| e.to_string())
}

/// Loads a pickle (in a `.pt` zip without storages) as a general value.
fn load_value(pickle: &Pk) -> Result<Value, String> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("x.pt");
    std::fs::write(&path, pt_zip(&pickle.bytes(), &[])).unwrap();
    load_pt(&path).map_err(|e| e.to_string())
}

fn load_pickle(pickle: &Pk, storages: &[(&str, Vec<u8>)]) -> Result<StateDict, String> {
    load_bytes(&pt_zip(&pickle.bytes(), storages))
}

#[test]
fn views_into_one_storage_and_non_contiguous_strides_are_gathered() {
    let mut p = Pk::default();
    p.ordered_dict().op(b'(');
    p.str("first")
        .tensor("FloatStorage", "0", 12, 0, &[2, 3], &[3, 1]);
    // The second half, transposed: element [i][j] is storage[6 + i + 3j].
    p.str("second_t")
        .tensor("FloatStorage", "0", 12, 6, &[3, 2], &[1, 3]);
    p.str("broadcast")
        .tensor("FloatStorage", "0", 12, 11, &[2, 2], &[0, 0]);
    p.op(b'u');
    let state = load_pickle(&p, &[("0", f32_bytes(12))]).unwrap();
    assert_eq!(
        state.get("first").unwrap().to_vec::<f32>().unwrap(),
        [0., 1., 2., 3., 4., 5.]
    );
    assert_eq!(
        state.get("second_t").unwrap().to_vec::<f32>().unwrap(),
        [6., 9., 7., 10., 8., 11.]
    );
    assert_eq!(
        state.get("broadcast").unwrap().to_vec::<f32>().unwrap(),
        [11.; 4]
    );
}

fn assert_refused<T>(result: Result<T, String>, needle: &str) {
    match result {
        Ok(_) => panic!("loaded a file that should be refused ({needle})"),
        Err(e) => {
            assert!(
                e.contains(needle),
                "error {e:?} does not mention {needle:?}"
            );
            assert!(e.contains("x.pt"), "error {e:?} does not name the file");
        }
    }
}

#[test]
fn forbidden_globals_are_refused_by_name() {
    let mut p = Pk::default();
    p.op(0x80)
        .op(2)
        .global("os", "system")
        .str("echo pwned")
        .op(0x85)
        .op(b'R');
    assert_refused(load_pickle(&p, &[]), "os.system");
    let mut p = Pk::default();
    p.op(0x80).op(4).str("builtins").str("eval").op(0x93);
    assert_refused(load_pickle(&p, &[]), "builtins.eval");
}

#[test]
fn storages_too_small_for_their_views_are_refused() {
    let mut p = Pk::default();
    p.ordered_dict()
        .str("w")
        .tensor("FloatStorage", "0", 6, 1, &[2, 3], &[3, 1])
        .op(b's');
    assert_refused(load_pickle(&p, &[("0", f32_bytes(6))]), "reads element 6");
    // The persistent id claims more elements than the record holds.
    let mut p = Pk::default();
    p.ordered_dict()
        .str("w")
        .tensor("FloatStorage", "0", 8, 0, &[2, 3], &[3, 1])
        .op(b's');
    assert_refused(load_pickle(&p, &[("0", f32_bytes(6))]), "holds 24 bytes");
    // A storage key with no record.
    let mut p = Pk::default();
    p.ordered_dict()
        .str("w")
        .tensor("FloatStorage", "7", 6, 0, &[6], &[1])
        .op(b's');
    assert_refused(load_pickle(&p, &[("0", f32_bytes(6))]), "archive/data/7");
}

#[test]
fn huge_declared_sizes_are_refused_without_allocating() {
    let cases: [(i64, &[i64], &[i64], &str); 5] = [
        (i64::MAX, &[4], &[1], "size overflows"),
        (6, &[1 << 40, 1 << 40], &[0, 0], "overflow"),
        (6, &[1 << 20, 1 << 20], &[0, 0], "expand"),
        (6, &[2, 2], &[i64::MAX / 2, 1], "reads element"),
        (6, &[3, 3], &[i64::MAX, i64::MAX], "overflow"),
    ];
    for (numel, size, stride, needle) in cases {
        let mut p = Pk::default();
        p.ordered_dict()
            .str("w")
            .tensor("FloatStorage", "0", numel, 0, size, stride)
            .op(b's');
        assert_refused(load_pickle(&p, &[("0", f32_bytes(6))]), needle);
    }
    // A string length far beyond the pickle.
    let mut raw = vec![0x80, 2, b'X'];
    raw.extend_from_slice(&u32::MAX.to_le_bytes());
    assert_refused(load_bytes(&pt_zip(&raw, &[])), "truncated");
}

#[test]
fn deep_nesting_and_exploding_sharing_are_refused() {
    let mut p = Pk::default();
    p.op(0x80).op(2);
    for _ in 0..200_000 {
        p.op(b']');
    }
    for _ in 0..199_999 {
        p.op(b'a');
    }
    assert_refused(load_value(&p), "nested");
    // x = [x_prev, x_prev], 80 times: 2^80 leaves if expanded.
    let mut p = Pk::default();
    p.op(0x80).op(2).op(b'N');
    for _ in 0..80 {
        p.op(b'q').op(0).op(b'h').op(0).op(0x86);
    }
    assert_refused(load_value(&p), "expands");
}

#[test]
fn malformed_pickles_are_refused() {
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (vec![0x80, 2, b'h', 9, b'.'], "memo key 9"),
        (vec![0x80, 2, b'a', b'.'], "empty stack"),
        (vec![0x80, 2, b'N', b'N', b'.'], "STOP"),
        (vec![0x80, 2, b'(', b'N', b'u', b'.'], "odd"),
        (vec![0x80, 2, b'N'], "truncated"),
        (vec![0x80, 2, b'N', b'x', b'.'], "opcode 0x78"),
        (
            vec![0x80, 2, 0x8a, 9, 1, 1, 1, 1, 1, 1, 1, 1, 1, b'.'],
            "64 bits",
        ),
        (vec![0x80, 2, b'N', b'N', b'R', b'.'], "REDUCE"),
        (vec![0x80, 2, b'}', b'N', b'b', b'.'], "BUILD"),
        (vec![0x80, 2, b'N', b'Q', b'.'], "persistent id"),
    ];
    for (pickle, needle) in cases {
        assert_refused(load_bytes(&pt_zip(&pickle, &[])), needle);
    }
}

#[test]
fn broken_containers_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.pt");
    save_pt_state_dict(&every_dtype_state(), &good).unwrap();
    let good = std::fs::read(&good).unwrap();

    assert_refused(
        load_bytes(b"definitely not a zip file"),
        "not a PyTorch zip",
    );
    assert_refused(load_bytes(&[]), "not a PyTorch zip");
    assert!(load_bytes(&good[..good.len() / 2]).is_err());
    assert!(load_bytes(&good[..good.len() - 1]).is_err());
    // A zip without data.pkl.
    let mut zip = zip::ZipWriter::new(Cursor::new(Vec::new()));
    zip.start_file("archive/version", zip::write::SimpleFileOptions::default())
        .unwrap();
    zip.write_all(b"3\n").unwrap();
    assert_refused(load_bytes(&zip.finish().unwrap().into_inner()), "data.pkl");
    // Entries not under one archive folder.
    let mut zip = zip::ZipWriter::new(Cursor::new(Vec::new()));
    zip.start_file("data.pkl", zip::write::SimpleFileOptions::default())
        .unwrap();
    zip.write_all(&Pk::default().op(b'N').bytes()).unwrap();
    assert_refused(
        load_bytes(&zip.finish().unwrap().into_inner()),
        "archive folder",
    );
    // A state-dict loader given something else.
    let mut p = Pk::default();
    p.op(0x80).op(2).op(b']');
    assert_refused(load_pickle(&p, &[]), "not a state dict");
    // A safetensors file that is not one.
    let path = dir.path().join("x.safetensors");
    std::fs::write(&path, b"\xff\xff\xff\xff\xff\xff\xff\xffgarbage").unwrap();
    let err = load_safetensors(&path).unwrap_err().to_string();
    assert!(err.contains("x.safetensors"), "{err}");
}

/// A small deterministic generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

fn mutate(rng: &mut Rng, original: &[u8]) -> Vec<u8> {
    let mut bytes = original.to_vec();
    match rng.below(4) {
        0 => bytes.truncate(rng.below(bytes.len() + 1)),
        1 => {
            for _ in 0..1 + rng.below(4) {
                let i = rng.below(bytes.len());
                bytes[i] ^= 1 << rng.below(8);
            }
        }
        2 => {
            let i = rng.below(bytes.len());
            bytes[i] = rng.next() as u8;
        }
        _ => {
            let i = rng.below(bytes.len());
            let n = rng.below(8);
            bytes.splice(i..i, (0..n).map(|_| rng.next() as u8));
        }
    }
    bytes
}

#[test]
fn fuzzed_files_and_pickles_never_panic() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("good.pt");
    save_checkpoint(
        &path,
        &dict(vec![
            ("model", Value::from(&every_dtype_state())),
            ("epoch", Value::Int(3)),
            (
                "groups",
                Value::List(vec![dict(vec![("lr", Value::Float(0.1))])]),
            ),
        ]),
    )
    .unwrap();
    let good = std::fs::read(&path).unwrap();
    let pickle = zip_entry(&good, "good/data.pkl");
    let storages: Vec<(String, Vec<u8>)> = zip_entry_names(&good)
        .into_iter()
        .filter_map(|n| {
            let key = n.strip_prefix("good/data/")?.to_string();
            Some((key, zip_entry(&good, &n)))
        })
        .collect();
    let storages: Vec<(&str, Vec<u8>)> = storages
        .iter()
        .map(|(k, b)| (k.as_str(), b.clone()))
        .collect();

    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let target = dir.path().join("x.pt");
    for round in 0..1500 {
        // Alternate between damaging the zip and damaging the pickle inside a valid zip
        // (the zip's CRC would catch most of the latter).
        let bytes = if round % 2 == 0 {
            mutate(&mut rng, &good)
        } else {
            pt_zip(&mutate(&mut rng, &pickle), &storages)
        };
        std::fs::write(&target, &bytes).unwrap();
        let _ = load_pt(&target);
        let _ = load_pt_state_dict(&target);
    }

    let path = dir.path().join("good.safetensors");
    save_safetensors(&every_dtype_state(), &path).unwrap();
    let good = std::fs::read(&path).unwrap();
    for _ in 0..500 {
        std::fs::write(&path, mutate(&mut rng, &good)).unwrap();
        let _ = load_safetensors(&path);
    }
}

// ----- zip and pickle inspection -----

fn zip_entry_names(zip: &[u8]) -> Vec<String> {
    let archive = zip::ZipArchive::new(Cursor::new(zip)).unwrap();
    archive
        .file_names()
        .map(|n| n.unwrap().into_owned())
        .collect()
}

fn zip_entry(zip: &[u8], name: &str) -> Vec<u8> {
    let mut archive = zip::ZipArchive::new(Cursor::new(zip)).unwrap();
    let mut out = Vec::new();
    archive
        .by_name(name)
        .unwrap()
        .read_to_end(&mut out)
        .unwrap();
    out
}

/// Each entry's data offset, read from its local header.
fn zip_data_offsets(zip: &[u8]) -> Vec<(String, u64)> {
    let mut archive = zip::ZipArchive::new(Cursor::new(zip)).unwrap();
    (0..archive.len())
        .map(|i| {
            let entry = archive.by_index(i).unwrap();
            let start = entry.header_start() as usize;
            let u16_at = |o: usize| u16::from_le_bytes([zip[start + o], zip[start + o + 1]]);
            let data = start + 30 + u16_at(26) as usize + u16_at(28) as usize;
            (entry.name().unwrap().into_owned(), data as u64)
        })
        .collect()
}

/// The set of opcodes in a protocol-2 pickle (skipping each opcode's argument bytes).
fn opcodes(pickle: &[u8]) -> BTreeSet<u8> {
    let mut set = BTreeSet::new();
    let mut i = 0;
    while i < pickle.len() {
        let code = pickle[i];
        set.insert(code);
        i += 1;
        let u32_at = |i: usize| u32::from_le_bytes(pickle[i..i + 4].try_into().unwrap()) as usize;
        i += match code {
            0x80 | b'K' | b'q' | b'h' => 1,
            b'M' => 2,
            b'J' | b'r' | b'j' => 4,
            b'G' => 8,
            0x8a => 1 + pickle[i] as usize,
            b'X' => 4 + u32_at(i),
            b'c' => {
                let lines = pickle[i..].iter().enumerate().filter(|(_, b)| **b == b'\n');
                lines.map(|(n, _)| n + 1).nth(1).unwrap()
            }
            _ => 0,
        };
    }
    set
}
