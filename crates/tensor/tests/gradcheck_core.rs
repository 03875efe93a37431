//! Every differentiable core op (elementwise, reductions, softmax, matmul, linear, views,
//! casts) checked against finite differences in f64.

use crate::common;

use common::{UnaryMethod, check, check_unary_methods, leaf};
use tessera_tensor::{DType, GradcheckOptions, Result, Tensor, gradcheck};

/// Values kept away from 0 so that log/sqrt/pow and kinks are smooth around them.
fn positive_leaf(shape: &[usize], seed: u64) -> Tensor {
    let x = leaf(shape, seed);
    let p = x.detach().abs().unwrap().add_scalar(0.5).unwrap();
    p.requires_grad_(true).unwrap()
}

/// Values at least 0.1 from zero, so that relu-like kinks are not straddled by the step.
fn away_from_zero_leaf(shape: &[usize], seed: u64) -> Tensor {
    let x = leaf(shape, seed).detach();
    let shifted = x.add(&x.sign().unwrap().mul_scalar(0.1).unwrap()).unwrap();
    shifted.requires_grad_(true).unwrap()
}

/// A named tensor method of one operand.
#[test]
fn unary_ops_match_finite_differences() {
    let x = away_from_zero_leaf(&[3, 4], 1);
    let unary: Vec<UnaryMethod> = vec![
        ("neg", Tensor::neg),
        ("abs", Tensor::abs),
        ("exp", Tensor::exp),
        ("sin", Tensor::sin),
        ("cos", Tensor::cos),
        ("tanh", Tensor::tanh),
        ("sigmoid", Tensor::sigmoid),
        ("relu", Tensor::relu),
        ("gelu", Tensor::gelu),
        ("gelu_tanh", Tensor::gelu_tanh),
        ("silu", Tensor::silu),
    ];
    check_unary_methods(&x, &unary);
    check(|i| i[0].leaky_relu(0.2), std::slice::from_ref(&x));
    let p = positive_leaf(&[3, 4], 2);
    check(|i| i[0].log(), std::slice::from_ref(&p));
    check(|i| i[0].sqrt(), std::slice::from_ref(&p));
    check(|i| i[0].rsqrt(), std::slice::from_ref(&p));
    check(|i| i[0].pow_scalar(2.5), std::slice::from_ref(&p));
}

#[test]
fn binary_ops_with_broadcasting_match_finite_differences() {
    let a = leaf(&[2, 3, 4], 3);
    let b = positive_leaf(&[3, 1], 4);
    check(|i| i[0].add(&i[1]), &[a.clone(), b.clone()]);
    check(|i| i[0].sub(&i[1]), &[a.clone(), b.clone()]);
    check(|i| i[0].mul(&i[1]), &[a.clone(), b.clone()]);
    check(|i| i[0].div(&i[1]), &[a.clone(), b.clone()]);
    let base = positive_leaf(&[2, 3], 5);
    let exponent = leaf(&[3], 6);
    check(|i| i[0].pow(&i[1]), &[base, exponent]);
    let c = leaf(&[2, 3, 4], 7);
    check(|i| i[0].maximum(&i[1]), &[a.clone(), c.clone()]);
    check(|i| i[0].minimum(&i[1]), &[a.clone(), c.clone()]);
}

#[test]
fn scalar_ops_match_finite_differences() {
    let x = positive_leaf(&[5], 8);
    check(|i| i[0].add_scalar(2.0), std::slice::from_ref(&x));
    check(|i| i[0].rsub_scalar(2.0), std::slice::from_ref(&x));
    check(|i| i[0].mul_scalar(-3.0), std::slice::from_ref(&x));
    check(|i| i[0].div_scalar(4.0), std::slice::from_ref(&x));
    check(|i| i[0].rdiv_scalar(4.0), std::slice::from_ref(&x));
    check(|i| i[0].maximum_scalar(0.9), std::slice::from_ref(&x));
}

#[test]
fn where_and_clamp_match_finite_differences() {
    let a = leaf(&[4, 3], 9);
    let b = leaf(&[3], 10);
    let cond = Tensor::from_vec(vec![true, false, true], &[3]).unwrap();
    check(|i| Tensor::where_(&cond, &i[0], &i[1]), &[a.clone(), b]);
    let x = away_from_zero_leaf(&[10], 11);
    check(|i| i[0].clamp(Some(-0.05), Some(0.5)), &[x]);
}

#[test]
fn reductions_match_finite_differences() {
    let x = leaf(&[3, 4, 5], 12);
    check(|i| i[0].sum_all(), std::slice::from_ref(&x));
    check(|i| i[0].sum(&[0, 2], false), std::slice::from_ref(&x));
    check(|i| i[0].sum(&[1], true), std::slice::from_ref(&x));
    check(|i| i[0].mean(&[-1], false), std::slice::from_ref(&x));
    check(|i| i[0].var(&[1], true, false), std::slice::from_ref(&x));
    check(|i| i[0].var(&[0, 2], false, true), std::slice::from_ref(&x));
    check(|i| i[0].std(&[2], true, false), std::slice::from_ref(&x));
    check(|i| i[0].logsumexp(&[1], false), std::slice::from_ref(&x));
    check(|i| i[0].amax(&[2], false), std::slice::from_ref(&x));
    check(|i| i[0].amin(&[0, 1], true), std::slice::from_ref(&x));
    check(|i| i[0].max_all(), std::slice::from_ref(&x));
    check(|i| Ok(i[0].max_dim(1, false)?.0), std::slice::from_ref(&x));
    check(|i| Ok(i[0].min_dim(-1, true)?.0), std::slice::from_ref(&x));
}

#[test]
fn softmax_matches_finite_differences() {
    let x = leaf(&[3, 5], 13);
    check(|i| i[0].softmax(1), std::slice::from_ref(&x));
    check(|i| i[0].softmax(0), std::slice::from_ref(&x));
    check(|i| i[0].log_softmax(-1), std::slice::from_ref(&x));
}

#[test]
fn matmul_matches_finite_differences_for_every_rank() {
    let cases: Vec<(Vec<usize>, Vec<usize>)> = vec![
        (vec![4], vec![4]),
        (vec![3, 4], vec![4]),
        (vec![4], vec![4, 2]),
        (vec![3, 4], vec![4, 2]),
        (vec![2, 3, 4], vec![4, 2]),
        (vec![2, 1, 3, 4], vec![5, 4, 2]),
        (vec![4], vec![2, 4, 3]),
    ];
    for (i, (sa, sb)) in cases.into_iter().enumerate() {
        let (a, b) = (leaf(&sa, 20 + i as u64), leaf(&sb, 40 + i as u64));
        gradcheck(|t| t[0].matmul(&t[1]), &[a, b], GradcheckOptions::default())
            .unwrap_or_else(|e| panic!("{sa:?} @ {sb:?}: {e}"));
    }
    let a = leaf(&[4, 3], 60);
    let b = leaf(&[4, 2], 61);
    check(|t| t[0].t()?.matmul(&t[1]), &[a, b]);
}

#[test]
fn linear_matches_finite_differences() {
    let x = leaf(&[2, 3, 4], 62);
    let w = leaf(&[5, 4], 63);
    let b = leaf(&[5], 64);
    check(
        |t| t[0].linear(&t[1], Some(&t[2])),
        &[x.clone(), w.clone(), b],
    );
    check(|t| t[0].linear(&t[1], None), &[x, w]);
}

#[test]
fn views_match_finite_differences() {
    let x = leaf(&[2, 3, 4], 70);
    check(|t| t[0].reshape(&[6, 4]), std::slice::from_ref(&x));
    check(
        |t| t[0].permute(&[2, 0, 1])?.contiguous(),
        std::slice::from_ref(&x),
    );
    check(
        |t| t[0].transpose(0, 2)?.mul_scalar(2.0),
        std::slice::from_ref(&x),
    );
    check(|t| t[0].narrow(1, 1, 2), std::slice::from_ref(&x));
    check(|t| t[0].select(2, 3), std::slice::from_ref(&x));
    check(
        |t| t[0].unsqueeze(1)?.expand(&[2, 5, 3, 4]),
        std::slice::from_ref(&x),
    );
    check(|t| t[0].flatten(1, -1)?.squeeze(), std::slice::from_ref(&x));
}

#[test]
fn casts_pass_gradients_back_in_the_input_dtype() -> Result<()> {
    let x = Tensor::from_vec(vec![1.0f32, 2.0], &[2])?.requires_grad_(true)?;
    x.to_dtype(DType::F64)?
        .pow_scalar(2.0)?
        .sum_all()?
        .backward()?;
    let g = x.grad().unwrap();
    assert_eq!(
        (g.dtype(), g.to_vec::<f32>()?),
        (DType::F32, vec![2.0, 4.0])
    );
    Ok(())
}
