//! Dynamic int8 Linear against PyTorch's x86 (fbgemm) engine, bit for bit: the int8 weights,
//! their scales and zero points, and the outputs, per tensor and per channel. The fixture
//! (`fixtures/quant_x86.safetensors`) was written by `scripts/quant_fixtures.py` with
//! PyTorch 2.15; its weights include exact ties (a weight at -127.5 steps).

use tessera_nn::layers::Linear;
use tessera_nn::quantized::DynamicQuantizedLinear;
use tessera_nn::{Call, ModuleExt, StateDict, load_safetensors};
use tessera_tensor::{DType, Tensor};

fn fixture() -> StateDict {
    load_safetensors(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/quant_x86.safetensors"
    ))
    .unwrap()
}

fn linear(f: &StateDict) -> Linear {
    let linear = Linear::new(16, 8).unwrap();
    let mut state = StateDict::new();
    state.insert("weight", f.get("weight").unwrap().clone());
    state.insert("bias", f.get("bias").unwrap().clone());
    linear.load_state_dict(&state, true, false).unwrap();
    linear
}

fn ints(t: &Tensor) -> Vec<i64> {
    t.to_dtype(DType::I64).unwrap().to_vec::<i64>().unwrap()
}

fn check(per_channel: bool) {
    let f = fixture();
    let name = if per_channel {
        "per_channel"
    } else {
        "per_tensor"
    };
    let q = DynamicQuantizedLinear::from_float(&linear(&f), per_channel).unwrap();
    assert!(
        q.reduce_range,
        "PyTorch's x86 engine quantizes activations to [0, 127]"
    );
    assert_eq!(
        ints(&q.weight),
        ints(f.get(&format!("{name}/weight_int8")).unwrap()),
        "{name}: int8 weights"
    );
    let scales = f
        .get(&format!("{name}/scale"))
        .unwrap()
        .to_vec::<f64>()
        .unwrap();
    let ours = q
        .scale
        .to_dtype(DType::F64)
        .unwrap()
        .to_vec::<f64>()
        .unwrap();
    // PyTorch keeps scales as f64 of an f32 computation: equal bit for bit once in f32.
    let as_f32 = |v: &[f64]| v.iter().map(|&s| s as f32).collect::<Vec<f32>>();
    assert_eq!(as_f32(&ours), as_f32(&scales), "{name}: scales");
    assert_eq!(
        ints(&q.zero_point),
        ints(f.get(&format!("{name}/zero_point")).unwrap())
    );
    let y = q.call(f.get("input").unwrap().clone()).unwrap();
    let expected = f.get(&format!("{name}/output")).unwrap();
    for (a, b) in y
        .to_vec::<f32>()
        .unwrap()
        .iter()
        .zip(expected.to_vec::<f32>().unwrap())
    {
        assert!((a - b).abs() <= 1e-6, "{name}: output {a} vs PyTorch {b}");
    }
}

#[test]
fn per_tensor_dynamic_linear_matches_pytorch_x86_bit_for_bit() {
    check(false);
}

#[test]
fn per_channel_dynamic_linear_matches_pytorch_x86_bit_for_bit() {
    check(true);
}
