//! Static post-training quantization against PyTorch 2.15's FX flow on the x86 engine, bit for
//! bit: conv -> average pool -> conv+ReLU with fixed weights (exact ties included), observed,
//! calibrated on fixed batches and converted, per channel and per tensor. The int8 weights,
//! their scales and zero points, the observers' scales and zero points for PyTorch's observed
//! ranges, and the u8 outputs of each layer for PyTorch's parameters must equal PyTorch's; the
//! first conv's output zero point is odd, so the u8 pool's rounding of `mean - zero_point` is
//! exercised at exact halves. The ranges observed after a float conv are PyTorch's within a
//! few ulps only (its float conv sums in another order), so parameters derived from them may
//! differ in the scale's last bit: the whole graph's output is checked to within a step. The fixture (`fixtures/quant_x86_static.safetensors`)
//! was written by `scripts/quant_fixtures.py` with PyTorch's qconfig
//! `QConfig(activation=MinMaxObserver.with_args(dtype=torch.quint8),
//! weight=PerChannelMinMaxObserver.with_args(dtype=torch.qint8,
//! qscheme=torch.per_channel_symmetric))` (per tensor: `MinMaxObserver` with
//! `per_tensor_symmetric`), which is what `InsertObservers` and `ConvertStatic` implement.

use crate::common::traced;
use std::sync::Arc;
use tessera_fx::GraphModule;
use tessera_fx::trace::LeafPolicy;
use tessera_nn::layers::{AvgPool2d, Conv2d, Conv2dOptions, ReLU};
use tessera_nn::quantized::{MinMaxObserver, QuantizedConv2d, QuantizedConvReLU2d};
use tessera_nn::{Call, ModuleExt, Sequential, StateDict, load_safetensors};
use tessera_passes::{ConvertStatic, InsertObservers, Pass, calibrate};
use tessera_tensor::op::quant::{QParams, quantize_per_tensor};
use tessera_tensor::op::{PoolOp, QuantOp};
use tessera_tensor::{DType, Op, Tensor, TensorMeta};

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
    let padded = || Conv2dOptions::default().padding(1);
    let model = Arc::new(
        Sequential::new()
            .add(Conv2d::with_options(3, 4, 3, padded()).unwrap())
            .add(AvgPool2d::new(2))
            .add(Conv2d::with_options(4, 5, 3, padded()).unwrap())
            .add(ReLU::new()),
    );
    let mut state = StateDict::new();
    for key in ["0.weight", "0.bias", "2.weight", "2.bias"] {
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

/// The fixture's `{scheme}/{at}` scale and zero point.
fn qparams(f: &StateDict, scheme: &str, at: &str) -> QParams {
    let scale = f32s(get(f, &format!("{scheme}/{at}/scale")))[0];
    QParams::new(scale, ints(get(f, &format!("{scheme}/{at}/zero_point")))[0])
}

/// An observer that saw PyTorch's range for `{scheme}/{at}` gives PyTorch's parameters.
fn assert_observer_arithmetic(f: &StateDict, scheme: &str, at: &str) -> Result<(), String> {
    let range = f32s(get(f, &format!("{scheme}/{at}/range")));
    let observer = MinMaxObserver::new().map_err(|e| e.to_string())?;
    let seen = Tensor::from_vec(range, &[2]).map_err(|e| e.to_string())?;
    observer.call(seen).map_err(|e| e.to_string())?;
    assert_qparams(
        f,
        scheme,
        at,
        observer.qparams().map_err(|e| e.to_string())?,
    );
    Ok(())
}

fn check(per_channel: bool) {
    let scheme = if per_channel {
        "per_channel"
    } else {
        "per_tensor"
    };
    let f = fixture();
    let gm = converted(&f, per_channel);
    let conv1: &QuantizedConv2d = owned(&gm, "0_quantized");
    let conv2: &QuantizedConvReLU2d = owned(&gm, "2_relu_quantized");
    let parts1 = [&conv1.weight, &conv1.weight_scale, &conv1.weight_zero_point];
    let parts2 = [&conv2.weight, &conv2.weight_scale, &conv2.weight_zero_point];
    assert_weight(&f, scheme, "conv1", parts1);
    assert_weight(&f, scheme, "conv2", parts2);
    for at in ["input", "conv1", "conv2"] {
        assert_observer_arithmetic(&f, scheme, at).unwrap();
    }
    // The input's range is observed on the same floats: identical parameters.
    assert_qparams(&f, scheme, "input", conv1.input);
    // The pool shares its input's parameters, in PyTorch as here.
    assert_eq!(conv2.input, conv1.output);
    // The u8 values, layer by layer with PyTorch's parameters and inputs.
    let u8s = |what: &str| {
        get(&f, &format!("{scheme}/{what}"))
            .to_dtype(DType::U8)
            .unwrap()
    };
    let (input, out1, out2) = (
        qparams(&f, scheme, "input"),
        qparams(&f, scheme, "conv1"),
        qparams(&f, scheme, "conv2"),
    );
    let float_conv = |target: &str| -> &Conv2d {
        let module = gm.get_submodule(target).unwrap();
        module.as_any().downcast_ref::<Conv2d>().unwrap()
    };
    let conv1 = QuantizedConv2d::from_float(float_conv("0"), input, out1, per_channel).unwrap();
    let conv2 = QuantizedConvReLU2d::from_float(float_conv("2"), out1, out2, per_channel).unwrap();
    let x = get(&f, "input");
    let xq = quantize_per_tensor(x, input, DType::U8).unwrap();
    assert_eq!(ints(&xq), ints(&u8s("input_u8")), "{scheme}: input");
    let y1 = conv1.call(xq).unwrap();
    assert_eq!(ints(&y1), ints(&u8s("conv1_u8")), "{scheme}: conv1");
    let pool = Op::Quant(QuantOp::AvgPool {
        pool: PoolOp::avg_pool2d([2, 2], [2, 2], [0, 0], false, true),
        zero_point: out1.zero_point,
    });
    assert_eq!(
        out1.zero_point % 2,
        1,
        "the fixture's pool input needs an odd zero point"
    );
    let pooled = pool.apply1(&[&u8s("conv1_u8")]).unwrap();
    assert_eq!(ints(&pooled), ints(&u8s("pool_u8")), "{scheme}: pool");
    let y2 = conv2.call(u8s("pool_u8")).unwrap();
    assert_eq!(ints(&y2), ints(&u8s("conv2_u8")), "{scheme}: conv2");
    // The whole graph, with parameters from its own observers.
    let y = f32s(&gm.call(x.clone()).unwrap());
    let expected = f32s(get(&f, &format!("{scheme}/output")));
    let max_diff = y
        .iter()
        .zip(&expected)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    assert!(
        max_diff <= 1.01 * out2.scale,
        "{scheme}: output differs by {max_diff}, more than one step {}",
        out2.scale
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
