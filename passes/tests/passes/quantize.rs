//! Quantization passes: dynamic int8 Linear (graph before/after, the PyTorch-like repr, the
//! output within the rounding bound of float), static post-training quantization of the
//! conformance CNN (observers, calibration, conversion, accuracy against float, pooling on u8
//! against the float round trip it replaces) and of a linear/ReLU chain, which pools share
//! quantization parameters, and the error for converting without calibration.

use crate::common::{Case, conformance_cnn, run_pass, snapshots, traced};
use std::sync::Arc;
use tessera_fx::GraphModule;
use tessera_fx::trace::LeafPolicy;
use tessera_nn::layers::{AvgPool2d, AvgPool2dOptions, Conv2d, Conv2dOptions, Linear, ReLU};
use tessera_nn::models::SmallCnn;
use tessera_nn::quantized::{
    DynamicQuantizedLinear, MinMaxObserver, QuantizedConvReLU2d, QuantizedLinear,
};
use tessera_nn::{Call, ModuleExt, Sequential, repr};
use tessera_passes::{
    Changed, ConvertStatic, FoldBatchNorm, InsertObservers, Pass, PassError, QuantizeDynamic,
    calibrate,
};
use tessera_tensor::op::UnaryOp;
use tessera_tensor::op::quant::{dequantize, dynamic_qparams, quantize_per_tensor};
use tessera_tensor::{DType, Generator, Op, Tensor, TensorMeta};
use tessera_testkit::rounding_bound;

fn randn(shape: &[usize], seed: u64) -> Tensor {
    Tensor::randn_with(shape, DType::F32, &mut Generator::new(seed)).unwrap()
}

fn values(t: &Tensor) -> Vec<f32> {
    t.detach()
        .to_dtype(DType::F32)
        .unwrap()
        .to_vec::<f32>()
        .unwrap()
}

fn mlp() -> Arc<Sequential> {
    Arc::new(
        Sequential::new()
            .add(Linear::new(32, 64).unwrap())
            .add(ReLU::new())
            .add(Linear::new(64, 10).unwrap()),
    )
}

/// `text` with the number after every `scale`/`zero_point` (`: ` or `=`) replaced by `_`.
fn mask_qparams(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(i) = ["scale: ", "scale=", "zero_point: ", "zero_point="]
        .iter()
        .filter_map(|key| rest.find(key).map(|i| i + key.len()))
        .min()
    {
        out.push_str(&rest[..i]);
        out.push('_');
        rest = rest[i..].trim_start_matches(|c: char| c.is_ascii_digit() || ".e-".contains(c));
    }
    out.push_str(rest);
    out
}

/// The largest absolute difference and the fraction of rows whose argmax agrees.
fn compare(actual: &Tensor, expected: &Tensor) -> (f32, f32) {
    let (a, e) = (values(actual), values(expected));
    let classes = *expected.shape().last().unwrap();
    let max_err = a
        .iter()
        .zip(&e)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max);
    let argmax = |row: &[f32]| {
        (0..row.len())
            .max_by(|&i, &j| row[i].total_cmp(&row[j]))
            .unwrap()
    };
    let rows = e.len() / classes;
    let agree = (0..rows)
        .filter(|&r| argmax(&a[r * classes..][..classes]) == argmax(&e[r * classes..][..classes]))
        .count();
    (max_err, agree as f32 / rows as f32)
}

#[test]
fn quantize_dynamic_swaps_every_linear_for_an_owned_int8_module() {
    let model = mlp();
    let mut gm = traced(
        model.clone(),
        TensorMeta::new(vec![8, 32], DType::F32),
        LeafPolicy::default(),
    );
    let x = randn(&[8, 32], 1);
    let expected = model.call(x.clone()).unwrap();
    let (changed, text) = run_pass(Box::new(QuantizeDynamic::new(true)), &mut gm);
    assert_eq!(changed, Changed::Yes);
    snapshots().bind(|| insta::assert_snapshot!("quantize_dynamic_mlp", text));
    let owned: Vec<&String> = gm.owned_modules().keys().collect();
    assert_eq!(owned, ["0_dynamic_quantized", "2_dynamic_quantized"]);
    assert_eq!(
        repr(gm.owned_modules()["0_dynamic_quantized"].as_module()),
        "DynamicQuantizedLinear(in_features=32, out_features=64, dtype=torch.qint8, qscheme=torch.per_channel_affine)"
    );
    // Two layers each rounding x and w to steps of ~1/255 and 1/255 of their ranges: the
    // result stays within a few percent of the output's magnitude.
    let y = gm.call(x).unwrap();
    let (max_err, agreement) = compare(&y, &expected);
    let magnitude = values(&expected).iter().fold(0f32, |m, v| m.max(v.abs()));
    assert!(
        max_err <= 0.03 * magnitude,
        "{max_err} vs magnitude {magnitude}"
    );
    assert!(agreement >= 0.75, "top-1 agreement {agreement}");
    // The traced model is untouched.
    assert_eq!(model.get_parameter("0.weight").unwrap().dtype(), DType::F32);
}

#[test]
fn dynamic_linear_output_is_within_the_rounding_bound_per_tensor_and_per_channel() {
    for per_channel in [false, true] {
        let model = Arc::new(Sequential::new().add(Linear::new(48, 12).unwrap()));
        let mut gm = traced(
            model.clone(),
            TensorMeta::new(vec![16, 48], DType::F32),
            LeafPolicy::default(),
        );
        QuantizeDynamic::new(per_channel).run(&mut gm).unwrap();
        let x = randn(&[16, 48], 4);
        let (y, expected) = (
            values(&gm.call(x.clone()).unwrap()),
            values(&model.call(x.clone()).unwrap()),
        );
        let quantized = gm.owned_modules()["0_dynamic_quantized"]
            .as_any()
            .downcast_ref::<DynamicQuantizedLinear>()
            .unwrap();
        let w_steps = values(&quantized.scale);
        let (xv, wv) = (
            values(&x),
            values(&model.get_parameter("0.weight").unwrap()),
        );
        let (lo, hi) = xv
            .iter()
            .fold((0f32, 0f32), |(a, b), &v| (a.min(v), b.max(v)));
        let x_step = dynamic_qparams(lo, hi, false).scale;
        for (i, (a, e)) in y.iter().zip(&expected).enumerate() {
            let (r, c) = (i / 12, i % 12);
            let w_step = w_steps[if per_channel { c } else { 0 }];
            let bound = rounding_bound(&xv[r * 48..][..48], &wv[c * 48..][..48], x_step, w_step);
            assert!(
                (a - e).abs() <= bound + 1e-5,
                "per_channel={per_channel} [{r}, {c}]: {a} vs {e}, bound {bound}"
            );
        }
    }
}

/// The conformance CNN with its PyTorch weights, in eval mode, traced and batch-norm folded.
fn folded_cnn(batch: usize) -> (Arc<SmallCnn>, GraphModule) {
    let model = conformance_cnn();
    let mut gm = traced(
        model.clone(),
        TensorMeta::new(vec![batch, 3, 16, 16], DType::F32),
        LeafPolicy::default(),
    );
    FoldBatchNorm.run(&mut gm).unwrap();
    (model, gm)
}

#[test]
fn static_quantization_of_the_conformance_cnn_stays_close_to_float() {
    let case = Case::load("d_cnn_eval");
    let input = case.io("input");
    let (model, mut gm) = folded_cnn(input.shape()[0]);
    let (changed, observed) = run_pass(Box::new(InsertObservers), &mut gm);
    assert_eq!(changed, Changed::Yes);
    // conv2 and fc read conv1's and conv2's output observers through pooling and flatten.
    let after_observers = observed.split("after:").nth(1).unwrap();
    assert_eq!(after_observers.matches("= call_module[").count(), 4 + 8);
    snapshots().bind(|| insta::assert_snapshot!("quantize_insert_observers_cnn", observed));
    // Observers pass values through: the observed graph still gives PyTorch's output.
    case.check("output", &gm.call(input.clone()).unwrap());

    let batches: Vec<Vec<Tensor>> = (0..8)
        .map(|s| vec![randn(&input.shape(), 100 + s)])
        .collect();
    calibrate(&gm, &batches).unwrap();
    let observer = gm.owned_modules()["conv1_bn1_input_observer"]
        .as_any()
        .downcast_ref::<MinMaxObserver>()
        .unwrap();
    assert!(observer.range().unwrap().is_some());

    let (changed, converted) = run_pass(Box::new(ConvertStatic { per_channel: true }), &mut gm);
    assert_eq!(changed, Changed::Yes);
    let after = converted.split("after:").nth(1).unwrap();
    assert!(!after.contains("observer"), "{after}");
    assert!(after.contains("QuantizedConvReLU2d(3, 16, kernel_size=(3, 3), stride=(1, 1), scale="));
    assert!(
        gm.owned_modules()
            .values()
            .all(|m| !m.as_any().is::<MinMaxObserver>()),
        "observer modules are removed"
    );
    // One quantize in and one dequantize out: pooling and flatten run on u8.
    assert_eq!(
        after.matches("call_function[quantize_per_tensor]").count(),
        1
    );
    assert_eq!(after.matches("call_function[dequantize]").count(), 1);
    // The average pool takes the zero point: a call of the quantized op replaces the module's.
    for node in [
        "%pool1 : u8[",
        "%quantized_adaptive_avg_pool2d : u8[",
        "%flatten : u8[",
    ] {
        assert!(after.contains(node), "{node} in {after}");
    }
    // The calibrated parameters depend on float rounding of the machine's kernels: masked.
    let masked = mask_qparams(&converted);
    snapshots().bind(|| insta::assert_snapshot!("quantize_convert_static_cnn", masked));

    // Accuracy against float on the conformance input and on 256 random images.
    let (max_err, agreement) = compare(
        &gm.call(input.clone()).unwrap(),
        &model.call(input).unwrap(),
    );
    eprintln!("conformance input: max abs error {max_err}, top-1 agreement {agreement}");
    let mut totals = (0f32, 0f32);
    let rounds = 64;
    for s in 0..rounds {
        let x = randn(&[4, 3, 16, 16], 1000 + s);
        let (e, a) = compare(&gm.call(x.clone()).unwrap(), &model.call(x).unwrap());
        totals = (totals.0.max(e), totals.1 + a / rounds as f32);
    }
    eprintln!(
        "random inputs: max abs error {}, top-1 agreement {}",
        totals.0, totals.1
    );
    let logits = values(&model.call(randn(&[4, 3, 16, 16], 7)).unwrap());
    let spread = logits.iter().fold(0f32, |m, v| m.max(v.abs()));
    assert!(
        max_err <= 0.1 * spread.max(1.0),
        "max abs error {max_err}, logits up to {spread}"
    );
    assert!(totals.1 >= 0.85, "top-1 agreement {}", totals.1);
}

/// The folded conformance CNN converted to static int8, calibrated on 8 random batches.
fn converted_cnn(batch: usize) -> (Arc<SmallCnn>, GraphModule) {
    let (model, mut gm) = folded_cnn(batch);
    InsertObservers.run(&mut gm).unwrap();
    let batches: Vec<Vec<Tensor>> = (0..8)
        .map(|s| vec![randn(&[batch, 3, 16, 16], 100 + s)])
        .collect();
    calibrate(&gm, &batches).unwrap();
    ConvertStatic { per_channel: true }.run(&mut gm).unwrap();
    (model, gm)
}

/// An owned module of the converted graph, as its concrete type.
fn owned<'a, M: 'static>(gm: &'a GraphModule, name: &str) -> &'a M {
    gm.owned_modules()[name]
        .as_any()
        .downcast_ref::<M>()
        .unwrap()
}

#[test]
fn u8_pooling_between_quantized_blocks_matches_the_float_round_trip() {
    let (model, gm) = converted_cnn(4);
    let conv1: &QuantizedConvReLU2d = owned(&gm, "conv1_bn1_relu_quantized");
    let conv2: &QuantizedConvReLU2d = owned(&gm, "conv2_bn2_relu_quantized");
    let fc: &QuantizedLinear = owned(&gm, "fc_quantized");
    // Shared parameters: each block reads its producer's output parameters.
    assert_eq!(conv2.input, conv1.output);
    assert_eq!(fc.input, conv2.output);
    // The graph before folding: dequantize, float pooling, quantize between the blocks.
    let round_trip = |x: &Tensor| -> Tensor {
        let q = quantize_per_tensor(x, conv1.input, DType::U8).unwrap();
        let y = dequantize(&conv1.call(q).unwrap(), conv1.output).unwrap();
        let y = model.pool1.call(y).unwrap();
        let q = quantize_per_tensor(&y, conv2.input, DType::U8).unwrap();
        let y = dequantize(&conv2.call(q).unwrap(), conv2.output).unwrap();
        let y = model.flatten.call(model.gap.call(y).unwrap()).unwrap();
        let q = quantize_per_tensor(&y, fc.input, DType::U8).unwrap();
        dequantize(&fc.call(q).unwrap(), fc.output).unwrap()
    };
    // The graph after folding: the same modules with pooling and flatten on u8.
    let on_u8 = |x: &Tensor| -> Tensor {
        let q = quantize_per_tensor(x, conv1.input, DType::U8).unwrap();
        let q = conv2.call(model.pool1.call(conv1.call(q).unwrap()).unwrap());
        let q = model.gap.call(q.unwrap()).unwrap();
        let q = fc.call(model.flatten.call(q).unwrap()).unwrap();
        dequantize(&q, fc.output).unwrap()
    };
    // Max pooling is exact on u8; the u8 average differs from the round trip by one step of
    // fc's input only where a mean lies exactly halfway (see the tensor crate's quant_pool
    // tests), which moves a logit by at most sum_j |w_cj| input steps plus one output step.
    let weight = values(&model.fc.weight);
    let row_l1 = weight
        .chunks(32)
        .map(|row| row.iter().map(|w| w.abs()).sum::<f32>())
        .fold(0f32, f32::max);
    let bound = row_l1 * fc.input.scale + fc.output.scale;
    let mut exact = 0;
    for seed in 0..16 {
        let x = randn(&[4, 3, 16, 16], 500 + seed);
        let (actual, expected) = (gm.call(x.clone()).unwrap(), round_trip(&x));
        assert_eq!(values(&actual), values(&on_u8(&x)), "seed {seed}");
        let (max_err, agreement) = compare(&actual, &expected);
        assert!(max_err <= bound, "seed {seed}: {max_err} > {bound}");
        assert_eq!(agreement, 1.0, "seed {seed}");
        exact += usize::from(max_err == 0.0);
    }
    assert!(exact > 0, "no batch matched the round trip exactly");
}

/// conv -> ReLU -> `pool` -> conv, traced, changed by `edit`, observed, calibrated and
/// converted; the printed result.
fn convert_around(
    pool: AvgPool2d,
    edit: impl FnOnce(&mut GraphModule),
) -> (GraphModule, Arc<Sequential>, String) {
    let padded = || Conv2dOptions::default().padding(1);
    let model = Arc::new(
        Sequential::new()
            .add(Conv2d::with_options(3, 8, 3, padded()).unwrap())
            .add(ReLU::new())
            .add(pool)
            .add(Conv2d::with_options(8, 4, 3, padded()).unwrap()),
    );
    model.eval();
    let mut gm = traced(
        model.clone(),
        TensorMeta::new(vec![2, 3, 8, 8], DType::F32),
        LeafPolicy::default(),
    );
    edit(&mut gm);
    InsertObservers.run(&mut gm).unwrap();
    calibrate(&gm, &[vec![randn(&[16, 3, 8, 8], 21)]]).unwrap();
    ConvertStatic { per_channel: true }.run(&mut gm).unwrap();
    let text = gm.graph.to_string();
    (gm, model, text)
}

#[test]
fn an_average_pool_runs_on_u8_unless_padding_counts_in_its_divisor() {
    let options = || AvgPool2dOptions::default().stride(1).padding(1);
    let (gm, model, shared) = convert_around(
        AvgPool2d::with_options(3, options().count_include_pad(false)),
        |_| {},
    );
    assert_eq!(
        shared.matches("call_function[quantize_per_tensor]").count(),
        1,
        "{shared}"
    );
    assert!(
        shared.contains("%quantized_avg_pool2d : u8[2, 8, 8, 8]"),
        "{shared}"
    );
    let x = randn(&[2, 3, 8, 8], 22);
    let expected = model.call(x.clone()).unwrap();
    let (max_err, _) = compare(&gm.call(x).unwrap(), &expected);
    let magnitude = values(&expected).iter().fold(0f32, |m, v| m.max(v.abs()));
    assert!(max_err <= 0.05 * magnitude, "{max_err} vs {magnitude}");
    // Padded zeros in the divisor would need the zero point: the pool stays float.
    let (_, _, counted) = convert_around(AvgPool2d::with_options(3, options()), |_| {});
    assert_eq!(
        counted
            .matches("call_function[quantize_per_tensor]")
            .count(),
        2,
        "{counted}"
    );
    assert!(counted.contains("%_2 : f32[2, 8, 8, 8]"), "{counted}");
}

#[test]
fn a_pool_also_read_as_float_keeps_its_round_trip() {
    let options = AvgPool2dOptions::default().stride(1).padding(1);
    let pool = AvgPool2d::with_options(3, options.count_include_pad(false));
    let (gm, _, text) = convert_around(pool, |gm| {
        let pool = gm.graph.find("_2").unwrap();
        gm.graph
            .insert_after(&pool, |g| {
                g.call_function(Op::Unary(UnaryOp::Relu), &[&pool])
            })
            .unwrap();
    });
    // The float relu still reads the pool, so the pool stays f32 between the blocks.
    assert!(text.contains("%_2 : f32[2, 8, 8, 8]"), "{text}");
    assert!(text.contains("call_function[relu](%_2)"), "{text}");
    assert_eq!(
        text.matches("call_function[quantize_per_tensor]").count(),
        2,
        "{text}"
    );
    gm.call(randn(&[2, 3, 8, 8], 23)).unwrap();
}

#[test]
fn a_linear_relu_chain_shares_the_observer_between_blocks() {
    let model = Arc::new(
        Sequential::new()
            .add(Linear::new(16, 32).unwrap())
            .add(ReLU::new())
            .add(Linear::new(32, 8).unwrap()),
    );
    let mut gm = traced(
        model.clone(),
        TensorMeta::new(vec![4, 16], DType::F32),
        LeafPolicy::default(),
    );
    let (_, observed) = run_pass(Box::new(InsertObservers), &mut gm);
    assert_eq!(observed.matches("MinMaxObserver").count(), 3, "{observed}");
    calibrate(&gm, &[vec![randn(&[64, 16], 6)]]).unwrap();
    let (_, converted) = run_pass(Box::new(ConvertStatic { per_channel: false }), &mut gm);
    let after = converted.split("after:").nth(1).unwrap();
    assert!(after.contains("QuantizedLinearReLU(in_features=16, out_features=32"));
    assert!(after.contains("QuantizedLinear(in_features=32, out_features=8"));
    assert!(after.contains("qscheme=torch.per_tensor_affine"));
    let x = randn(&[4, 16], 6);
    let (y, expected) = (gm.call(x.clone()).unwrap(), model.call(x).unwrap());
    let (max_err, _) = compare(&y, &expected);
    let magnitude = values(&expected).iter().fold(0f32, |m, v| m.max(v.abs()));
    assert!(max_err <= 0.05 * magnitude, "{max_err} vs {magnitude}");
}

#[test]
fn converting_without_calibration_names_the_observer() {
    let (_, mut gm) = folded_cnn(2);
    InsertObservers.run(&mut gm).unwrap();
    let err = ConvertStatic { per_channel: true }
        .run(&mut gm)
        .unwrap_err();
    assert!(matches!(err, PassError::NotCalibrated { .. }), "{err}");
    let text = err.to_string();
    assert!(
        text.contains("conv1_bn1_input_observer") && text.contains("calibrate()"),
        "{text}"
    );
}

#[test]
fn a_float64_linear_stays_float() {
    let model = Arc::new(Sequential::new().add(Linear::new(4, 3).unwrap()));
    model.double().unwrap();
    let mut gm = traced(
        model,
        TensorMeta::new(vec![2, 4], DType::F64),
        LeafPolicy::default(),
    );
    let changed = QuantizeDynamic::new(true).run(&mut gm).unwrap();
    assert_eq!(changed, Changed::No);
    assert!(gm.owned_modules().is_empty());
}

#[test]
fn quantized_graph_outputs_carry_no_gradient() {
    let model = mlp();
    let mut gm = traced(
        model,
        TensorMeta::new(vec![2, 32], DType::F32),
        LeafPolicy::default(),
    );
    QuantizeDynamic::new(false).run(&mut gm).unwrap();
    let y = gm
        .call(randn(&[2, 32], 9).requires_grad_(true).unwrap())
        .unwrap();
    assert!(!y.requires_grad());
}
