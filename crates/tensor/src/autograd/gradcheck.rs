//! Compares analytic gradients with central finite differences, in f64.

use crate::{DType, Result, Tensor, TensorError, no_grad};

/// Step and tolerances of [`gradcheck`].
#[derive(Debug, Clone, Copy)]
pub struct GradcheckOptions {
    pub eps: f64,
    pub atol: f64,
    pub rtol: f64,
    /// Seed of the random weights `w` in `L = sum(f(x) * w)`.
    pub seed: u64,
}

impl Default for GradcheckOptions {
    fn default() -> Self {
        GradcheckOptions {
            eps: 1e-6,
            atol: 1e-5,
            rtol: 1e-3,
            seed: 0,
        }
    }
}

/// Checks the gradients of `f` at `inputs` (f64 tensors; those with `requires_grad` are
/// checked). The scalar `L = sum(f(x) * w)` with fixed random `w` is differentiated by
/// backward and by central differences `(L(x + eps) - L(x - eps)) / 2eps` for every element;
/// an error names the first input and element that disagree.
pub fn gradcheck(
    f: impl Fn(&[Tensor]) -> Result<Tensor>,
    inputs: &[Tensor],
    options: GradcheckOptions,
) -> Result<()> {
    gradcheck_vjp(
        &f,
        |inputs, weights| {
            for x in inputs {
                x.set_grad(None);
            }
            let loss = f(inputs)?.to_dtype(DType::F64)?.mul(weights)?.sum_all()?;
            if !loss.requires_grad() {
                return Err(TensorError::invalid(
                    "gradcheck",
                    "the output does not depend on any input that requires grad",
                ));
            }
            loss.backward()?;
            Ok(inputs.iter().map(Tensor::grad).collect())
        },
        inputs,
        options,
    )
}

/// [`gradcheck`] of gradients computed another way: `vjp(inputs, w)` (`w` f64, of the output's
/// shape) returns, for each input, the gradient of `sum(f(x) * w)` (`None` for zero), e.g. from a derived backward graph. The
/// inputs that require grad are checked against central differences of `f`.
pub fn gradcheck_vjp(
    f: impl Fn(&[Tensor]) -> Result<Tensor>,
    vjp: impl Fn(&[Tensor], &Tensor) -> Result<Vec<Option<Tensor>>>,
    inputs: &[Tensor],
    options: GradcheckOptions,
) -> Result<()> {
    for (i, x) in inputs.iter().enumerate() {
        if x.requires_grad() && x.dtype() != DType::F64 {
            return Err(TensorError::invalid(
                "gradcheck",
                format!("input {i} must be f64, got {}", x.dtype()),
            ));
        }
    }
    let output = f(inputs)?;
    let mut generator = crate::Generator::new(options.seed);
    let weights = Tensor::randn_with(&output.shape(), DType::F64, &mut generator)?;
    let weighted = |out: &Tensor| -> Result<f64> {
        out.to_dtype(DType::F64)?
            .mul(&weights)?
            .sum_all()?
            .item::<f64>()
    };
    let analytic_grads = vjp(inputs, &weights)?;
    if analytic_grads.len() != inputs.len() {
        return Err(TensorError::invalid(
            "gradcheck",
            format!(
                "expected a gradient (or None) for each of the {} inputs, got {}",
                inputs.len(),
                analytic_grads.len()
            ),
        ));
    }

    let _guard = no_grad();
    for (i, x) in inputs.iter().enumerate().filter(|(_, x)| x.requires_grad()) {
        let analytic = match &analytic_grads[i] {
            Some(g) => g.to_vec_f64()?,
            None => vec![0.0; x.numel()],
        };
        if analytic.len() != x.numel() {
            return Err(TensorError::shapes(
                "gradcheck",
                &x.shape(),
                &analytic_grads[i]
                    .as_ref()
                    .map(Tensor::shape)
                    .unwrap_or_default(),
                format!("the gradient of input {i} has another number of elements"),
            ));
        }
        let original = x.to_vec::<f64>()?;
        for (j, &analytic_j) in analytic.iter().enumerate() {
            let mut plus = original.clone();
            plus[j] += options.eps;
            x.copy_(&Tensor::from_vec(plus, &x.shape())?)?;
            let l_plus = weighted(&f(inputs)?)?;
            let mut minus = original.clone();
            minus[j] -= options.eps;
            x.copy_(&Tensor::from_vec(minus, &x.shape())?)?;
            let l_minus = weighted(&f(inputs)?)?;
            x.copy_(&Tensor::from_vec(original.clone(), &x.shape())?)?;
            let numeric = (l_plus - l_minus) / (2.0 * options.eps);
            if (analytic_j - numeric).abs() > options.atol + options.rtol * numeric.abs() {
                return Err(TensorError::Autograd(format!(
                    "gradcheck: input {i} (shape {:?}) element {j}: analytic {analytic_j:.8e} vs numeric {numeric:.8e}",
                    x.shape()
                )));
            }
        }
    }
    Ok(())
}
