//! `LearnableFakeQuantize` against PyTorch's `_LearnableFakeQuantize`: static estimation copies
//! the observer's parameters, the forward and backward are the learnable fake-quantize ops with
//! LSQ's gradient scaling, learning moves the scale, `calculate_qparams` rounds and clamps the
//! zero point, and the state-dict keys are PyTorch's.

use tessera_nn::optim::{Adam, AdamOptions, Optimizer};
use tessera_nn::quantized::{FakeQuantizeBase, LearnableFakeQuantize, enable_param_learning};
use tessera_nn::{Call, ModuleExt, Sequential};
use tessera_tensor::op::{
    fake_quantize_learnable_per_channel_affine, fake_quantize_learnable_per_tensor_affine,
};
use tessera_tensor::{Generator, Tensor};

fn randn(shape: &[usize], seed: u64) -> Tensor {
    let mut g = Generator::new(seed);
    let n = shape.iter().product();
    let values = (0..n).map(|_| g.normal() as f32).collect();
    Tensor::from_vec(values, shape).unwrap()
}

fn read(t: &Tensor) -> Vec<f32> {
    t.detach().to_vec::<f32>().unwrap()
}

/// `sum(out * dy)`, whose gradient with respect to `out` is `dy`.
fn weighted_sum(out: &Tensor, dy: &Tensor) -> Tensor {
    out.mul(dy).unwrap().sum_all().unwrap()
}

#[test]
fn static_estimation_copies_the_observed_parameters() {
    let fq = LearnableFakeQuantize::activation().unwrap();
    let x = randn(&[4, 6], 1);
    fq.call(x.clone()).unwrap();
    let (lo, hi) = fq.activation_post_process.range().unwrap().unwrap();
    let expected = tessera_tensor::op::quant::affine_qparams(lo, hi, (0, 255));
    assert_eq!(read(&fq.scale), [expected.scale]);
    assert_eq!(read(&fq.zero_point), [expected.zero_point as f32]);
    assert!(!fq.scale.requires_grad());
}

#[test]
fn forward_and_backward_are_the_learnable_op_with_lsq_gradient_scaling() {
    let fq = LearnableFakeQuantize::activation()
        .unwrap()
        .with_grad_scaling(true);
    fq.call(randn(&[3, 8], 2)).unwrap();
    fq.enable_param_learning().unwrap();
    assert!(fq.scale.requires_grad() && fq.zero_point.requires_grad());
    // A wider input than the observed one, so that some values clamp.
    let x = randn(&[3, 8], 3).mul_scalar(1.5).unwrap();
    let dy = randn(&[3, 8], 4);
    let x_leaf = x.detach().requires_grad_(true).unwrap();
    let out = fq.call(x_leaf.clone()).unwrap();
    weighted_sum(&out, &dy).backward().unwrap();

    let scale = fq.scale.detach().requires_grad_(true).unwrap();
    let zero_point = fq.zero_point.detach().requires_grad_(true).unwrap();
    let x_ref = x.detach().requires_grad_(true).unwrap();
    let grad_factor = 1.0 / (24.0f64 * 255.0).sqrt();
    let want =
        fake_quantize_learnable_per_tensor_affine(&x_ref, &scale, &zero_point, 0, 255, grad_factor)
            .unwrap();
    weighted_sum(&want, &dy).backward().unwrap();
    assert_eq!(read(&out), read(&want));
    for (got, want) in [
        (&x_leaf, &x_ref),
        (fq.scale.tensor(), &scale),
        (fq.zero_point.tensor(), &zero_point),
    ] {
        assert_eq!(read(&got.grad().unwrap()), read(&want.grad().unwrap()));
    }
}

#[test]
fn per_channel_weights_are_symmetric_with_one_scale_per_channel() {
    let fq = LearnableFakeQuantize::weight_per_channel(0, 3, (-4, 3)).unwrap();
    let w = randn(&[3, 5], 5);
    let out = fq.call(w.clone()).unwrap();
    let ranges = fq.activation_post_process.ranges().unwrap().unwrap();
    let scales: Vec<f32> = ranges
        .iter()
        .map(|&(lo, hi)| tessera_tensor::op::quant::symmetric_qparams(lo, hi, (-4, 3)).scale)
        .collect();
    assert_eq!(read(&fq.scale), scales);
    assert_eq!(read(&fq.zero_point), [0.0; 3]);
    let want = fake_quantize_learnable_per_channel_affine(
        &w,
        &fq.scale.detach(),
        &fq.zero_point.detach(),
        0,
        -4,
        3,
        1.0,
    )
    .unwrap();
    assert_eq!(read(&out), read(&want));
    // Eight levels per channel at most.
    let values = read(&out);
    for (channel, scale) in values.chunks(5).zip(&scales) {
        let levels: std::collections::BTreeSet<i64> =
            channel.iter().map(|v| (v / scale).round() as i64).collect();
        assert!(levels.iter().all(|q| (-4..=3).contains(q)), "{levels:?}");
    }
}

/// At 3 bits the min/max scale of Gaussian values is too coarse (clipping the tails rounds the
/// rest better), so learning shrinks it.
#[test]
fn training_moves_the_scale_toward_less_rounding_error() {
    let fq = LearnableFakeQuantize::weight_per_channel(0, 1, (-4, 3))
        .unwrap()
        .with_grad_scaling(true);
    let x = randn(&[1, 256], 6);
    fq.call(x.clone()).unwrap();
    fq.enable_param_learning().unwrap();
    let initial = read(&fq.scale)[0];
    let mut optimizer = Adam::new(
        vec![fq.scale.tensor().clone(), fq.zero_point.tensor().clone()],
        AdamOptions {
            lr: 1e-3,
            ..Default::default()
        },
    )
    .unwrap();
    let error = |fq: &LearnableFakeQuantize| {
        let diff = fq.call(x.clone()).unwrap().sub(&x).unwrap();
        diff.mul(&diff).unwrap().sum_all().unwrap()
    };
    let first = error(&fq).item::<f64>().unwrap();
    for _ in 0..50 {
        let loss = error(&fq);
        optimizer.zero_grad(true);
        loss.backward().unwrap();
        optimizer.step().unwrap();
    }
    assert!(
        read(&fq.scale)[0] < initial,
        "{initial} -> {:?}",
        read(&fq.scale)
    );
    // The observer is frozen: training, not observation, moved the scale.
    assert!(fq.activation_post_process.range().unwrap().is_some());
    let last = error(&fq).item::<f64>().unwrap();
    assert!(last < first, "squared rounding error {first} -> {last}");
}

#[test]
fn calculate_qparams_rounds_and_clamps_the_zero_point_and_floors_the_scale() {
    let fq = LearnableFakeQuantize::activation().unwrap();
    fq.call(randn(&[8], 7)).unwrap();
    for (zero_point, rounded) in [(2.5f32, 3i64), (-3.0, 0), (300.0, 255), (7.4, 7)] {
        fq.zero_point
            .set_data(&Tensor::from_vec(vec![zero_point], &[1]).unwrap());
        fq.scale
            .set_data(&Tensor::from_vec(vec![-1.0f32], &[1]).unwrap());
        let (scale, zp) = fq.calculate_qparams().unwrap();
        assert_eq!(zp.to_vec::<i64>().unwrap(), [rounded]);
        assert_eq!(read(&scale), [f32::EPSILON]);
    }
}

#[test]
fn state_dict_keys_are_pytorchs() {
    let fq = LearnableFakeQuantize::activation().unwrap();
    let keys: Vec<String> = fq.state_dict().unwrap().entries.into_keys().collect();
    assert_eq!(
        keys,
        [
            "scale",
            "zero_point",
            "fake_quant_enabled",
            "static_enabled",
            "learning_enabled",
            "eps",
            "activation_post_process.min_val",
            "activation_post_process.max_val",
        ]
    );
    assert_eq!(fq.parameters().len(), 2);
}

#[test]
fn enabling_learning_before_any_observation_is_an_error_naming_the_quantizer() {
    let model = Sequential::new().add(LearnableFakeQuantize::activation().unwrap());
    let err = enable_param_learning(&model).unwrap_err().to_string();
    assert!(err.contains("`0`") && err.contains("calibration"), "{err}");
    model.call(randn(&[4], 8)).unwrap();
    enable_param_learning(&model).unwrap();
}
