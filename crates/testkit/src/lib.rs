//! Test helpers shared by the workspace: loading PyTorch conformance cases and comparing
//! tensors with tolerances.

mod cast_cases;
pub mod fake_quant_cases;
mod formula;
mod narrow_int_cases;
pub mod op_cases;
pub mod quant_cases;
pub mod quant_conv_cases;
pub mod quant_linear_cases;
mod reduce_kinds;
mod rounding;
mod subcase;
mod test_files;
pub mod update_cases;

pub use cast_cases::{cast_float_values, cast_input, cast_int_values, exact_bits};
pub use formula::{formula_tensor, pseudo_random};
pub use narrow_int_cases::{narrow_int_cases, narrow_int_values};
pub use reduce_kinds::every_reduce_kind;
pub use rounding::rounding_bound;
pub use test_files::{assert_test_files_registered, assert_test_files_registered_in};

use std::collections::HashMap;
use std::path::PathBuf;
use tessera_tensor::{DType, Result, Tensor, TensorMeta};

/// The folder of PyTorch-generated cases (`../shared/conformance` beside the repository, or
/// `TESSERA_CONFORMANCE`).
pub fn conformance_dir() -> PathBuf {
    if let Ok(dir) = std::env::var("TESSERA_CONFORMANCE") {
        return PathBuf::from(dir);
    }
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/conformance")
}

/// One case: its `case.json`, and the tensors of its safetensors files by key.
pub struct Case {
    /// The case's folder name (`m_instance_norm`).
    pub name: String,
    pub json: serde_json::Value,
    pub io: HashMap<String, Tensor>,
    pub weights: HashMap<String, Tensor>,
    pub rtol: f64,
    pub atol: f64,
}

impl Case {
    pub fn load(name: &str) -> Case {
        let dir = conformance_dir().join(name);
        let json: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(dir.join("case.json")).expect("case.json"),
        )
        .expect("valid json");
        let rtol = json["tolerance"]["rtol"].as_f64().unwrap_or(1e-4);
        let atol = json["tolerance"]["atol"].as_f64().unwrap_or(1e-5);
        let read = |file: &str| -> HashMap<String, Tensor> {
            let path = dir.join(file);
            if !path.exists() {
                return HashMap::new();
            }
            read_safetensors(&std::fs::read(path).expect("readable"))
        };
        Case {
            name: name.to_string(),
            io: read("io.safetensors"),
            weights: read("weights.safetensors"),
            json,
            rtol,
            atol,
        }
    }

    pub fn io(&self, key: &str) -> Tensor {
        self.io
            .get(key)
            .unwrap_or_else(|| panic!("io key {key}"))
            .clone()
    }

    pub fn weight(&self, key: &str) -> Tensor {
        self.weights
            .get(key)
            .unwrap_or_else(|| panic!("weight key {key}"))
            .clone()
    }

    /// Asserts `actual` matches io tensor `key` within the case's tolerance.
    pub fn check(&self, key: &str, actual: &Tensor) {
        assert_close(actual, &self.io(key), self.rtol, self.atol, key);
    }
}

pub fn read_safetensors(bytes: &[u8]) -> HashMap<String, Tensor> {
    let st = safetensors::SafeTensors::deserialize(bytes).expect("valid safetensors");
    st.tensors()
        .into_iter()
        .map(|(name, view)| {
            let shape = view.shape().to_vec();
            let data = view.data();
            let t = match view.dtype() {
                safetensors::Dtype::F32 => Tensor::from_vec(
                    data.chunks_exact(4)
                        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
                        .collect::<Vec<_>>(),
                    &shape,
                ),
                safetensors::Dtype::F64 => Tensor::from_vec(
                    data.chunks_exact(8)
                        .map(|c| f64::from_le_bytes(c.try_into().unwrap()))
                        .collect::<Vec<_>>(),
                    &shape,
                ),
                safetensors::Dtype::I64 => Tensor::from_vec(
                    data.chunks_exact(8)
                        .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
                        .collect::<Vec<_>>(),
                    &shape,
                ),
                safetensors::Dtype::BOOL => {
                    Tensor::from_vec(data.iter().map(|&b| b != 0).collect::<Vec<_>>(), &shape)
                }
                other => panic!("unexpected dtype {other:?} for {name}"),
            }
            .expect("shape matches data");
            (name, t)
        })
        .collect()
}

/// `|actual - expected| <= atol + rtol * |expected|` elementwise, with a message naming `what`.
pub fn assert_close(actual: &Tensor, expected: &Tensor, rtol: f64, atol: f64, what: &str) {
    assert_eq!(actual.shape(), expected.shape(), "{what}: shape");
    let a = actual.to_vec_f64().expect("numeric");
    let e = expected.to_vec_f64().expect("numeric");
    let mut worst = (0usize, 0.0f64);
    for (i, (x, y)) in a.iter().zip(&e).enumerate() {
        let excess = (x - y).abs() - (atol + rtol * y.abs());
        if excess > worst.1 || x.is_nan() != y.is_nan() {
            worst = (i, excess.max(f64::MIN_POSITIVE));
        }
    }
    assert!(
        worst.1 <= 0.0,
        "{what}: element {} is {} but expected {} (rtol {rtol}, atol {atol})",
        worst.0,
        a[worst.0],
        e[worst.0]
    );
}

/// A tensor from f64 values, converted to `dtype`.
pub fn tensor(values: &[f64], shape: &[usize], dtype: DType) -> Result<Tensor> {
    Tensor::from_vec(values.to_vec(), shape)?.to_dtype(dtype)
}

/// An f64 tensor of normal samples that requires grad, for gradcheck.
pub fn leaf(shape: &[usize], seed: u64) -> Tensor {
    let mut g = tessera_tensor::Generator::new(seed);
    Tensor::randn_with(shape, DType::F64, &mut g)
        .unwrap()
        .requires_grad_(true)
        .unwrap()
}

/// Insta settings that keep snapshots under `snapshots/` at the repository root, whichever
/// package's test takes them.
pub fn snapshots() -> insta::Settings {
    let mut settings = insta::Settings::clone_current();
    settings.set_snapshot_path(concat!(env!("CARGO_MANIFEST_DIR"), "/../../snapshots"));
    settings.set_prepend_module_to_snapshot(false);
    settings
}

/// The meta of an f32 tensor of `shape`.
pub fn f32s(shape: &[usize]) -> TensorMeta {
    TensorMeta::new(shape, DType::F32)
}
