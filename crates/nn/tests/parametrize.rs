//! Parametrizations (PyTorch's `torch.nn.utils.parametrize` and `parametrizations`): what
//! registration does to parameters, state dicts and reprs, the forward value and its
//! gradients, caching, assignment, removal, orthogonal and weight norm, and the errors.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use tessera_nn::optim::{Optimizer, SGD, SgdOptions};
use tessera_nn::parametrizations::{orthogonal, weight_norm};
use tessera_nn::parametrize::{
    Parametrization, cached, is_parametrized, parametrization_list, recompute,
    register_parametrization, remove_parametrizations, set_parametrized,
};
use tessera_nn::{Call, Forward, Module, ModuleCore, ModuleExt, NnError, Parameter, Result};
use tessera_tensor::{DType, GradcheckOptions, Tensor, TensorError, gradcheck, no_grad};

// ----- fixtures -----

/// `x @ weight^T + bias`, as `nn.Linear` (the layers are not used here).
#[derive(Module)]
struct Lin {
    core: ModuleCore,
    weight: Parameter,
    bias: Parameter,
}

impl Lin {
    fn new(out_features: usize, in_features: usize, dtype: DType) -> Result<Lin> {
        Ok(Lin {
            core: ModuleCore::default(),
            weight: Parameter::new(Tensor::randn(&[out_features, in_features], dtype)?),
            bias: Parameter::new(Tensor::randn(&[out_features], dtype)?),
        })
    }
}

impl Forward for Lin {
    type Output = Tensor;
    fn forward(&self, x: Tensor) -> Result<Tensor> {
        Ok(x.matmul(&self.weight.t()?)?.add(&self.bias)?)
    }
}

/// `x * factor`, with the inverse `x / factor`; counts its forwards.
struct Scale {
    factor: f64,
    calls: Arc<AtomicUsize>,
}

fn scale(factor: f64) -> Scale {
    Scale {
        factor,
        calls: Arc::default(),
    }
}

impl Parametrization for Scale {
    fn name(&self) -> String {
        "Scale".into()
    }
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        Ok(x.mul_scalar(self.factor)?)
    }
    fn right_inverse(&self, x: &Tensor) -> Result<Tensor> {
        Ok(x.mul_scalar(1.0 / self.factor)?)
    }
}

/// PyTorch's tutorial `Symmetric`: `triu(X) + triu(X, 1)^T`, with no right inverse.
struct Symmetric;

fn symmetric(x: &Tensor) -> Result<Tensor> {
    let n = x.size(0)?;
    let mask = |strict: bool| -> Result<Tensor> {
        let values: Vec<f64> = (0..n * n)
            .map(|i| {
                let (r, c) = (i / n, i % n);
                if c > r || (!strict && c == r) {
                    1.0
                } else {
                    0.0
                }
            })
            .collect();
        Ok(Tensor::from_vec(values, &[n, n])?.to_dtype(x.dtype())?)
    };
    let upper = x.mul(&mask(false)?)?;
    Ok(upper.add(&x.mul(&mask(true)?)?.t()?)?)
}

impl Parametrization for Symmetric {
    fn name(&self) -> String {
        "Symmetric".into()
    }
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        symmetric(x)
    }
}

/// Returns a tensor of another shape: only registrable with `unsafe_`.
struct Flatten;

impl Parametrization for Flatten {
    fn name(&self) -> String {
        "Flatten".into()
    }
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        Ok(x.flatten(0, -1)?)
    }
}

/// A 3x3 `Lin` of `dtype` whose weight is parametrized as symmetric.
fn symmetric_lin(dtype: DType) -> Result<Lin> {
    let mut m = Lin::new(3, 3, dtype)?;
    register_parametrization(&mut m, "weight", Symmetric, false)?;
    Ok(m)
}

/// `m.call(x)` for `gradcheck`, which takes tensor-crate results.
fn call(m: &Lin, x: &Tensor) -> tessera_tensor::Result<Tensor> {
    m.call(x.clone())
        .map_err(|e| TensorError::Autograd(e.to_string()))
}

fn names<T>(items: Vec<(String, T)>) -> Vec<String> {
    items.into_iter().map(|(n, _)| n).collect()
}

fn keys(m: &impl Module) -> Result<Vec<String>> {
    Ok(m.state_dict()?.keys().map(String::from).collect())
}

fn assert_close(a: &Tensor, b: &Tensor, tol: f64) {
    let (a, b) = (a.to_vec_f64().unwrap(), b.to_vec_f64().unwrap());
    assert_eq!(a.len(), b.len());
    for (i, (x, y)) in a.iter().zip(&b).enumerate() {
        assert!((x - y).abs() <= tol, "element {i}: {x} vs {y}");
    }
}

fn original(m: &impl Module) -> Tensor {
    m.get_parameter("parametrizations.weight.original")
        .unwrap()
        .tensor()
        .clone()
}

/// `max |W W^T - I|` for a wide or square `w`, `max |W^T W - I|` for a tall one.
fn orthogonality_error(w: &Tensor) -> f64 {
    let [rows, cols] = w.shape()[..] else {
        panic!("a matrix")
    };
    let gram = if rows <= cols {
        w.matmul(&w.t().unwrap()).unwrap()
    } else {
        w.t().unwrap().matmul(w).unwrap()
    };
    let n = rows.min(cols);
    let eye = Tensor::eye(n, n, w.dtype()).unwrap();
    gram.sub(&eye)
        .unwrap()
        .to_vec_f64()
        .unwrap()
        .into_iter()
        .fold(0.0, |m, v| m.max(v.abs()))
}

// ----- registration -----

#[test]
fn registration_moves_the_parameter_under_parametrizations() -> Result<()> {
    let mut m = Lin::new(3, 2, DType::F32)?;
    let w = m.weight.deep_clone()?;
    assert_eq!(names(m.named_parameters()), ["weight", "bias"]);
    register_parametrization(&mut m, "weight", scale(2.0), false)?;

    assert!(is_parametrized(&m, Some("weight")) && is_parametrized(&m, None));
    assert!(!is_parametrized(&m, Some("bias")));
    assert_eq!(
        names(m.named_parameters()),
        ["bias", "parametrizations.weight.original"]
    );
    assert_eq!(keys(&m)?, ["bias", "parametrizations.weight.original"]);
    assert_eq!(
        names(m.named_modules()),
        [
            "",
            "parametrizations",
            "parametrizations.weight",
            "parametrizations.weight.0"
        ]
    );
    // `original` is right_inverse(weight); the weight keeps its value.
    assert_close(&original(&m), &w.mul_scalar(0.5)?, 1e-6);
    assert_close(&m.weight, &w, 1e-6);
    assert!(original(&m).is_leaf() && original(&m).requires_grad());
    Ok(())
}

#[test]
fn parametrized_module_prints_as_pytorch_does() -> Result<()> {
    let mut m = symmetric_lin(DType::F32)?;
    assert_eq!(
        m.repr(),
        "ParametrizedLin(\n  (parametrizations): ModuleDict(\n    (weight): ParametrizationList(\n      (0): Symmetric()\n    )\n  )\n)"
    );
    register_parametrization(&mut m, "weight", Symmetric, false)?;
    register_parametrization(&mut m, "bias", scale(2.0), false)?;
    assert_eq!(
        m.repr(),
        "ParametrizedLin(\n  (parametrizations): ModuleDict(\n    (weight): ParametrizationList(\n      (0-1): 2 x Symmetric()\n    )\n    (bias): ParametrizationList(\n      (0): Scale()\n    )\n  )\n)"
    );
    Ok(())
}

#[test]
fn a_second_parametrization_chains_and_keeps_original() -> Result<()> {
    let mut m = Lin::new(2, 2, DType::F64)?;
    let w = m.weight.deep_clone()?;
    register_parametrization(&mut m, "weight", scale(2.0), false)?;
    register_parametrization(&mut m, "weight", scale(3.0), false)?;
    assert_eq!(parametrization_list(&m, "weight")?.len(), 2);
    assert_eq!(keys(&m)?, ["bias", "parametrizations.weight.original"]);
    // original = w / 2 from the first registration; weight = 3 * (2 * original).
    assert_close(&original(&m), &w.mul_scalar(0.5)?, 1e-12);
    assert_close(&m.weight, &w.mul_scalar(3.0)?, 1e-12);
    Ok(())
}

// ----- forward and gradients -----

#[test]
fn forward_uses_the_parametrized_weight() -> Result<()> {
    let m = symmetric_lin(DType::F32)?;
    let x = Tensor::randn(&[4, 3], DType::F32)?;
    let expected = x.matmul(&symmetric(&original(&m))?.t()?)?.add(&m.bias)?;
    assert_close(&m.call(x)?, &expected, 1e-5);
    assert_close(&m.weight, &m.weight.t()?, 0.0);
    Ok(())
}

#[test]
fn gradients_reach_original_and_match_finite_differences() -> Result<()> {
    let m = symmetric_lin(DType::F64)?;
    let x = Tensor::randn(&[4, 3], DType::F64)?;
    let original = original(&m);

    // Through the module: the pre-forward hook recomputes the weight from the perturbed
    // `original` on every call.
    gradcheck(
        |_| call(&m, &x),
        std::slice::from_ref(&original),
        GradcheckOptions::default(),
    )?;

    // The module's gradient equals the functional version's.
    original.set_grad(None);
    m.call(x.clone())?.sum_all()?.backward()?;
    let leaf = original.deep_clone()?.requires_grad_(true)?;
    x.matmul(&symmetric(&leaf)?.t()?)?
        .add(&m.bias)?
        .sum_all()?
        .backward()?;
    assert_close(&original.grad().unwrap(), &leaf.grad().unwrap(), 1e-12);
    assert!(m.weight.grad().is_none());
    Ok(())
}

#[test]
fn cached_computes_each_parametrized_tensor_once() -> Result<()> {
    let mut m = Lin::new(2, 2, DType::F32)?;
    let p = scale(2.0);
    let calls = p.calls.clone();
    register_parametrization(&mut m, "weight", p, false)?;
    let x = Tensor::randn(&[1, 2], DType::F32)?;
    let before = calls.load(Ordering::SeqCst);
    m.call(x.clone())?;
    m.call(x.clone())?;
    assert_eq!(calls.load(Ordering::SeqCst), before + 2);

    let before = calls.load(Ordering::SeqCst);
    let outputs = cached(|| -> Result<Vec<Tensor>> {
        let a = m.call(x.clone())?;
        let b = cached(|| m.call(x.clone()))?;
        let c = m.call(x.clone())?;
        Ok(vec![a, b, c])
    })?;
    assert_eq!(calls.load(Ordering::SeqCst), before + 1);
    assert_close(&outputs[0], &outputs[2], 0.0);

    // Both uses share one graph: one backward reaches `original` through both.
    outputs[0].add(&outputs[2])?.sum_all()?.backward()?;
    assert!(original(&m).grad().is_some());

    let before = calls.load(Ordering::SeqCst);
    m.call(x)?;
    assert_eq!(
        calls.load(Ordering::SeqCst),
        before + 1,
        "the cache ends with the scope"
    );
    Ok(())
}

// ----- assignment, state dicts, removal -----

#[test]
fn assignment_goes_through_right_inverse() -> Result<()> {
    let mut m = Lin::new(2, 3, DType::F64)?;
    register_parametrization(&mut m, "weight", scale(2.0), false)?;
    register_parametrization(&mut m, "weight", scale(5.0), false)?;
    let value = Tensor::randn(&[2, 3], DType::F64)?;
    set_parametrized(&m, "weight", &value)?;
    assert_close(&original(&m), &value.mul_scalar(0.1)?, 1e-12);
    assert_close(&m.weight, &value, 1e-12);
    Ok(())
}

#[test]
fn load_state_dict_fills_original_and_refreshes_the_weight() -> Result<()> {
    let mut a = Lin::new(2, 2, DType::F32)?;
    let mut b = Lin::new(2, 2, DType::F32)?;
    register_parametrization(&mut a, "weight", scale(2.0), false)?;
    register_parametrization(&mut b, "weight", scale(2.0), false)?;
    let keys = b.load_state_dict(&a.state_dict()?, true, false)?;
    assert!(keys.is_empty());
    assert_close(&b.weight, &a.weight, 0.0);
    Ok(())
}

#[test]
fn removal_restores_a_plain_parameter() -> Result<()> {
    for leave_parametrized in [true, false] {
        let mut m = Lin::new(2, 2, DType::F64)?;
        let w = m.weight.deep_clone()?;
        register_parametrization(&mut m, "weight", scale(2.0), false)?;
        remove_parametrizations(&mut m, "weight", leave_parametrized)?;

        assert!(!is_parametrized(&m, None));
        assert_eq!(names(m.named_parameters()), ["weight", "bias"]);
        assert_eq!(keys(&m)?, ["weight", "bias"]);
        assert_eq!(m.repr(), "Lin()");
        assert!(m.weight.is_leaf() && m.weight.requires_grad());
        let expected = if leave_parametrized {
            w.clone()
        } else {
            w.mul_scalar(0.5)?
        };
        assert_close(&m.weight, &expected, 1e-12);

        // It trains as a parameter again.
        m.call(Tensor::ones(&[1, 2], DType::F64)?)?
            .sum_all()?
            .backward()?;
        assert!(m.weight.grad().is_some());
    }
    Ok(())
}

#[test]
fn runtime_parameters_and_buffers_can_be_parametrized() -> Result<()> {
    let mut m = Lin::new(2, 2, DType::F32)?;
    m.register_parameter(
        "scale",
        Some(Parameter::new(Tensor::ones(&[2], DType::F32)?)),
    )?;
    m.register_buffer("running", Some(Tensor::ones(&[2], DType::F32)?), true)?;
    register_parametrization(&mut m, "scale", scale(2.0), false)?;
    register_parametrization(&mut m, "running", scale(4.0), false)?;
    assert_eq!(
        names(m.named_parameters()),
        ["weight", "bias", "parametrizations.scale.original"]
    );
    assert_eq!(
        names(m.named_buffers()),
        ["parametrizations.running.original"]
    );
    assert_eq!(
        keys(&m)?,
        [
            "weight",
            "bias",
            "parametrizations.scale.original",
            "parametrizations.running.original"
        ]
    );
    let running = m.get_buffer("parametrizations.running.original")?;
    assert_close(&running, &Tensor::full(&[2], 0.25, DType::F32)?, 0.0);
    assert!(!running.requires_grad());
    assert_close(
        &recompute(&m, "running")?,
        &Tensor::ones(&[2], DType::F32)?,
        0.0,
    );
    Ok(())
}

// ----- errors -----

#[test]
fn errors_name_the_module_and_tensor() -> Result<()> {
    let mut m = Lin::new(2, 2, DType::F32)?;
    let err = register_parametrization(&mut m, "nope", scale(2.0), false).unwrap_err();
    assert!(matches!(err, NnError::NotFound(_)), "{err}");
    assert_eq!(
        err.to_string(),
        "Lin has no parameter, buffer or parametrized tensor named `nope`"
    );

    let err = remove_parametrizations(&mut m, "weight", true).unwrap_err();
    assert_eq!(err.to_string(), "Lin has no parametrization on `weight`");
    let err = set_parametrized(&m, "weight", &Tensor::zeros(&[2, 2], DType::F32)?).unwrap_err();
    assert!(matches!(err, NnError::NotFound(_)), "{err}");

    let err = register_parametrization(&mut m, "weight", Flatten, false).unwrap_err();
    assert!(
        err.to_string().contains("may not change the shape"),
        "{err}"
    );
    assert!(
        !is_parametrized(&m, None),
        "a failed registration changes nothing"
    );
    assert_eq!(names(m.named_parameters()), ["weight", "bias"]);

    register_parametrization(&mut m, "weight", Flatten, true)?;
    assert_eq!(m.weight.shape(), [4]);

    let err = m
        .register_parameter("weight", None)
        .unwrap_err()
        .to_string();
    assert!(err.contains("already exists"), "{err}");
    Ok(())
}

// ----- orthogonal -----

#[test]
fn orthogonal_weights_stay_orthogonal_while_training() -> Result<()> {
    for shape in [[3, 3], [2, 5], [5, 2]] {
        let mut m = Lin::new(shape[0], shape[1], DType::F32)?;
        orthogonal(&mut m, "weight")?;
        assert!(orthogonality_error(&m.weight) < 1e-5, "{shape:?}");
        assert_eq!(
            keys(&m)?,
            [
                "bias",
                "parametrizations.weight.original",
                "parametrizations.weight.0.base"
            ]
        );
        let params: Vec<Tensor> = m.parameter_tensors();
        let mut sgd = SGD::new(
            params,
            SgdOptions {
                lr: 0.1,
                ..SgdOptions::default()
            },
        )?;
        let x = Tensor::randn(&[8, shape[1]], DType::F32)?;
        let start = m.call(x.clone())?.deep_clone()?;
        for _ in 0..5 {
            m.zero_grad(true)?;
            m.call(x.clone())?.pow_scalar(2.0)?.sum_all()?.backward()?;
            assert!(original(&m).grad().is_some());
            sgd.step()?;
        }
        let w = recompute(&m, "weight")?;
        assert!(orthogonality_error(&w) < 1e-5, "{shape:?} after training");
        let moved = m.call(x)?.sub(&start)?.abs()?.sum_all()?.item::<f64>()?;
        assert!(moved > 1e-3, "{shape:?}: training changed the weight");
    }
    Ok(())
}

#[test]
fn orthogonal_keeps_an_orthogonal_initial_weight() -> Result<()> {
    // A permutation with a sign flip, and a tall matrix with orthonormal columns.
    let square = Tensor::from_vec(
        vec![0.0f64, -1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0],
        &[3, 3],
    )?;
    let tall = Tensor::from_vec(vec![0.6f64, 0.0, 0.8, 0.0, 0.0, 1.0], &[3, 2])?;
    for w in [square, tall] {
        let shape = w.shape();
        let mut m = Lin::new(shape[0], shape[1], DType::F64)?;
        {
            let _guard = no_grad();
            m.weight.copy_(&w)?;
        }
        orthogonal(&mut m, "weight")?;
        assert_close(&m.weight, &w, 1e-12);
        assert_eq!(
            m.repr(),
            "ParametrizedLin(\n  (parametrizations): ModuleDict(\n    (weight): ParametrizationList(\n      (0): _Orthogonal()\n    )\n  )\n)"
        );
        // Assignment of an orthogonal matrix is kept too.
        let q = w.mul_scalar(-1.0)?;
        set_parametrized(&m, "weight", &q)?;
        assert_close(&m.weight, &q, 1e-12);
    }
    Ok(())
}

#[test]
fn orthogonal_gradients_match_finite_differences() -> Result<()> {
    let mut m = Lin::new(2, 3, DType::F64)?;
    orthogonal(&mut m, "weight")?;
    let original = original(&m);
    {
        let _guard = no_grad();
        original.add_(&Tensor::randn(&[2, 3], DType::F64)?.mul_scalar(0.3)?)?;
    }
    let x = Tensor::randn(&[4, 3], DType::F64)?;
    gradcheck(|_| call(&m, &x), &[original], GradcheckOptions::default())?;
    Ok(())
}

// ----- weight norm -----

#[test]
fn weight_norm_stores_magnitude_and_direction() -> Result<()> {
    let mut m = Lin::new(3, 2, DType::F64)?;
    let w = m.weight.deep_clone()?;
    weight_norm(&mut m, "weight", Some(0))?;
    assert_eq!(
        keys(&m)?,
        [
            "bias",
            "parametrizations.weight.original0",
            "parametrizations.weight.original1"
        ]
    );
    let g = m.get_parameter("parametrizations.weight.original0")?;
    let v = m.get_parameter("parametrizations.weight.original1")?;
    assert_eq!(g.shape(), [3, 1]);
    let row_norms = w.mul(&w)?.sum(&[1], true)?.sqrt()?;
    assert_close(&g, &row_norms, 1e-12);
    assert_close(&v, &w, 0.0);
    assert_close(&m.weight, &w, 1e-12);
    assert_eq!(
        m.repr(),
        "ParametrizedLin(\n  (parametrizations): ModuleDict(\n    (weight): ParametrizationList(\n      (0): _WeightNorm()\n    )\n  )\n)"
    );

    let x = Tensor::randn(&[4, 2], DType::F64)?;
    gradcheck(
        |_| call(&m, &x),
        &[g.tensor().clone(), v.tensor().clone()],
        GradcheckOptions::default(),
    )?;

    let err = remove_parametrizations(&mut m, "weight", false).unwrap_err();
    assert!(err.to_string().contains("sequence of tensors"), "{err}");
    remove_parametrizations(&mut m, "weight", true)?;
    assert_eq!(keys(&m)?, ["weight", "bias"]);
    assert_close(&m.weight, &w, 1e-12);
    Ok(())
}

#[test]
fn weight_norm_over_the_whole_tensor_and_bad_dims() -> Result<()> {
    let mut m = Lin::new(3, 2, DType::F64)?;
    let w = m.weight.deep_clone()?;
    weight_norm(&mut m, "weight", None)?;
    let g = m.get_parameter("parametrizations.weight.original0")?;
    assert_eq!(g.numel(), 1);
    assert_close(&g, &w.mul(&w)?.sum_all()?.sqrt()?, 1e-12);

    let mut m = Lin::new(3, 2, DType::F64)?;
    let err = weight_norm(&mut m, "weight", Some(2)).unwrap_err();
    assert!(err.to_string().contains("out of range"), "{err}");
    Ok(())
}
