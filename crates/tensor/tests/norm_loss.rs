//! Normalisation, dropout, embedding and loss functions: gradients by gradcheck, values by
//! hand and against the PyTorch conformance cases.

use crate::common;

use common::{Case, assert_close, check, leaf, tensor};
use tessera_tensor::functional::{
    CrossEntropyOptions, Reduction, batch_norm, binary_cross_entropy_with_logits, cross_entropy,
    dropout, embedding, group_norm, instance_norm, l1_loss, layer_norm, mse_loss, nll_loss,
    rms_norm,
};
use tessera_tensor::op::{NormOp, Op};
use tessera_tensor::{DType, Result, Tensor, TensorError};

const REDUCTIONS: [Reduction; 3] = [Reduction::None, Reduction::Mean, Reduction::Sum];

fn constant(shape: &[usize], seed: u64) -> Tensor {
    leaf(shape, seed).detach()
}

fn positive(shape: &[usize], seed: u64) -> Tensor {
    constant(shape, seed)
        .abs()
        .unwrap()
        .add_scalar(0.5)
        .unwrap()
}

fn classes(values: &[i64], shape: &[usize]) -> Tensor {
    Tensor::from_vec(values.to_vec(), shape).unwrap()
}

// ----- batch norm -----

/// Affine batch norm with running statistics and PyTorch's default momentum (0.1) and eps
/// (1e-5).
fn affine_batch_norm(
    x: &Tensor,
    running_mean: &Tensor,
    running_var: &Tensor,
    weight: &Tensor,
    bias: &Tensor,
    training: bool,
) -> Result<Tensor> {
    batch_norm(
        x,
        Some(running_mean),
        Some(running_var),
        Some(weight),
        Some(bias),
        training,
        0.1,
        1e-5,
    )
}

#[test]
fn batch_norm_train_gradcheck_affine() {
    for shape in [vec![5, 3], vec![4, 3, 5], vec![2, 3, 2, 3]] {
        let (x, w, b) = (leaf(&shape, 1), leaf(&[3], 2), leaf(&[3], 3));
        let (rm, rv) = (
            Tensor::zeros(&[3], DType::F64).unwrap(),
            Tensor::ones(&[3], DType::F64).unwrap(),
        );
        check(
            |t| affine_batch_norm(&t[0], &rm, &rv, &t[1], &t[2], true),
            &[x, w, b],
        );
    }
}

#[test]
fn batch_norm_train_gradcheck_without_affine_or_running_stats() {
    check(
        |t| batch_norm(&t[0], None, None, None, None, true, 0.1, 1e-5),
        &[leaf(&[3, 4, 5], 4)],
    );
}

#[test]
fn batch_norm_eval_gradcheck_affine_and_plain() {
    let (rm, rv) = (constant(&[3], 5), positive(&[3], 6));
    let (x, w, b) = (leaf(&[4, 3, 2, 2], 7), leaf(&[3], 8), leaf(&[3], 9));
    check(
        |t| affine_batch_norm(&t[0], &rm, &rv, &t[1], &t[2], false),
        &[x.clone(), w, b],
    );
    check(
        |t| batch_norm(&t[0], Some(&rm), Some(&rv), None, None, false, 0.1, 1e-5),
        &[x],
    );
}

#[test]
fn batch_norm_train_updates_running_stats_in_place_with_unbiased_variance() -> Result<()> {
    // Channel 0 holds 1, 3 (mean 2, biased var 1, unbiased 2); channel 1 holds 5, 7.
    let x = tensor(&[1.0, 5.0, 3.0, 7.0], &[2, 2], DType::F32)?;
    let rm = Tensor::zeros(&[2], DType::F32)?;
    let rv = Tensor::ones(&[2], DType::F32)?;
    let holder = rm.clone();
    let y = batch_norm(&x, Some(&rm), Some(&rv), None, None, true, 0.1, 0.0)?;
    assert_eq!(y.to_vec::<f32>()?, vec![-1.0, -1.0, 1.0, 1.0]);
    assert_close(
        &holder,
        &tensor(&[0.2, 0.6], &[2], DType::F32)?,
        1e-6,
        1e-7,
        "running_mean",
    );
    assert_close(
        &rv,
        &tensor(&[1.1, 1.1], &[2], DType::F32)?,
        1e-6,
        1e-7,
        "running_var",
    );
    Ok(())
}

#[test]
fn batch_norm_running_stats_do_not_enter_the_graph() -> Result<()> {
    let x = leaf(&[4, 3], 10);
    let (rm, rv) = (
        Tensor::zeros(&[3], DType::F64)?,
        Tensor::ones(&[3], DType::F64)?,
    );
    let y = batch_norm(&x, Some(&rm), Some(&rv), None, None, true, 0.1, 1e-5)?;
    // A second forward updates the buffers again; the first graph must still run backward.
    batch_norm(&x, Some(&rm), Some(&rv), None, None, true, 0.1, 1e-5)?;
    y.sum_all()?.backward()?;
    assert!(!rm.requires_grad() && rm.grad_fn_name().is_none());
    Ok(())
}

#[test]
fn batch_norm_eval_without_running_stats_is_an_error() {
    let x = leaf(&[4, 3], 11);
    let err = batch_norm(&x, None, None, None, None, false, 0.1, 1e-5).unwrap_err();
    assert!(err.to_string().contains("batch_norm"), "{err}");
}

#[test]
fn batch_norm_wrong_weight_shape_names_op_and_shapes() {
    let x = leaf(&[4, 3], 12);
    let w = leaf(&[4], 13);
    let err = batch_norm(&x, None, None, Some(&w), None, true, 0.1, 1e-5).unwrap_err();
    assert!(
        matches!(&err, TensorError::ShapeMismatch { op, .. } if op == "batch_norm"),
        "{err}"
    );
}

#[test]
fn batch_norm_train_with_one_value_per_channel_is_an_error() {
    let err = batch_norm(&leaf(&[1, 3], 14), None, None, None, None, true, 0.1, 1e-5).unwrap_err();
    assert!(
        err.to_string().contains("more than 1 value per channel"),
        "{err}"
    );
}

// ----- layer norm and group norm -----

#[test]
fn layer_norm_gradcheck_affine_and_plain() {
    let (x, w, b) = (leaf(&[2, 3, 4], 20), leaf(&[3, 4], 21), leaf(&[3, 4], 22));
    check(
        |t| layer_norm(&t[0], &[3, 4], Some(&t[1]), Some(&t[2]), 1e-5),
        &[x.clone(), w, b],
    );
    check(|t| layer_norm(&t[0], &[4], None, None, 1e-5), &[x]);
}

#[test]
fn layer_norm_rows_have_zero_mean_and_unit_variance() -> Result<()> {
    let x = tensor(
        &[1.0, 2.0, 3.0, 4.0, -2.0, 0.0, 2.0, 4.0],
        &[2, 4],
        DType::F32,
    )?;
    let y = layer_norm(&x, &[4], None, None, 0.0)?;
    assert_close(
        &y.mean(&[1], false)?,
        &Tensor::zeros(&[2], DType::F32)?,
        0.0,
        1e-6,
        "mean",
    );
    assert_close(
        &y.var(&[1], false, false)?,
        &Tensor::ones(&[2], DType::F32)?,
        1e-5,
        1e-6,
        "var",
    );
    Ok(())
}

#[test]
fn layer_norm_shape_not_a_suffix_is_an_error() {
    let err = layer_norm(&leaf(&[2, 3], 23), &[2], None, None, 1e-5).unwrap_err();
    assert!(
        matches!(&err, TensorError::ShapeMismatch { op, .. } if op == "layer_norm"),
        "{err}"
    );
}

#[test]
fn group_norm_gradcheck_affine_and_plain() {
    let (x, w, b) = (leaf(&[2, 4, 3], 30), leaf(&[4], 31), leaf(&[4], 32));
    check(
        |t| group_norm(&t[0], 2, Some(&t[1]), Some(&t[2]), 1e-5),
        &[x.clone(), w, b],
    );
    check(
        |t| group_norm(&t[0], 4, None, None, 1e-5),
        &[leaf(&[2, 4, 2, 2], 33)],
    );
    check(|t| group_norm(&t[0], 1, None, None, 1e-5), &[x]);
}

#[test]
fn group_norm_matches_layer_norm_with_one_group() -> Result<()> {
    let x = constant(&[2, 4, 3], 34);
    let grouped = group_norm(&x, 1, None, None, 1e-5)?;
    assert_close(
        &grouped,
        &layer_norm(&x, &[4, 3], None, None, 1e-5)?,
        1e-12,
        1e-12,
        "group_norm",
    );
    Ok(())
}

#[test]
fn group_norm_channels_not_divisible_is_an_error() {
    let err = group_norm(&leaf(&[2, 4, 3], 35), 3, None, None, 1e-5).unwrap_err();
    assert!(
        err.to_string().contains("group_norm") && err.to_string().contains("[2, 4, 3]"),
        "{err}"
    );
}

// ----- instance norm and RMS norm -----

#[test]
fn instance_norm_gradcheck_affine_and_plain() {
    let (x, w, b) = (leaf(&[2, 3, 4], 50), leaf(&[3], 51), leaf(&[3], 52));
    check(
        |t| instance_norm(&t[0], None, None, Some(&t[1]), Some(&t[2]), true, 0.1, 1e-5),
        &[x.clone(), w, b],
    );
    check(
        |t| instance_norm(&t[0], None, None, None, None, true, 0.1, 1e-5),
        &[leaf(&[2, 3, 2, 3], 53)],
    );
}

#[test]
fn instance_norm_equals_group_norm_with_one_channel_per_group() -> Result<()> {
    let x = constant(&[2, 3, 5], 54);
    assert_close(
        &instance_norm(&x, None, None, None, None, true, 0.1, 1e-5)?,
        &group_norm(&x, 3, None, None, 1e-5)?,
        1e-12,
        1e-12,
        "instance_norm",
    );
    Ok(())
}

#[test]
fn instance_norm_running_stats_take_the_batch_mean_of_unbiased_instance_statistics() -> Result<()> {
    // Sample 0 channel 0 is [0, 2] (mean 1, unbiased var 2), sample 1 is [4, 4] (mean 4, var 0).
    let x = tensor(&[0.0, 2.0, 4.0, 4.0], &[2, 1, 2], DType::F64)?;
    let (mean, var) = (
        Tensor::zeros(&[1], DType::F64)?,
        Tensor::ones(&[1], DType::F64)?,
    );
    instance_norm(&x, Some(&mean), Some(&var), None, None, true, 0.1, 1e-5)?;
    assert_close(
        &mean,
        &tensor(&[0.25], &[1], DType::F64)?,
        0.0,
        1e-12,
        "mean",
    );
    assert_close(
        &var,
        &tensor(&[0.9 + 0.1], &[1], DType::F64)?,
        0.0,
        1e-12,
        "var",
    );
    Ok(())
}

#[test]
fn instance_norm_one_spatial_element_in_training_is_an_error() {
    let err = instance_norm(
        &leaf(&[2, 3, 1], 55),
        None,
        None,
        None,
        None,
        true,
        0.1,
        1e-5,
    )
    .unwrap_err();
    assert!(
        err.to_string().contains("instance_norm") && err.to_string().contains("[2, 3, 1]"),
        "{err}"
    );
}

#[test]
fn rms_norm_gradcheck_with_and_without_weight() {
    let (x, w) = (leaf(&[2, 3, 4], 60), leaf(&[3, 4], 61));
    check(
        |t| rms_norm(&t[0], &[3, 4], Some(&t[1]), Some(1e-5)),
        &[x.clone(), w],
    );
    check(|t| rms_norm(&t[0], &[4], None, None), &[x]);
}

#[test]
fn rms_norm_divides_by_the_root_mean_square_with_machine_epsilon_by_default() -> Result<()> {
    let x = tensor(&[3.0, 4.0], &[1, 2], DType::F32)?;
    let y = rms_norm(&x, &[2], None, None)?;
    // mean(x^2) = 12.5, and eps is f32's machine epsilon.
    let rms = (12.5f64 + f32::EPSILON as f64).sqrt();
    assert_close(
        &y,
        &tensor(&[3.0 / rms, 4.0 / rms], &[1, 2], DType::F32)?,
        0.0,
        1e-7,
        "rms",
    );
    Ok(())
}

// ----- dropout -----

#[test]
fn dropout_backward_multiplies_by_the_scaled_mask() -> Result<()> {
    let x = leaf(&[8, 16], 40);
    let y = dropout(&x, 0.25, true)?;
    y.sum_all()?.backward()?;
    let kept: Vec<bool> = y.to_vec::<f64>()?.iter().map(|&v| v != 0.0).collect();
    assert!(kept.iter().any(|&k| k) && kept.iter().any(|&k| !k));
    let expected: Vec<f64> = kept
        .iter()
        .map(|&k| if k { 1.0 / 0.75 } else { 0.0 })
        .collect();
    assert_eq!(x.grad().unwrap().to_vec::<f64>()?, expected);
    let scaled: Vec<f64> = x
        .to_vec::<f64>()?
        .iter()
        .zip(&expected)
        .map(|(v, m)| v * m)
        .collect();
    assert_eq!(y.to_vec::<f64>()?, scaled);

    // Seed reproducibility of the mask is checked in tests/global_seed.rs, alone in its
    // process: tests here run in parallel and draw from the same global generator.
    Ok(())
}

#[test]
fn dropout_probability_outside_unit_interval_is_an_error() {
    for p in [-0.1, 1.5, f64::NAN] {
        let err = dropout(&leaf(&[3], 41), p, true).unwrap_err();
        assert!(err.to_string().contains("dropout"), "{err}");
    }
}

#[test]
fn dropout_conformance_mode_semantics() -> Result<()> {
    let case = Case::load("g_dropout");
    let x = case.io("input");
    assert_eq!(
        dropout(&x, 0.5, false)?.to_vec::<f32>()?,
        case.io("output_eval").to_vec::<f32>()?
    );
    let xs = x.to_vec::<f32>()?;
    for output in [dropout(&x, 0.5, true)?, case.io("example_output_train_p05")] {
        for (y, v) in output.to_vec::<f32>()?.iter().zip(&xs) {
            assert!(*y == 0.0 || *y == 2.0 * v, "{y} is neither 0 nor 2 * {v}");
        }
    }
    assert_eq!(dropout(&x, 0.0, true)?.to_vec::<f32>()?, xs);
    assert!(
        dropout(&x, 1.0, true)?
            .to_vec::<f32>()?
            .iter()
            .all(|&v| v == 0.0)
    );
    Ok(())
}

// ----- embedding -----

#[test]
fn embedding_weight_gradcheck_with_repeated_indices() {
    let indices = classes(&[0, 2, 2, 4, 1, 0], &[2, 3]);
    check(|t| embedding(&indices, &t[0], None), &[leaf(&[5, 3], 50)]);
    let i32_indices = indices.to_dtype(DType::I32).unwrap();
    check(
        |t| embedding(&i32_indices, &t[0], Some(3)),
        &[leaf(&[5, 3], 51)],
    );
}

#[test]
fn embedding_gathers_rows_and_skips_padding_gradient() -> Result<()> {
    let weight = leaf(&[4, 2], 52);
    let indices = classes(&[3, 1, 3], &[3]);
    let out = embedding(&indices, &weight, Some(-1))?;
    assert_eq!(out.shape(), vec![3, 2]);
    let w = weight.to_vec::<f64>()?;
    assert_eq!(
        out.to_vec::<f64>()?,
        vec![w[6], w[7], w[2], w[3], w[6], w[7]]
    );
    out.sum_all()?.backward()?;
    assert_eq!(
        weight.grad().unwrap().to_vec::<f64>()?,
        vec![0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0]
    );
    Ok(())
}

#[test]
fn embedding_out_of_range_index_names_op_index_and_size() {
    let err = embedding(&classes(&[0, 7], &[2]), &leaf(&[5, 3], 53), None).unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("embedding") && text.contains('7') && text.contains('5'),
        "{text}"
    );
}

// ----- elementwise losses -----

#[test]
fn mse_and_l1_gradcheck_input_and_target_for_every_reduction() {
    for reduction in REDUCTIONS {
        let (x, y) = (leaf(&[3, 4], 60), leaf(&[3, 4], 61));
        check(
            |t| mse_loss(&t[0], &t[1], reduction),
            &[x.clone(), y.clone()],
        );
        check(|t| l1_loss(&t[0], &t[1], reduction), &[x, y]);
    }
}

#[test]
fn mse_and_l1_values() -> Result<()> {
    let x = tensor(&[1.0, 2.0, 3.0], &[3], DType::F32)?;
    let y = tensor(&[0.0, 4.0, 3.0], &[3], DType::F32)?;
    assert_eq!(mse_loss(&x, &y, Reduction::Sum)?.item::<f32>()?, 5.0);
    assert_eq!(
        mse_loss(&x, &y, Reduction::None)?.to_vec::<f32>()?,
        vec![1.0, 4.0, 0.0]
    );
    assert_eq!(l1_loss(&x, &y, Reduction::Mean)?.item::<f32>()?, 1.0);
    Ok(())
}

#[test]
fn mse_shape_mismatch_names_op_and_shapes() {
    let err = mse_loss(&leaf(&[3], 62), &leaf(&[4], 63), Reduction::Mean).unwrap_err();
    assert!(
        matches!(&err, TensorError::ShapeMismatch { op, .. } if op == "mse_loss"),
        "{err}"
    );
}

#[test]
fn bce_with_logits_gradcheck_with_and_without_pos_weight() {
    for reduction in REDUCTIONS {
        let (x, y, pw) = (
            leaf(&[3, 4], 70),
            leaf(&[3, 4], 71),
            positive(&[4], 72).requires_grad_(true).unwrap(),
        );
        check(
            |t| binary_cross_entropy_with_logits(&t[0], &t[1], None, reduction),
            &[x.clone(), y.clone()],
        );
        check(
            |t| binary_cross_entropy_with_logits(&t[0], &t[1], Some(&t[2]), reduction),
            &[x, y, pw],
        );
    }
}

#[test]
fn bce_with_logits_is_stable_and_matches_the_naive_formula() -> Result<()> {
    let x = tensor(&[-2.0, 0.5, 3.0, 1000.0, -1000.0], &[5], DType::F64)?;
    let y = tensor(&[0.0, 1.0, 0.3, 1.0, 0.0], &[5], DType::F64)?;
    let pw = tensor(&[2.0], &[1], DType::F64)?;
    let losses =
        binary_cross_entropy_with_logits(&x, &y, Some(&pw), Reduction::None)?.to_vec::<f64>()?;
    for (i, (&xi, &yi)) in [-2.0f64, 0.5, 3.0].iter().zip(&[0.0, 1.0, 0.3]).enumerate() {
        let s = 1.0 / (1.0 + (-xi).exp());
        let naive = -(2.0 * yi * s.ln() + (1.0 - yi) * (1.0 - s).ln());
        assert!(
            (losses[i] - naive).abs() < 1e-12,
            "{} vs {naive}",
            losses[i]
        );
    }
    assert!(
        losses[3].abs() < 1e-12 && losses[4].abs() < 1e-12,
        "{losses:?}"
    );
    Ok(())
}

// ----- cross entropy and nll -----

#[test]
fn cross_entropy_gradcheck_every_reduction_smoothing_and_ignore_index() {
    let target2 = classes(&[1, 0, 3, -100, 2], &[5]);
    let target3 = classes(&[1, 0, 3, 2, 7, 2], &[2, 3]);
    for reduction in REDUCTIONS {
        for label_smoothing in [0.0, 0.2] {
            let options = CrossEntropyOptions {
                reduction,
                label_smoothing,
                ..Default::default()
            };
            check(
                |t| cross_entropy(&t[0], &target2, options),
                &[leaf(&[5, 4], 80)],
            );
            let ignore_seven = CrossEntropyOptions {
                ignore_index: 7,
                ..options
            };
            check(
                |t| cross_entropy(&t[0], &target3, ignore_seven),
                &[leaf(&[2, 4, 3], 81)],
            );
            check(|t| nll_loss(&t[0], &target2, options), &[leaf(&[5, 4], 82)]);
        }
    }
}

#[test]
fn cross_entropy_mean_counts_only_non_ignored_samples() -> Result<()> {
    let logits = constant(&[3, 4], 83);
    let target = classes(&[2, -100, 1], &[3]);
    let loss = cross_entropy(&logits, &target, CrossEntropyOptions::default())?.item::<f64>()?;
    let lp = logits.log_softmax(1)?.to_vec::<f64>()?;
    assert!((loss - -(lp[2] + lp[8 + 1]) / 2.0).abs() < 1e-12);
    Ok(())
}

#[test]
fn cross_entropy_label_smoothing_mixes_in_the_uniform_distribution() -> Result<()> {
    let logits = constant(&[2, 3], 84);
    let target = classes(&[2, 0], &[2]);
    let options = CrossEntropyOptions {
        label_smoothing: 0.3,
        reduction: Reduction::Sum,
        ..Default::default()
    };
    let loss = cross_entropy(&logits, &target, options)?.item::<f64>()?;
    let lp = logits.log_softmax(1)?.to_vec::<f64>()?;
    let expected: f64 = [(0, 2), (1, 0)]
        .iter()
        .map(|&(n, t)| -0.7 * lp[n * 3 + t] - 0.1 * (0..3).map(|c| lp[n * 3 + c]).sum::<f64>())
        .sum();
    assert!((loss - expected).abs() < 1e-12, "{loss} vs {expected}");
    Ok(())
}

#[test]
fn cross_entropy_target_out_of_bounds_is_an_error() {
    let err = cross_entropy(
        &leaf(&[2, 3], 85),
        &classes(&[0, 3], &[2]),
        CrossEntropyOptions::default(),
    )
    .unwrap_err();
    assert!(
        err.to_string().contains("nll_loss") && err.to_string().contains("target 3"),
        "{err}"
    );
}

#[test]
fn cross_entropy_of_an_unbatched_input() -> Result<()> {
    let logits = constant(&[4], 86);
    let loss = cross_entropy(
        &logits,
        &Tensor::scalar(2i64),
        CrossEntropyOptions::default(),
    )?;
    let lp = logits.log_softmax(0)?.to_vec::<f64>()?;
    assert!((loss.item::<f64>()? + lp[2]).abs() < 1e-12);
    Ok(())
}

// ----- conformance: the small CNN's batch norms and loss -----

fn affine(case: &Case, layer: &str) -> (Tensor, Tensor) {
    (
        case.weight(&format!("{layer}.weight")),
        case.weight(&format!("{layer}.bias")),
    )
}

/// `bn2 -> relu -> global average pool -> fc -> cross_entropy` from a leaf `act/conv2`, with
/// bn2's weight and bias as leaves, checked against PyTorch forward and backward: the gradients
/// of bn2's weight and bias, and conv2's bias gradient, which is the sum of the gradient at
/// conv2's output.
fn check_cnn_tail(case: &Case, training: bool) -> Result<()> {
    // d_cnn_train stores activations in f64; the model runs in f32.
    let x = case
        .io("act/conv2")
        .to_dtype(DType::F32)?
        .requires_grad_(true)?;
    let (w, b) = affine(case, "bn2");
    let (w, b) = (w.requires_grad_(true)?, b.requires_grad_(true)?);
    let (rm, rv) = (
        case.weight("bn2.running_mean"),
        case.weight("bn2.running_var"),
    );
    let bn = affine_batch_norm(&x, &rm, &rv, &w, &b, training)?;
    case.check("act/bn2", &bn);
    let pooled = bn.relu()?.mean(&[2, 3], false)?;
    let output = pooled.linear(&case.weight("fc.weight"), Some(&case.weight("fc.bias")))?;
    case.check("output", &output);
    let loss = cross_entropy(&output, &case.io("target"), CrossEntropyOptions::default())?;
    case.check("loss", &loss);
    loss.backward()?;
    case.check("grad/bn2.weight", &w.grad().unwrap());
    case.check("grad/bn2.bias", &b.grad().unwrap());
    case.check(
        "grad/conv2.bias",
        &x.grad().unwrap().sum(&[0, 2, 3], false)?,
    );
    Ok(())
}

#[test]
fn cnn_eval_batch_norm_and_cross_entropy_match_pytorch() -> Result<()> {
    let case = Case::load("d_cnn_eval");
    let (w, b) = affine(&case, "bn1");
    let (rm, rv) = (
        case.weight("bn1.running_mean"),
        case.weight("bn1.running_var"),
    );
    let bn1 = affine_batch_norm(&case.io("act/conv1"), &rm, &rv, &w, &b, false)?;
    case.check("act/bn1", &bn1);
    let loss = cross_entropy(
        &case.io("output"),
        &case.io("target"),
        CrossEntropyOptions::default(),
    )?;
    case.check("loss", &loss);

    check_cnn_tail(&case, false)
}

#[test]
fn cnn_train_batch_norm_statistics_and_running_update_match_pytorch() -> Result<()> {
    let case = Case::load("d_cnn_train");
    let x = case.io("act/conv1");
    let (w, b) = affine(&case, "bn1");
    let op = Op::Norm(NormOp::BatchNorm {
        training: true,
        eps: 1e-5,
        weight: true,
        bias: true,
    });
    let outputs = op.apply(&[&x, &w, &b])?;
    case.check("batch_mean/bn1", &outputs[1]);
    case.check("batch_var_biased/bn1", &outputs[2]);

    let (rm, rv) = (
        case.weight("bn1.running_mean"),
        case.weight("bn1.running_var"),
    );
    let bn1 = affine_batch_norm(&x, &rm, &rv, &w, &b, true)?;
    case.check("act/bn1", &bn1);
    case.check("after/bn1.running_mean", &rm);
    case.check("after/bn1.running_var", &rv);

    check_cnn_tail(&case, true)
}

#[test]
fn half_inputs_normalise_in_f32_and_keep_their_dtype() -> Result<()> {
    let x = constant(&[4, 3, 2], 90);
    let (rm, rv) = (
        Tensor::zeros(&[3], DType::F32)?,
        Tensor::ones(&[3], DType::F32)?,
    );
    let half = x.to_dtype(DType::F16)?;
    let y = batch_norm(&half, Some(&rm), Some(&rv), None, None, true, 0.1, 1e-5)?;
    assert_eq!(y.dtype(), DType::F16);
    let reference = batch_norm(&x, None, None, None, None, true, 0.1, 1e-5)?;
    assert_close(&y, &reference, 1e-2, 1e-2, "batch_norm f16");
    let y = layer_norm(&half, &[2], None, None, 1e-5)?;
    assert_eq!(y.dtype(), DType::F16);
    assert_close(
        &y,
        &layer_norm(&x, &[2], None, None, 1e-5)?,
        1e-2,
        1e-2,
        "layer_norm f16",
    );
    Ok(())
}

#[test]
fn norms_of_empty_inputs_are_empty() -> Result<()> {
    let x = Tensor::zeros(&[2, 4, 0], DType::F32)?;
    assert_eq!(group_norm(&x, 2, None, None, 1e-5)?.shape(), vec![2, 4, 0]);
    assert_eq!(
        layer_norm(&x, &[0], None, None, 1e-5)?.shape(),
        vec![2, 4, 0]
    );
    Ok(())
}
