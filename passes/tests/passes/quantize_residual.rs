//! Static quantization of residual networks: max pooling runs on u8 even when the residual
//! connection also reads it, residual add + ReLU becomes an int8 add whose output takes the
//! next quantize's parameters, so the graph stays in u8 from its first quantize to its last
//! dequantize and stays close to float; an add whose result is never quantized stays float.

use crate::common::traced;
use std::sync::Arc;
use tessera_fx::GraphModule;
use tessera_fx::trace::LeafPolicy;
use tessera_nn::layers::{
    AdaptiveAvgPool2d, Conv2d, Conv2dOptions, Flatten, Linear, MaxPool2d, ReLU,
};
use tessera_nn::models::BasicBlock;
use tessera_nn::{Call, ModuleExt, Sequential};
use tessera_passes::{ConvertStatic, FoldBatchNorm, InsertObservers, Pass, calibrate};
use tessera_tensor::{DType, Generator, Tensor, TensorMeta};

fn randn(shape: &[usize], seed: u64) -> Tensor {
    Tensor::randn_with(shape, DType::F32, &mut Generator::new(seed)).unwrap()
}

/// A stem, max pooling, two basic blocks (the second with a strided 1x1 downsample) and
/// a classifier: ResNet's pattern at toy size.
fn small_resnet(head: bool) -> Arc<Sequential> {
    let stem = Conv2d::with_options(3, 8, 3, Conv2dOptions::default().padding(1)).unwrap();
    let mut model = Sequential::new()
        .add(stem)
        .add(ReLU::new())
        .add(MaxPool2d::new(2))
        .add(BasicBlock::new(8, 8, 1).unwrap())
        .add(BasicBlock::new(8, 16, 2).unwrap());
    if head {
        model = model
            .add(AdaptiveAvgPool2d::new(1))
            .add(Flatten::new())
            .add(Linear::new(16, 10).unwrap());
    }
    let model = Arc::new(model);
    model.eval();
    model
}

fn quantized(model: &Arc<Sequential>) -> GraphModule {
    let mut gm = traced(
        model.clone(),
        TensorMeta::new(vec![2, 3, 16, 16], DType::F32),
        LeafPolicy::default(),
    );
    FoldBatchNorm.run(&mut gm).unwrap();
    InsertObservers.run(&mut gm).unwrap();
    let batches: Vec<Vec<Tensor>> = (0..4).map(|i| vec![randn(&[8, 3, 16, 16], i)]).collect();
    calibrate(&gm, &batches).unwrap();
    ConvertStatic { per_channel: true }.run(&mut gm).unwrap();
    gm
}

#[test]
fn a_residual_network_stays_in_u8_between_its_first_quantize_and_last_dequantize() {
    let model = small_resnet(true);
    let gm = quantized(&model);
    let text = gm.graph.to_string();
    assert_eq!(
        text.matches("call_function[quantized_add_relu]").count(),
        2,
        "{text}"
    );
    assert_eq!(
        text.matches("call_function[quantize_per_tensor]").count(),
        1,
        "{text}"
    );
    assert_eq!(
        text.matches("call_function[dequantize]").count(),
        1,
        "{text}"
    );
    assert!(!text.contains("call_function[add]"), "{text}");
    assert!(
        !text.contains(": f32[2, 8"),
        "no float activation inside: {text}"
    );
    assert!(
        text.contains("%_2 : u8[2, 8, 8, 8] = call_module[2: MaxPool2d"),
        "{text}"
    );

    let x = randn(&[2, 3, 16, 16], 99);
    let (q, f) = (gm.call(x.clone()).unwrap(), model.call(x).unwrap());
    let (q, f) = (q.to_vec::<f32>().unwrap(), f.to_vec::<f32>().unwrap());
    let range = f.iter().fold(0f32, |m, v| m.max(v.abs()));
    let worst = q
        .iter()
        .zip(&f)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    assert!(
        worst <= 0.1 * range,
        "max error {worst} against outputs up to {range}"
    );
}

#[test]
fn an_add_whose_result_is_never_quantized_stays_float() {
    // Without a head the last block's sum is the graph's output: no observer fixes its
    // parameters, so that add (and its ReLU) stay float; the first block's add is quantized.
    let model = small_resnet(false);
    let gm = quantized(&model);
    let text = gm.graph.to_string();
    assert_eq!(
        text.matches("call_function[quantized_add_relu]").count(),
        1,
        "{text}"
    );
    assert_eq!(text.matches("call_function[add]").count(), 1, "{text}");
    let x = randn(&[2, 3, 16, 16], 7);
    let (q, f) = (gm.call(x.clone()).unwrap(), model.call(x).unwrap());
    assert_eq!(q.shape(), f.shape());
    assert_eq!(q.dtype(), DType::F32);
}
