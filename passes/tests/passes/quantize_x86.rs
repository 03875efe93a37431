//! Static post-training quantization against PyTorch 2.15's FX flow on the x86 engine, bit for
//! bit: conv(+ReLU) -> flatten -> linear with fixed weights (exact ties included), observed,
//! calibrated on fixed batches and converted, per channel and per tensor. The int8 weights,
//! their scales and zero points, every activation's scale and zero point and the u8 outputs
//! of both layers must equal PyTorch's. The fixture (`fixtures/quant_x86_static.safetensors`)
//! was written by `scripts/quant_fixtures.py` with PyTorch's qconfig
//! `QConfig(activation=MinMaxObserver.with_args(dtype=torch.quint8),
//! weight=PerChannelMinMaxObserver.with_args(dtype=torch.qint8,
//! qscheme=torch.per_channel_symmetric))` (per tensor: `MinMaxObserver` with
//! `per_tensor_symmetric`), which is what `InsertObservers` and `ConvertStatic` implement.

use crate::common::traced;
use std::sync::Arc;
use tessera_fx::GraphModule;
use tessera_fx::trace::LeafPolicy;
use tessera_nn::layers::{Conv2d, Conv2dOptions, Flatten, Linear, ReLU};
use tessera_nn::quantized::{QuantizedConvReLU2d, QuantizedLinear};
use tessera_nn::{Call, ModuleExt, Sequential, StateDict, load_safetensors};
use tessera_passes::{ConvertStatic, InsertObservers, Pass, calibrate};
use tessera_tensor::op::quant::{QParams, quantize_per_tensor};
use tessera_tensor::{DType, Tensor, TensorMeta};

fn fixture() -> StateDict {
    load_safetensors(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/quant_x86_static.safetensors"
    ))
    .unwrap()
}

fn get<'a>(f: &'a StateDict, key: &str) -> &'a Tensor {
    f.get(key)
        .unwrap_or_else(|| panic!("fixture has no `{key}`"))
}

fn ints(t: &Tensor) -> Vec<i64> {
    t.to_dtype(DType::I64).unwrap().to_vec::<i64>().unwrap()
}

/// PyTorch keeps scales as f64 of an f32 computation: equal bit for bit once in f32.
fn f32s(t: &Tensor) -> Vec<f32> {
    t.to_dtype(DType::F32).unwrap().to_vec::<f32>().unwrap()
}

/// The fixture's float model, traced, observed, calibrated on the fixture's batches and
/// converted.
fn converted(f: &StateDict, per_channel: bool) -> GraphModule {
    let model = Arc::new(
        Sequential::new()
            .add(Conv2d::with_options(3, 4, 3, Conv2dOptions::default().padding(1)).unwrap())
            .add(ReLU::new())
            .add(Flatten::new())
            .add(Linear::new(4 * 6 * 6, 5).unwrap()),
    );
    let mut state = StateDict::new();
    for key in ["0.weight", "0.bias", "3.weight", "3.bias"] {
        state.insert(key, get(f, key).clone());
    }
    model.load_state_dict(&state, true, false).unwrap();
    model.eval();
    let mut gm = traced(
        model,
        TensorMeta::new(vec![2, 3, 6, 6], DType::F32),
        LeafPolicy::default(),
    );
    InsertObservers.run(&mut gm).unwrap();
    let batches: Vec<Vec<Tensor>> = (0..3)
        .map(|i| vec![get(f, &format!("calibration/{i}")).clone()])
        .collect();
    calibrate(&gm, &batches).unwrap();
    ConvertStatic { per_channel }.run(&mut gm).unwrap();
    gm
}

fn owned<'a, M: 'static>(gm: &'a GraphModule, name: &str) -> &'a M {
    gm.owned_modules()[name]
        .as_any()
        .downcast_ref::<M>()
        .unwrap_or_else(|| panic!("`{name}` is not the expected module"))
}

/// Asserts `ours` equals the fixture's `{scheme}/{at}/scale` and `zero_point`.
fn assert_qparams(f: &StateDict, scheme: &str, at: &str, ours: QParams) {
    let scale = f32s(get(f, &format!("{scheme}/{at}/scale")))[0];
    let zero_point = ints(get(f, &format!("{scheme}/{at}/zero_point")))[0];
    assert_eq!(
        (ours.scale.to_bits(), ours.zero_point),
        (scale.to_bits(), zero_point),
        "{scheme}: {at} scale/zero point {ours:?} vs PyTorch ({scale}, {zero_point})"
    );
}

/// Asserts an int8 weight, its scales and zero points equal the fixture's `{scheme}/{layer}`.
fn assert_weight(f: &StateDict, scheme: &str, layer: &str, weight: [&Tensor; 3]) {
    let at = |what: &str| get(f, &format!("{scheme}/{layer}/{what}"));
    assert_eq!(
        ints(weight[0]),
        ints(at("weight_int8")),
        "{scheme}: {layer} int8 weight"
    );
    assert_eq!(
        f32s(weight[1]),
        f32s(at("weight_scale")),
        "{scheme}: {layer} scales"
    );
    assert_eq!(
        ints(weight[2]),
        ints(at("weight_zero_point")),
        "{scheme}: {layer} zero points"
    );
}

fn check(per_channel: bool) {
    let scheme = if per_channel {
        "per_channel"
    } else {
        "per_tensor"
    };
    let f = fixture();
    let gm = converted(&f, per_channel);
    let conv: &QuantizedConvReLU2d = owned(&gm, "0_relu_quantized");
    let linear: &QuantizedLinear = owned(&gm, "3_quantized");
    assert_weight(
        &f,
        scheme,
        "conv",
        [&conv.weight, &conv.weight_scale, &conv.weight_zero_point],
    );
    assert_weight(
        &f,
        scheme,
        "linear",
        [
            &linear.weight,
            &linear.weight_scale,
            &linear.weight_zero_point,
        ],
    );
    assert_qparams(&f, scheme, "input", conv.input);
    assert_qparams(&f, scheme, "conv", conv.output);
    // PyTorch observes flatten's output again and finds the conv's range; ours shares it.
    assert_qparams(&f, scheme, "flatten", linear.input);
    assert_qparams(&f, scheme, "linear", linear.output);
    // The u8 values, layer by layer from PyTorch's inputs, then the whole graph.
    let x = get(&f, "input");
    let xq = quantize_per_tensor(x, conv.input, DType::U8).unwrap();
    assert_eq!(
        ints(&xq),
        ints(get(&f, &format!("{scheme}/input_u8"))),
        "{scheme}: input"
    );
    let expected_conv = get(&f, &format!("{scheme}/conv_u8"));
    assert_eq!(
        ints(&conv.call(xq).unwrap()),
        ints(expected_conv),
        "{scheme}: conv"
    );
    let flat = expected_conv
        .to_dtype(DType::U8)
        .unwrap()
        .reshape(&[2, 144])
        .unwrap();
    let expected_linear = get(&f, &format!("{scheme}/linear_u8"));
    assert_eq!(
        ints(&linear.call(flat).unwrap()),
        ints(expected_linear),
        "{scheme}: linear"
    );
    let y = gm.call(x.clone()).unwrap();
    assert_eq!(
        f32s(&y),
        f32s(get(&f, &format!("{scheme}/output"))),
        "{scheme}: output"
    );
}

#[test]
fn per_channel_static_quantization_matches_pytorch_x86_bit_for_bit() {
    check(true);
}

#[test]
fn per_tensor_static_quantization_matches_pytorch_x86_bit_for_bit() {
    check(false);
}
