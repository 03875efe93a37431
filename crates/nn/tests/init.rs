//! `tessera_nn::init` against PyTorch's `torch.nn.init`: gains, fans, the bounds and spread
//! of the random initialisers, orthogonality, determinism with a generator, and errors.

use tessera_nn::init::{self, FanMode};
use tessera_nn::{NnError, Parameter, Result};
use tessera_tensor::{DType, Generator, Tensor, manual_seed};

fn zeros(shape: &[usize]) -> Tensor {
    Tensor::zeros(shape, DType::F32).unwrap()
}

fn mean_std(t: &Tensor) -> (f64, f64) {
    let v = t.to_vec_f64().unwrap();
    let n = v.len() as f64;
    let mean = v.iter().sum::<f64>() / n;
    let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n;
    (mean, var.sqrt())
}

fn min_max(t: &Tensor) -> (f64, f64) {
    let v = t.to_vec_f64().unwrap();
    v.iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &x| {
            (lo.min(x), hi.max(x))
        })
}

fn assert_near(actual: f64, expected: f64, tol: f64, what: &str) {
    assert!(
        (actual - expected).abs() <= tol,
        "{what}: {actual} is not within {tol} of {expected}"
    );
}

#[test]
fn gains_match_pytorch() -> Result<()> {
    let cases = [
        ("linear", None, 1.0),
        ("conv2d", None, 1.0),
        ("conv_transpose3d", None, 1.0),
        ("sigmoid", None, 1.0),
        ("tanh", None, 5.0 / 3.0),
        ("relu", None, 2f64.sqrt()),
        ("leaky_relu", None, (2.0 / (1.0 + 0.01f64 * 0.01)).sqrt()),
        ("leaky_relu", Some(5f64.sqrt()), (2.0f64 / 6.0).sqrt()),
        ("selu", None, 0.75),
    ];
    for (name, param, expected) in cases {
        assert_near(init::calculate_gain(name, param)?, expected, 1e-15, name);
    }
    let err = init::calculate_gain("softplus", None).unwrap_err();
    assert_eq!(err.to_string(), "Unsupported nonlinearity softplus");
    Ok(())
}

#[test]
fn fans_follow_pytorchs_rule() -> Result<()> {
    assert_eq!(init::calculate_fan_in_and_fan_out(&zeros(&[3, 5]))?, (5, 3));
    assert_eq!(
        init::calculate_fan_in_and_fan_out(&zeros(&[16, 3, 3, 2]))?,
        (3 * 6, 16 * 6)
    );
    let err = init::calculate_fan_in_and_fan_out(&zeros(&[7])).unwrap_err();
    assert!(matches!(err, NnError::Invalid(_)));
    assert!(err.to_string().starts_with(
        "Fan in and fan out can not be computed for tensor with fewer than 2 dimensions"
    ));
    assert!(init::xavier_uniform_(&zeros(&[7]), 1.0, None).is_err());
    assert!(init::kaiming_normal_(&zeros(&[]), 0.0, FanMode::FanIn, "relu", None).is_err());
    Ok(())
}

#[test]
fn uniform_stays_in_bounds_and_normal_has_the_requested_spread() -> Result<()> {
    let t = zeros(&[200, 100]);
    init::uniform_(&t, -0.5, 2.0, None)?;
    let (lo, hi) = min_max(&t);
    assert!(lo >= -0.5 && hi < 2.0 && lo < -0.45 && hi > 1.95);
    assert_near(mean_std(&t).0, 0.75, 0.02, "uniform mean");

    init::normal_(&t, 1.0, 3.0, None)?;
    let (mean, std) = mean_std(&t);
    assert_near(mean, 1.0, 0.05, "normal mean");
    assert_near(std, 3.0, 0.05, "normal std");
    Ok(())
}

#[test]
fn constants_fill_every_element() -> Result<()> {
    let t = zeros(&[2, 3]);
    init::constant_(&t, 0.25)?;
    assert_eq!(t.to_vec::<f32>()?, [0.25; 6]);
    init::ones_(&t)?;
    assert_eq!(t.to_vec::<f32>()?, [1.0; 6]);
    init::zeros_(&t)?;
    assert_eq!(t.to_vec::<f32>()?, [0.0; 6]);
    init::eye_(&t)?;
    assert_eq!(t.to_vec::<f32>()?, [1.0, 0.0, 0.0, 0.0, 1.0, 0.0]);
    Ok(())
}

#[test]
fn xavier_bounds_and_std_follow_both_fans() -> Result<()> {
    let t = zeros(&[300, 200]);
    let gain = 2.0;
    init::xavier_uniform_(&t, gain, None)?;
    let bound = gain * (6.0f64 / 500.0).sqrt();
    let (lo, hi) = min_max(&t);
    assert!(lo >= -bound && hi <= bound && hi > 0.95 * bound);
    init::xavier_normal_(&t, gain, None)?;
    assert_near(
        mean_std(&t).1,
        gain * (2.0f64 / 500.0).sqrt(),
        0.003,
        "xavier std",
    );
    Ok(())
}

#[test]
fn kaiming_uses_the_chosen_fan_and_gain() -> Result<()> {
    // fan_in = 50 * 4 = 200, fan_out = 100 * 4 = 400.
    let t = zeros(&[100, 50, 2, 2]);
    init::kaiming_uniform_(&t, 0.0, FanMode::FanIn, "relu", None)?;
    let bound = 2f64.sqrt() * (3.0f64 / 200.0).sqrt();
    let (lo, hi) = min_max(&t);
    assert!(lo >= -bound && hi <= bound && hi > 0.95 * bound);

    init::kaiming_normal_(&t, 0.0, FanMode::FanOut, "relu", None)?;
    assert_near(
        mean_std(&t).1,
        (2.0f64 / 400.0).sqrt(),
        0.002,
        "fan_out std",
    );
    init::kaiming_normal_(&t, 0.0, FanMode::FanIn, "relu", None)?;
    assert_near(mean_std(&t).1, (2.0f64 / 200.0).sqrt(), 0.002, "fan_in std");

    // PyTorch's Linear default: a = sqrt(5) gives the bound 1 / sqrt(fan_in).
    let w = zeros(&[400, 64]);
    init::kaiming_uniform_(&w, 5f64.sqrt(), FanMode::FanIn, "leaky_relu", None)?;
    let (lo, hi) = min_max(&w);
    assert!(lo >= -0.125 && hi <= 0.125 && hi > 0.12);
    Ok(())
}

#[test]
fn orthogonal_rows_or_columns_are_orthonormal() -> Result<()> {
    for shape in [[6usize, 4], [4, 6], [5, 5]] {
        let t = Tensor::zeros(&shape, DType::F64)?;
        init::orthogonal_(&t, 1.0, None)?;
        // The shorter side is orthonormal: W W^T = I for wide, W^T W = I for tall.
        let gram = if shape[0] <= shape[1] {
            t.matmul(&t.t()?)?
        } else {
            t.t()?.matmul(&t)?
        };
        let n = shape[0].min(shape[1]);
        let identity = Tensor::eye(n, n, DType::F64)?;
        let diff = gram.sub(&identity)?.abs()?.max_all()?.item::<f64>()?;
        assert!(diff < 1e-12, "{shape:?}: {diff}");
    }
    let t = zeros(&[3, 2, 2]);
    init::orthogonal_(&t, 2.0, None)?;
    let flat = t.reshape(&[3, 4])?.to_dtype(DType::F64)?;
    let gram = flat.matmul(&flat.t()?)?.to_vec::<f64>()?;
    for i in 0..3 {
        for j in 0..3 {
            assert_near(
                gram[i * 3 + j],
                if i == j { 4.0 } else { 0.0 },
                1e-5,
                "gain^2 I",
            );
        }
    }
    assert!(init::orthogonal_(&zeros(&[4]), 1.0, None).is_err());
    Ok(())
}

#[test]
fn trunc_normal_stays_inside_its_window() -> Result<()> {
    let t = zeros(&[20000]);
    init::trunc_normal_(&t, 0.0, 1.0, -2.0, 2.0, None)?;
    let (lo, hi) = min_max(&t);
    assert!(lo >= -2.0 && hi <= 2.0 && lo < -1.9 && hi > 1.9);
    // The standard normal truncated to [-2, 2] has std 0.8796.
    assert_near(mean_std(&t).1, 0.8796, 0.015, "truncated std");
    init::trunc_normal_(&t, 0.0, 1.0, 1.0, 1.5, None)?;
    let (lo, hi) = min_max(&t);
    assert!(lo >= 1.0 && hi <= 1.5);
    Ok(())
}

#[test]
fn generators_make_inits_reproducible() -> Result<()> {
    let (a, b) = (zeros(&[4, 5]), zeros(&[4, 5]));
    init::kaiming_uniform_(
        &a,
        0.0,
        FanMode::FanIn,
        "relu",
        Some(&mut Generator::new(3)),
    )?;
    init::kaiming_uniform_(
        &b,
        0.0,
        FanMode::FanIn,
        "relu",
        Some(&mut Generator::new(3)),
    )?;
    assert_eq!(a.to_vec::<f32>()?, b.to_vec::<f32>()?);
    // Without a generator the global one is used; tests run in parallel, so only check
    // that successive draws differ.
    manual_seed(9);
    init::normal_(&a, 0.0, 1.0, None)?;
    init::normal_(&b, 0.0, 1.0, None)?;
    assert_ne!(a.to_vec::<f32>()?, b.to_vec::<f32>()?);
    Ok(())
}

#[test]
fn inits_write_through_parameters_without_recording_autograd() -> Result<()> {
    let p = Parameter::new(zeros(&[3, 4]));
    init::xavier_uniform_(&p, 1.0, None)?;
    assert!(p.requires_grad() && p.is_leaf());
    assert!(p.to_vec::<f32>()?.iter().any(|&x| x != 0.0));
    Ok(())
}

#[test]
fn random_inits_refuse_integer_tensors() {
    let t = Tensor::zeros(&[3, 3], DType::I64).unwrap();
    let err = init::uniform_(&t, 0.0, 1.0, None).unwrap_err().to_string();
    assert!(
        err.starts_with("init.uniform_: expected a floating-point tensor"),
        "{err}"
    );
    assert!(init::constant_(&t, 2.0).is_ok());
}

#[test]
fn empty_tensors_are_left_alone_by_kaiming_and_orthogonal() -> Result<()> {
    let t = zeros(&[0, 3]);
    init::kaiming_uniform_(&t, 0.0, FanMode::FanIn, "relu", None)?;
    init::orthogonal_(&t, 1.0, None)?;
    Ok(())
}
