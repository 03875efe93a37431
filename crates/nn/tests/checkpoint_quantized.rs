//! Quantized tensors in `.pt` files: a [`ValueStateDict`] holding `torch.qint8` tensors (per
//! channel and per tensor) and a `torch.qint8` dtype is written the way `torch.save` writes
//! them (`torch._utils._rebuild_qtensor` over a `torch.QInt8Storage`) and read back, and
//! malformed quantized tensors are refused with errors. Reading what `torch.save` wrote is
//! tested in `passes/tests/passes/fx_quantized_state_dict.rs`. PyTorch 2.15 reads the file this test leaves
//! at `target/tmp/quantized_values.pt` (checked by hand: `torch.load` gives a per-channel
//! affine qint8 tensor with the scales, zero points and `int_repr()` written here).

use std::io::Read;
use tessera_nn::{
    QuantizedTensor, Quantizer, TorchDtype, Value, ValueStateDict, load_pt_state_dict,
    load_pt_value_state_dict, save_pt_value_state_dict,
};
use tessera_tensor::Tensor;

fn per_channel() -> QuantizedTensor {
    let q = Tensor::from_vec(vec![-128i8, -1, 0, 1, 2, 127], &[2, 3]).unwrap();
    let quantizer = Quantizer::PerChannelAffine {
        scales: Tensor::from_vec(vec![0.5f32, 0.25], &[2]).unwrap(),
        zero_points: Tensor::from_vec(vec![0i64, 0], &[2]).unwrap(),
        axis: 0,
    };
    QuantizedTensor::new(q, quantizer).unwrap()
}

fn written(name: &str) -> std::path::PathBuf {
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let path = dir.join(format!("{name}.pt"));
    let mut state = ValueStateDict::default();
    state
        .entries
        .insert("conv.weight".into(), Value::Quantized(per_channel()));
    let per_tensor = QuantizedTensor::new(
        Tensor::from_vec(vec![3i8, -4], &[2]).unwrap(),
        Quantizer::PerTensorAffine {
            scale: 0.125,
            zero_point: 0,
        },
    )
    .unwrap();
    state.entries.insert(
        "fc._packed_params._packed_params".into(),
        Value::Tuple(vec![
            Value::Quantized(per_tensor),
            Value::Tensor(Tensor::from_vec(vec![1.0f32, 2.0], &[2]).unwrap()),
        ]),
    );
    state.entries.insert(
        "fc._packed_params.dtype".into(),
        Value::Dtype(TorchDtype::QInt8),
    );
    state.metadata.insert("fc".into(), 3);
    save_pt_value_state_dict(&state, &path).unwrap();
    path
}

fn record(path: &std::path::Path, name: &str) -> Vec<u8> {
    let mut archive = zip::ZipArchive::new(std::fs::File::open(path).unwrap()).unwrap();
    let mut bytes = Vec::new();
    archive
        .by_name(name)
        .unwrap()
        .read_to_end(&mut bytes)
        .unwrap();
    bytes
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

#[test]
fn quantized_tensors_are_written_as_torch_save_writes_them() {
    let path = written("quantized_values");
    let pickle = record(&path, "quantized_values/data.pkl");
    for global in [
        "torch._utils\n_rebuild_qtensor\n",
        "torch\nQInt8Storage\n",
        "torch\nper_channel_affine\n",
        "torch\nper_tensor_affine\n",
        "torch\nDoubleStorage\n",
        "torch\nqint8\n",
    ] {
        assert!(contains(&pickle, global), "no global {global:?}");
    }
    // The integer values, then the scales as f64 and the zero points as i64.
    assert_eq!(
        record(&path, "quantized_values/data/0"),
        [-128i8, -1, 0, 1, 2, 127].map(|v| v as u8)
    );
    let scales: Vec<u8> = [0.5f64, 0.25]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    assert_eq!(record(&path, "quantized_values/data/1"), scales);
    assert_eq!(record(&path, "quantized_values/data/2"), [0u8; 16]);
}

#[test]
fn quantized_tensors_read_back_as_written() {
    let state = load_pt_value_state_dict(written("quantized_round_trip")).unwrap();
    let Value::Quantized(weight) = &state.entries["conv.weight"] else {
        panic!("conv.weight is not quantized");
    };
    assert_eq!(
        weight.int_repr().to_vec::<i8>().unwrap(),
        [-128, -1, 0, 1, 2, 127]
    );
    let Quantizer::PerChannelAffine {
        scales,
        zero_points,
        axis,
    } = weight.quantizer()
    else {
        panic!("not per channel");
    };
    assert_eq!(scales.to_vec::<f64>().unwrap(), [0.5, 0.25]);
    assert_eq!(zero_points.to_vec::<i64>().unwrap(), [0, 0]);
    assert_eq!(*axis, 0);
    let Value::Tuple(packed) = &state.entries["fc._packed_params._packed_params"] else {
        panic!("packed params are not a tuple");
    };
    let [Value::Quantized(fc_weight), Value::Tensor(bias)] = packed.as_slice() else {
        panic!("packed params are not (qtensor, tensor)");
    };
    assert!(matches!(
        fc_weight.quantizer(),
        Quantizer::PerTensorAffine {
            scale: 0.125,
            zero_point: 0
        }
    ));
    assert_eq!(bias.to_vec::<f32>().unwrap(), [1.0, 2.0]);
    assert!(matches!(
        state.entries["fc._packed_params.dtype"],
        Value::Dtype(TorchDtype::QInt8)
    ));
    assert_eq!(state.metadata["fc"], 3);
}

#[test]
fn a_tensor_state_dict_refuses_quantized_entries_with_an_error() {
    let err = load_pt_state_dict(written("quantized_refused"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("quantized tensor"), "{err}");
}

#[test]
fn malformed_quantized_tensors_are_refused() {
    let float = Tensor::from_vec(vec![1.0f32, 2.0], &[2]).unwrap();
    let per_tensor = Quantizer::PerTensorAffine {
        scale: 1.0,
        zero_point: 0,
    };
    assert!(QuantizedTensor::new(float, per_tensor).is_err());
    let q = Tensor::from_vec(vec![1i8, 2], &[2]).unwrap();
    let wrong_axis = Quantizer::PerChannelAffine {
        scales: Tensor::from_vec(vec![1.0f32, 1.0], &[2]).unwrap(),
        zero_points: Tensor::from_vec(vec![0i64, 0], &[2]).unwrap(),
        axis: 1,
    };
    assert!(QuantizedTensor::new(q.clone(), wrong_axis).is_err());
    let too_few = Quantizer::PerChannelAffine {
        scales: Tensor::from_vec(vec![1.0f32], &[1]).unwrap(),
        zero_points: Tensor::from_vec(vec![0i64], &[1]).unwrap(),
        axis: 0,
    };
    assert!(QuantizedTensor::new(q, too_few).is_err());
}
