//! Issue 14's activations (relu6, hardswish, hardsigmoid, elu, softplus, mish) and losses
//! (binary_cross_entropy, smooth_l1, huber, kl_div, margin_ranking) and cosine_similarity:
//! gradients against finite differences in f64, and values at the points the definitions pin
//! down (kinks, thresholds, zero targets).

use crate::common;

use common::{UnaryMethod, check, check_unary_methods, tensor};
use tessera_tensor::functional::{
    KlDivReduction, Reduction, binary_cross_entropy, cosine_similarity, huber_loss, kl_div,
    margin_ranking_loss, smooth_l1_loss,
};
use tessera_tensor::{DType, Result, Tensor};

/// An f64 leaf of `values`.
fn leaf_of(values: &[f64]) -> Tensor {
    tensor(values, &[values.len()], DType::F64)
        .unwrap()
        .requires_grad_(true)
        .unwrap()
}

/// Values on every piece of the activations, none within a step of a kink (-3, 0, 2.5, 3, 6).
fn spread() -> Tensor {
    leaf_of(&[
        -25.0, -7.5, -3.4, -2.6, -1.2, -0.3, 0.4, 1.7, 2.3, 2.7, 3.3, 5.5, 6.6, 12.0, 25.0,
    ])
}

#[test]
fn new_activations_match_finite_differences_on_every_piece() {
    let x = spread();
    let methods: Vec<UnaryMethod> = vec![
        ("relu6", Tensor::relu6),
        ("hardswish", Tensor::hardswish),
        ("hardsigmoid", Tensor::hardsigmoid),
        ("mish", Tensor::mish),
    ];
    check_unary_methods(&x, &methods);
    check(|i| i[0].elu(0.5), std::slice::from_ref(&x));
    check(|i| i[0].softplus(1.0, 20.0), std::slice::from_ref(&x));
    check(|i| i[0].softplus(2.0, 5.0), std::slice::from_ref(&x));
}

fn values(t: &Tensor) -> Vec<f64> {
    t.to_vec_f64().unwrap()
}

/// The gradient of `f(x).sum()` at `points`.
fn grad_at(points: &[f64], f: impl Fn(&Tensor) -> Result<Tensor>) -> Vec<f64> {
    let x = leaf_of(points);
    f(&x).unwrap().sum_all().unwrap().backward().unwrap();
    values(&x.grad().unwrap())
}

#[test]
fn activation_subgradients_at_the_kinks_are_pytorchs() {
    let kinks = [-3.0, 0.0, 3.0, 6.0];
    assert_eq!(grad_at(&kinks, Tensor::relu6), [0.0, 0.0, 1.0, 0.0]);
    assert_eq!(
        grad_at(&kinks, Tensor::hardsigmoid),
        [0.0, 1.0 / 6.0, 0.0, 0.0]
    );
    assert_eq!(grad_at(&kinks, Tensor::hardswish), [0.0, 0.5, 1.0, 1.0]);
    assert_eq!(grad_at(&[0.0], |x| x.elu(0.5)), [0.5]);
}

#[test]
fn softplus_is_linear_only_strictly_above_the_threshold() {
    let x = tensor(&[2.5, 2.6], &[2], DType::F64).unwrap();
    let y = values(&x.softplus(2.0, 5.0).unwrap());
    assert!(
        (y[0] - (1.0 + 5f64.exp()).ln() / 2.0).abs() < 1e-12,
        "{y:?}"
    );
    assert_eq!(y[1], 2.6);
}

#[test]
fn relu6_keeps_nan() {
    let x = tensor(&[f64::NAN], &[1], DType::F32).unwrap();
    assert!(values(&x.relu6().unwrap())[0].is_nan());
}

#[test]
fn losses_match_finite_differences() {
    let x = leaf_of(&[0.2, -1.7, 0.9, 3.1, -0.4, 0.05]);
    let t = leaf_of(&[0.5, 0.3, -0.2, 0.4, 1.9, 0.0]);
    check(
        |i| smooth_l1_loss(&i[0], &i[1], Reduction::Mean, 1.0),
        &[x.clone(), t.clone()],
    );
    check(
        |i| smooth_l1_loss(&i[0], &i[1], Reduction::Sum, 0.5),
        &[x.clone(), t.clone()],
    );
    check(
        |i| huber_loss(&i[0], &i[1], Reduction::Mean, 0.5),
        &[x.clone(), t.clone()],
    );
    let y = tensor(&[1.0, -1.0, 1.0, -1.0, 1.0, -1.0], &[6], DType::F64).unwrap();
    check(
        |i| margin_ranking_loss(&i[0], &i[1], &y, 0.3, Reduction::Mean),
        &[x.clone(), t.clone()],
    );
    let log_p = leaf_of(&[-0.5, -1.2, -2.0, -0.1]);
    let q = leaf_of(&[0.3, 0.2, 0.4, 0.1]);
    check(
        |i| kl_div(&i[0], &i[1], KlDivReduction::BatchMean, false),
        &[log_p.clone(), q.clone()],
    );
    check(
        |i| kl_div(&i[0], &i[1], KlDivReduction::Sum, true),
        &[log_p, q.clone()],
    );
    let p = leaf_of(&[0.2, 0.7, 0.45, 0.9]);
    check(
        |i| binary_cross_entropy(&i[0], &i[1], Reduction::Mean),
        &[p, q],
    );
}

#[test]
fn kl_div_of_a_zero_target_is_zero_with_zero_gradient() {
    // From the definition: 0 * (log 0 - x) = 0 (xlogy), so neither value nor gradient is NaN.
    let x = leaf_of(&[-1.0, -0.5]);
    let t = tensor(&[0.0, 0.5], &[2], DType::F64).unwrap();
    let each = kl_div(&x, &t, KlDivReduction::None, false).unwrap();
    let v = values(&each);
    assert_eq!(v[0], 0.0);
    assert!((v[1] - 0.5 * (0.5f64.ln() + 0.5)).abs() < 1e-12);
    each.sum_all().unwrap().backward().unwrap();
    assert_eq!(values(&x.grad().unwrap()), [0.0, -0.5]);
}

#[test]
fn binary_cross_entropy_floors_its_logs_and_its_gradient_denominator() {
    // PyTorch: each log is at least -100, and the gradient divides by max(p(1-p), 1e-12).
    let p = leaf_of(&[0.0, 1.0, 0.0]);
    let t = tensor(&[1.0, 0.0, 0.0], &[3], DType::F64).unwrap();
    let each = binary_cross_entropy(&p, &t, Reduction::None).unwrap();
    assert_eq!(values(&each), [100.0, 100.0, 0.0]);
    each.sum_all().unwrap().backward().unwrap();
    assert_eq!(values(&p.grad().unwrap()), [-1e12, 1e12, 0.0]);
}

#[test]
fn margin_ranking_loss_is_the_hinge_of_the_signed_difference() {
    // max(0, -y * (x1 - x2) + margin) with margin 0.5.
    let x1 = tensor(&[1.0, 1.0, 0.0], &[3], DType::F64).unwrap();
    let x2 = tensor(&[0.0, 0.0, 0.2], &[3], DType::F64).unwrap();
    let y = tensor(&[1.0, -1.0, 1.0], &[3], DType::F64).unwrap();
    let each = margin_ranking_loss(&x1, &x2, &y, 0.5, Reduction::None).unwrap();
    let v = values(&each);
    assert_eq!(v, [0.0, 1.5, 0.7]);
}

#[test]
fn cosine_similarity_matches_its_definition_and_finite_differences() {
    let a = tensor(&[1.0, 0.0, 3.0, 4.0], &[2, 2], DType::F64).unwrap();
    let b = tensor(&[0.0, 2.0, 6.0, 8.0], &[2, 2], DType::F64).unwrap();
    let v = values(&cosine_similarity(&a, &b, 1, 1e-8).unwrap());
    assert!(v[0].abs() < 1e-12 && (v[1] - 1.0).abs() < 1e-12, "{v:?}");
    // A zero vector is divided by eps, not by 0.
    let zero = tensor(&[0.0, 0.0], &[1, 2], DType::F64).unwrap();
    assert_eq!(
        values(&cosine_similarity(&zero, &b.narrow(0, 0, 1).unwrap(), -1, 1e-8).unwrap()),
        [0.0]
    );
    let x = tensor(&[0.3, -1.2, 0.8, 2.0, 0.1, -0.7], &[2, 3], DType::F64)
        .unwrap()
        .requires_grad_(true)
        .unwrap();
    let y = leaf_of(&[1.1, 0.4, -0.6]);
    check(|i| cosine_similarity(&i[0], &i[1], -1, 1e-8), &[x, y]);
}
