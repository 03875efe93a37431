//! PyTorch's quantized state-dict layout of a statically quantized graph module, against
//! PyTorch 2.15's `prepare_fx`/`convert_fx` on the same model (`QNet`: conv + ReLU, max
//! pool, flatten, linear). The fixtures were written by `scripts/qexport_fixtures.py`: the
//! float weights, a calibration batch with the converted model's output, and the converted
//! model's state-dict keys in order with what each holds, and that state dict itself. Tessera's
//! `fx_quantized_state_dict` has the same keys, order and kinds of value (quantized per-channel
//! weights, packed linear parameters, the input quantize's buffers), and written with
//! `save_pt_value_state_dict` it loads strictly into PyTorch's converted model (checked with
//! `python scripts/qexport_fixtures.py --check target/tmp/qexport_tessera.pt` after this
//! file's tests ran: `<All keys matched successfully>`, outputs 2e-7 apart, every value equal to
//! `convert_fx`'s own but `fc.scale`, 1e-9 apart). PyTorch's own file reads back with
//! `load_pt_value_state_dict` and holds the values Tessera computes.

use crate::common::traced;
use std::path::PathBuf;
use std::sync::Arc;
use tessera_fx::GraphModule;
use tessera_fx::trace::LeafPolicy;
use tessera_nn::layers::{Conv2d, Conv2dOptions, Flatten, Linear, MaxPool2d, ReLU};
use tessera_nn::{
    Call, Forward, Module, ModuleCore, ModuleExt, Quantizer, Result, Value, ValueStateDict,
    load_pt_state_dict, load_pt_value_state_dict, load_safetensors, save_pt_value_state_dict,
};
use tessera_passes::{ConvertStatic, FoldBatchNorm, InsertObservers, Pass, calibrate};
use tessera_tensor::{Tensor, TensorMeta, no_grad};
use tessera_testkit::assert_close;

/// `QNet` of `scripts/qexport_fixtures.py`.
#[derive(Module)]
struct QNet {
    core: ModuleCore,
    conv1: Conv2d,
    relu: ReLU,
    pool: MaxPool2d,
    flatten: Flatten,
    fc: Linear,
}

impl Forward for QNet {
    type Output = Tensor;

    fn forward(&self, x: Tensor) -> Result<Tensor> {
        let x = self.pool.call(self.relu.call(self.conv1.call(x)?)?)?;
        self.fc.call(self.flatten.call(x)?)
    }
}

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// The fixture's float weights, quantized as the script does: batch norm folding (nothing
/// to fold here), observers, calibration on the fixture's batch, conversion.
fn converted() -> (GraphModule, Tensor, Tensor) {
    let model = Arc::new(QNet {
        core: ModuleCore::default(),
        conv1: Conv2d::with_options(3, 4, 3, Conv2dOptions::default().padding(1)).unwrap(),
        relu: ReLU::new(),
        pool: MaxPool2d::new(2),
        flatten: Flatten::new(),
        fc: Linear::new(64, 5).unwrap(),
    });
    let weights = load_pt_state_dict(fixture("qexport_model.pt")).unwrap();
    model.load_state_dict(&weights, true, false).unwrap();
    model.eval();
    let io = load_safetensors(fixture("qexport_io.safetensors")).unwrap();
    let (input, output) = (io.get("input").unwrap(), io.get("output").unwrap());
    let meta = TensorMeta::new(input.shape(), input.dtype());
    let mut gm = traced(model, meta, LeafPolicy::default());
    FoldBatchNorm.run(&mut gm).unwrap();
    InsertObservers.run(&mut gm).unwrap();
    calibrate(&gm, &[vec![input.clone()]]).unwrap();
    ConvertStatic { per_channel: true }.run(&mut gm).unwrap();
    (gm, input.clone(), output.clone())
}

/// What a value holds, as `describe` in the script spells it.
fn describe(value: &Value) -> String {
    let dims = |t: &Tensor| {
        let dims: Vec<String> = t.shape().iter().map(|d| d.to_string()).collect();
        format!("[{}]", dims.join(", "))
    };
    let dtype = |t: &Tensor| match format!("{:?}", t.dtype()).as_str() {
        "F32" => "float32".to_string(),
        "I64" => "int64".to_string(),
        other => other.to_lowercase(),
    };
    match value {
        Value::Tensor(t) => format!("{} {}", dtype(t), dims(t)),
        Value::Quantized(q) => {
            let scheme = match q.quantizer() {
                Quantizer::PerTensorAffine { .. } => "per_tensor_affine",
                Quantizer::PerChannelAffine { .. } => "per_channel_affine",
            };
            format!("qint8 {scheme} {}", dims(q.int_repr()))
        }
        Value::Dtype(d) => format!("dtype {}", d.name()),
        Value::Tuple(items) => {
            let items: Vec<String> = items.iter().map(describe).collect();
            format!("tuple({})", items.join(", "))
        }
        Value::None => "None".into(),
        other => format!("{other:?}"),
    }
}

fn described(state: &ValueStateDict) -> Vec<String> {
    state
        .entries
        .iter()
        .map(|(k, v)| format!("{k}: {}", describe(v)))
        .collect()
}

#[test]
fn converted_graph_module_has_convert_fx_keys_order_and_values() {
    let (gm, _, _) = converted();
    let state = gm.fx_quantized_state_dict().unwrap();
    let expected = std::fs::read_to_string(fixture("qexport_keys.txt")).unwrap();
    assert_eq!(described(&state), expected.lines().collect::<Vec<_>>());
    assert_eq!(state.metadata["fc"], 3);
    assert_eq!(state.metadata["fc._packed_params"], 3);
}

#[test]
fn converted_graph_module_matches_convert_fx_output_and_writes_pt() {
    let (gm, input, expected) = converted();
    let actual = {
        let _guard = no_grad();
        gm.forward(input).unwrap()
    };
    let state = gm.fx_quantized_state_dict().unwrap();
    let Some(Value::Tensor(scale)) = state.entries.get("fc.scale") else {
        panic!("no fc.scale");
    };
    // The same calibration gives the same parameters; allow one output step of rounding.
    let step = scale.to_vec_f64().unwrap()[0];
    assert_close(&actual, &expected, 0.0, step * 1.01, "converted output");
    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("qexport_tessera.pt");
    save_pt_value_state_dict(&state, &path).unwrap();
}

/// The integer values of a quantized value, or the values of a tensor, as f64.
fn numbers(value: &Value) -> Vec<f64> {
    match value {
        Value::Tensor(t) => t.to_vec_f64().unwrap(),
        Value::Quantized(q) => q.int_repr().to_vec_f64().unwrap(),
        Value::Tuple(items) => items.iter().flat_map(numbers).collect(),
        _ => Vec::new(),
    }
}

#[test]
fn convert_fx_checkpoint_reads_back_with_tesseras_keys_and_values() {
    let torch_state = load_pt_value_state_dict(fixture("qexport_converted.pt")).unwrap();
    let expected = std::fs::read_to_string(fixture("qexport_keys.txt")).unwrap();
    assert_eq!(
        described(&torch_state),
        expected.lines().collect::<Vec<_>>()
    );
    assert_eq!(torch_state.metadata["fc._packed_params"], 3);
    let (gm, _, _) = converted();
    let ours = gm.fx_quantized_state_dict().unwrap();
    for (key, value) in &torch_state.entries {
        let (a, b) = (numbers(value), numbers(&ours.entries[key]));
        assert_eq!(a.len(), b.len(), "{key}");
        for (x, y) in a.iter().zip(&b) {
            assert!(
                (x - y).abs() <= 1e-6 * x.abs().max(1.0),
                "{key}: {x} vs {y}"
            );
        }
    }
}
