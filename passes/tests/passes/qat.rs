//! Quantization-aware training: `prepare_qat` on a small conv/linear model (the printed graph,
//! parameters shared with the float model), training through the prepared graph, and
//! `convert_static` of the trained graph into the int8 graph whose outputs match the
//! fake-quantized ones; converting before any training step is an error. With learnable fake
//! quantizers and 3-bit weights, calibration then training moves the scales and the int8
//! graph still matches the fake-quantized outputs, its weights holding 3-bit values.

use crate::common::{run_pass, snapshots, traced};
use std::sync::Arc;
use tessera_fx::GraphModule;
use tessera_fx::trace::LeafPolicy;
use tessera_nn::layers::{Conv2d, Conv2dOptions, Flatten, Linear, MaxPool2d, ReLU};
use tessera_nn::optim::{Adam, AdamOptions, Optimizer};
use tessera_nn::quantized::{
    FakeQuantize, LearnableFakeQuantize, QatConv2d, QuantizedConvReLU2d, QuantizedLinear,
    enable_observers, enable_param_learning,
};
use tessera_nn::{Call, ModuleExt, Sequential};
use tessera_passes::{Changed, ConvertStatic, Pass, PassError, PrepareQat, calibrate};
use tessera_tensor::functional::cross_entropy;
use tessera_tensor::{DType, Generator, Tensor, TensorMeta};

/// conv(+ReLU) -> max pool -> flatten -> linear, on `[N, 1, 8, 8]` images.
fn model() -> Arc<Sequential> {
    tessera_tensor::manual_seed(3);
    Arc::new(
        Sequential::new()
            .add(Conv2d::with_options(1, 4, 3, Conv2dOptions::default().padding(1)).unwrap())
            .add(ReLU::new())
            .add(MaxPool2d::new(2))
            .add(Flatten::new())
            .add(Linear::new(64, 3).unwrap()),
    )
}

fn prepared(batch: usize) -> (Arc<Sequential>, GraphModule) {
    prepared_with(batch, PrepareQat::default())
}

fn prepared_with(batch: usize, prepare: PrepareQat) -> (Arc<Sequential>, GraphModule) {
    let model = model();
    let mut gm = traced(
        model.clone(),
        TensorMeta::new(vec![batch, 1, 8, 8], DType::F32),
        LeafPolicy::default(),
    );
    prepare.run(&mut gm).unwrap();
    gm.graph.verify().unwrap();
    (model, gm)
}

/// Images whose class is the quadrant-free pattern `label`: a row, a column or a diagonal.
fn data(n: usize, seed: u64) -> (Tensor, Tensor) {
    let mut g = Generator::new(seed);
    let mut pixels = Vec::with_capacity(n * 64);
    let mut labels = Vec::with_capacity(n);
    for i in 0..n {
        let label = i % 3;
        let at = (i / 3) % 8;
        for r in 0..8 {
            for c in 0..8 {
                let on = match label {
                    0 => r == at,
                    1 => c == at,
                    _ => r == c,
                };
                pixels.push(f32::from(u8::from(on)) + 0.2 * g.normal() as f32);
            }
        }
        labels.push(label as i64);
    }
    (
        Tensor::from_vec(pixels, &[n, 1, 8, 8]).unwrap(),
        Tensor::from_vec(labels, &[n]).unwrap(),
    )
}

/// Trains `gm` for `steps` full-batch Adam steps and returns the first and last losses.
fn train(gm: &GraphModule, (x, y): &(Tensor, Tensor), steps: usize) -> (f64, f64) {
    gm.train(true);
    let options = AdamOptions {
        lr: 2e-2,
        ..Default::default()
    };
    let mut optimizer = Adam::new(gm.parameter_tensors(), options).unwrap();
    let mut losses = Vec::new();
    for _ in 0..steps {
        let logits = gm.call(x.clone()).unwrap();
        let loss = cross_entropy(&logits, y, Default::default()).unwrap();
        optimizer.zero_grad(true);
        loss.backward().unwrap();
        optimizer.step().unwrap();
        losses.push(loss.item::<f64>().unwrap());
    }
    gm.eval();
    (losses[0], *losses.last().unwrap())
}

#[test]
fn prepare_qat_swaps_layers_and_fake_quantizes_block_inputs_and_outputs() {
    let model = model();
    let mut gm = traced(
        model.clone(),
        TensorMeta::new(vec![2, 1, 8, 8], DType::F32),
        LeafPolicy::default(),
    );
    let (changed, text) = run_pass(Box::new(PrepareQat::default()), &mut gm);
    assert_eq!(changed, Changed::Yes);
    snapshots().bind(|| insta::assert_snapshot!("quantize_prepare_qat_cnn", text));
    let owned: Vec<&String> = gm.owned_modules().keys().collect();
    assert_eq!(
        owned,
        [
            "0_qat",
            "4_qat",
            "0_qat_input_fake_quant",
            "0_qat_output_fake_quant",
            "4_qat_output_fake_quant"
        ]
    );
    // The QAT layers train the float model's own parameters, each counted once.
    let qat = gm.owned_modules()["0_qat"]
        .as_any()
        .downcast_ref::<QatConv2d>()
        .unwrap();
    assert_eq!(
        qat.weight.id(),
        model.get_parameter("0.weight").unwrap().id()
    );
    assert_eq!(gm.parameters().len(), model.parameters().len());
    // PyTorch's state-dict keys of a fake quantizer and of the QAT layer's weight one.
    let keys: Vec<String> = gm.owned_modules()["0_qat"]
        .state_dict()
        .unwrap()
        .entries
        .into_keys()
        .collect();
    for key in [
        "weight",
        "bias",
        "weight_fake_quant.fake_quant_enabled",
        "weight_fake_quant.observer_enabled",
        "weight_fake_quant.scale",
        "weight_fake_quant.zero_point",
        "weight_fake_quant.activation_post_process.min_val",
        "weight_fake_quant.activation_post_process.max_val",
    ] {
        assert!(keys.iter().any(|k| k == key), "{key} not in {keys:?}");
    }
}

#[test]
fn training_through_the_prepared_graph_reduces_the_loss_and_updates_the_float_model() {
    let (model, gm) = prepared(48);
    let before = model
        .get_parameter("4.weight")
        .unwrap()
        .detach()
        .to_vec::<f32>()
        .unwrap();
    let (first, last) = train(&gm, &data(48, 1), 40);
    assert!(last < 0.5 * first, "loss {first} -> {last}");
    let after = model
        .get_parameter("4.weight")
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    assert_ne!(before, after);
    // The activation fake quantizers observed what flowed through them.
    let fq = gm.owned_modules()["0_qat_output_fake_quant"]
        .as_any()
        .downcast_ref::<FakeQuantize>()
        .unwrap();
    assert!(fq.has_observed().unwrap());
    assert_ne!(fq.qparams().unwrap().scale, 1.0);
}

#[test]
fn convert_after_qat_gives_the_int8_graph_matching_the_fake_quantized_outputs() {
    let (_, mut gm) = prepared(48);
    let data = data(48, 2);
    train(&gm, &data, 10);
    // Frozen parameters, as before conversion in PyTorch: the fake-quantized forward then
    // computes what the int8 graph will.
    enable_observers(&gm, false).unwrap();
    let x = &data.0;
    let fake_quantized = gm.call(x.clone()).unwrap().to_vec::<f32>().unwrap();
    let (changed, text) = run_pass(Box::new(ConvertStatic { per_channel: true }), &mut gm);
    assert_eq!(changed, Changed::Yes);
    let after = text.split("after:").nth(1).unwrap();
    assert!(!after.contains("fake_quant"), "{after}");
    let owned = gm.owned_modules();
    assert!(
        owned
            .values()
            .any(|m| m.as_any().is::<QuantizedConvReLU2d>())
    );
    assert!(owned.values().any(|m| m.as_any().is::<QuantizedLinear>()));
    assert_within_one_output_step(&gm, x, &fake_quantized);
}

/// The int8 GEMM accumulates exactly and requantizes once where the float graph rounds
/// twice in f32: the converted graph's outputs agree with the fake-quantized ones within one
/// output step of the last fake quantizer.
fn assert_within_one_output_step(gm: &GraphModule, x: &Tensor, fake_quantized: &[f32]) {
    let int8 = gm.call(x.clone()).unwrap().to_vec::<f32>().unwrap();
    let step = gm
        .owned_modules()
        .values()
        .find_map(|m| m.as_any().downcast_ref::<QuantizedLinear>())
        .unwrap()
        .output
        .scale;
    let worst = int8
        .iter()
        .zip(fake_quantized)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    assert!(worst <= 1.01 * step, "max difference {worst}, step {step}");
}

#[test]
fn learnable_qat_trains_scales_and_converts_to_3_bit_weights_matching_the_fake_quantized_outputs() {
    let prepare = PrepareQat {
        learnable: true,
        weight_range: (-4, 3),
    };
    let (_, mut gm) = prepared_with(48, prepare);
    let data = data(48, 4);
    let x = &data.0;
    let learnable = |name: &str| {
        gm.owned_modules()[name]
            .as_any()
            .downcast_ref::<LearnableFakeQuantize>()
            .unwrap()
            .scale
            .to_vec::<f32>()
            .unwrap()
    };
    calibrate(&gm, &[vec![x.clone()]]).unwrap();
    let observed = learnable("0_qat_output_fake_quant");
    enable_param_learning(&gm).unwrap();
    let (first, last) = train(&gm, &data, 20);
    assert!(last < first, "loss {first} -> {last}");
    assert_ne!(learnable("0_qat_output_fake_quant"), observed);
    let fake_quantized = gm.call(x.clone()).unwrap().to_vec::<f32>().unwrap();
    ConvertStatic { per_channel: true }.run(&mut gm).unwrap();
    gm.graph.verify().unwrap();
    assert_within_one_output_step(&gm, x, &fake_quantized);
    let conv = gm
        .owned_modules()
        .values()
        .find_map(|m| m.as_any().downcast_ref::<QuantizedConvReLU2d>())
        .unwrap();
    let weights = conv
        .weight
        .to_dtype(DType::I64)
        .unwrap()
        .to_vec::<i64>()
        .unwrap();
    assert!(weights.iter().all(|w| (-4..=3).contains(w)), "{weights:?}");
    assert!(weights.iter().any(|w| *w == -4 || *w == 3));
}

#[test]
fn converting_a_prepared_graph_that_never_ran_names_the_fake_quantizer() {
    let (_, mut gm) = prepared(2);
    let err = ConvertStatic { per_channel: true }
        .run(&mut gm)
        .unwrap_err();
    assert!(
        matches!(&err, PassError::NotCalibrated { observer, .. } if observer == "0_qat_input_fake_quant"),
        "{err}"
    );
}
