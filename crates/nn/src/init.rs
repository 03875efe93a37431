//! PyTorch's `torch.nn.init`: in-place initialisers (uniform, normal, constant, Xavier,
//! Kaiming, orthogonal, truncated normal), gains and fans, and [`skip_init`] to build layers
//! without running their default initialisation.
//!
//! Every initialiser writes in place under `no_grad()`, so it works on parameters (which
//! deref to their tensor). Random ones draw from `generator` when given, else from the
//! tensor crate's global generator (seeded by `tessera_tensor::manual_seed`); the samples are
//! drawn in f64 and converted to the tensor's dtype.

use crate::{NnError, Result};
use std::cell::Cell;
use tessera_tensor::{Generator, Tensor, no_grad, with_global_generator};

/// Which fan Kaiming initialisation preserves: `FanIn` keeps the variance of the forward
/// pass, `FanOut` that of the backward pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FanMode {
    #[default]
    FanIn,
    FanOut,
}

fn invalid(msg: String) -> NnError {
    NnError::Invalid(msg)
}

/// The recommended gain for a nonlinearity (PyTorch's `calculate_gain`): 1 for `linear`, the
/// conv names and `sigmoid`; 5/3 for `tanh`; sqrt(2) for `relu`; sqrt(2 / (1 + slope^2)) for
/// `leaky_relu` (`param` is the slope, 0.01 by default); 3/4 for `selu`.
pub fn calculate_gain(nonlinearity: &str, param: Option<f64>) -> Result<f64> {
    const LINEAR: [&str; 8] = [
        "linear",
        "conv1d",
        "conv2d",
        "conv3d",
        "conv_transpose1d",
        "conv_transpose2d",
        "conv_transpose3d",
        "sigmoid",
    ];
    match nonlinearity {
        n if LINEAR.contains(&n) => Ok(1.0),
        "tanh" => Ok(5.0 / 3.0),
        "relu" => Ok(2f64.sqrt()),
        "leaky_relu" => {
            let slope = param.unwrap_or(0.01);
            if !slope.is_finite() {
                return Err(invalid(format!(
                    "negative_slope {slope} not a valid number"
                )));
            }
            Ok((2.0 / (1.0 + slope * slope)).sqrt())
        }
        "selu" => Ok(3.0 / 4.0),
        other => Err(invalid(format!("Unsupported nonlinearity {other}"))),
    }
}

/// `(fan_in, fan_out)` of a weight: dims 1 and 0 times the product of the remaining (kernel)
/// dims, as PyTorch's `_calculate_fan_in_and_fan_out`; an error below two dimensions.
pub fn calculate_fan_in_and_fan_out(tensor: &Tensor) -> Result<(usize, usize)> {
    let shape = tensor.shape();
    if shape.len() < 2 {
        return Err(invalid(format!(
            "Fan in and fan out can not be computed for tensor with fewer than 2 dimensions (got shape {shape:?})"
        )));
    }
    let receptive: usize = shape[2..].iter().product();
    Ok((shape[1] * receptive, shape[0] * receptive))
}

fn correct_fan(tensor: &Tensor, mode: FanMode) -> Result<usize> {
    let (fan_in, fan_out) = calculate_fan_in_and_fan_out(tensor)?;
    Ok(match mode {
        FanMode::FanIn => fan_in,
        FanMode::FanOut => fan_out,
    })
}

/// Requires a floating-point tensor for a random initialiser.
fn expect_float(name: &str, tensor: &Tensor) -> Result<()> {
    if tensor.dtype().is_float() {
        Ok(())
    } else {
        Err(invalid(format!(
            "init.{name}: expected a floating-point tensor, got {} of shape {:?}",
            tensor.dtype(),
            tensor.shape()
        )))
    }
}

/// Draws one f64 per element with `sample`, from `generator` or the global generator, and
/// writes them into `tensor` under `no_grad()`.
fn fill_with(
    tensor: &Tensor,
    generator: Option<&mut Generator>,
    mut sample: impl FnMut(&mut Generator) -> f64,
) -> Result<()> {
    let n = tensor.numel();
    let values: Vec<f64> = match generator {
        Some(g) => (0..n).map(|_| sample(g)).collect(),
        None => with_global_generator(|g| (0..n).map(|_| sample(g)).collect()),
    };
    write(tensor, values)
}

/// Copies row-major `values` into `tensor` without recording the write.
fn write(tensor: &Tensor, values: Vec<f64>) -> Result<()> {
    let _guard = no_grad();
    let source = Tensor::from_vec(values, &tensor.shape())?;
    tensor.copy_(&source)?;
    Ok(())
}

/// Fills `tensor` with samples from U(a, b).
pub fn uniform_(tensor: &Tensor, a: f64, b: f64, generator: Option<&mut Generator>) -> Result<()> {
    expect_float("uniform_", tensor)?;
    if a.is_nan() || b.is_nan() || a > b {
        return Err(invalid(format!(
            "init.uniform_: expects a <= b, got a={a}, b={b}"
        )));
    }
    fill_with(tensor, generator, |g| a + (b - a) * g.uniform())
}

/// Fills `tensor` with samples from N(mean, std^2).
pub fn normal_(
    tensor: &Tensor,
    mean: f64,
    std: f64,
    generator: Option<&mut Generator>,
) -> Result<()> {
    expect_float("normal_", tensor)?;
    if std.is_nan() || std < 0.0 {
        return Err(invalid(format!(
            "init.normal_: expects std >= 0.0, got {std}"
        )));
    }
    fill_with(tensor, generator, |g| mean + std * g.normal())
}

/// Fills `tensor` with samples from N(mean, std^2) restricted to `[a, b]`, by the inverse
/// CDF as PyTorch's `trunc_normal_`.
pub fn trunc_normal_(
    tensor: &Tensor,
    mean: f64,
    std: f64,
    a: f64,
    b: f64,
    generator: Option<&mut Generator>,
) -> Result<()> {
    expect_float("trunc_normal_", tensor)?;
    if std.is_nan() || std <= 0.0 || a.is_nan() || b.is_nan() || a >= b {
        return Err(invalid(format!(
            "init.trunc_normal_: expects std > 0 and a < b, got std={std}, a={a}, b={b}"
        )));
    }
    let lo = normal_cdf((a - mean) / std);
    let hi = normal_cdf((b - mean) / std);
    fill_with(tensor, generator, |g| {
        let p = lo + (hi - lo) * g.uniform();
        (mean + std * normal_quantile(p)).clamp(a, b)
    })
}

/// Fills `tensor` with `value`.
pub fn constant_(tensor: &Tensor, value: f64) -> Result<()> {
    let _guard = no_grad();
    tensor.fill_(value)?;
    Ok(())
}

pub fn zeros_(tensor: &Tensor) -> Result<()> {
    constant_(tensor, 0.0)
}

pub fn ones_(tensor: &Tensor) -> Result<()> {
    constant_(tensor, 1.0)
}

/// Fills a 2-D tensor with the identity matrix (ones on the main diagonal).
pub fn eye_(tensor: &Tensor) -> Result<()> {
    let shape = tensor.shape();
    let [rows, cols] = shape[..] else {
        return Err(invalid(format!(
            "init.eye_: only tensors with 2 dimensions are supported, got shape {shape:?}"
        )));
    };
    let values = (0..rows * cols)
        .map(|i| if i / cols == i % cols { 1.0 } else { 0.0 })
        .collect();
    write(tensor, values)
}

/// Glorot uniform: U(-bound, bound) with `bound = gain * sqrt(6 / (fan_in + fan_out))`.
pub fn xavier_uniform_(
    tensor: &Tensor,
    gain: f64,
    generator: Option<&mut Generator>,
) -> Result<()> {
    let (fan_in, fan_out) = calculate_fan_in_and_fan_out(tensor)?;
    let std = gain * (2.0 / (fan_in + fan_out) as f64).sqrt();
    let bound = 3f64.sqrt() * std;
    uniform_(tensor, -bound, bound, generator)
}

/// Glorot normal: N(0, std^2) with `std = gain * sqrt(2 / (fan_in + fan_out))`.
pub fn xavier_normal_(tensor: &Tensor, gain: f64, generator: Option<&mut Generator>) -> Result<()> {
    let (fan_in, fan_out) = calculate_fan_in_and_fan_out(tensor)?;
    let std = gain * (2.0 / (fan_in + fan_out) as f64).sqrt();
    normal_(tensor, 0.0, std, generator)
}

/// The standard deviation Kaiming initialisation aims for; `None` for an empty tensor, which
/// PyTorch leaves untouched.
fn kaiming_std(tensor: &Tensor, a: f64, mode: FanMode, nonlinearity: &str) -> Result<Option<f64>> {
    if tensor.numel() == 0 {
        return Ok(None);
    }
    let fan = correct_fan(tensor, mode)?;
    let gain = calculate_gain(nonlinearity, Some(a))?;
    Ok(Some(gain / (fan as f64).sqrt()))
}

/// He uniform: U(-bound, bound) with `bound = gain * sqrt(3 / fan)`; `a` is the negative
/// slope passed to [`calculate_gain`] (PyTorch's defaults: `a = 0`, `FanIn`, `"leaky_relu"`).
pub fn kaiming_uniform_(
    tensor: &Tensor,
    a: f64,
    mode: FanMode,
    nonlinearity: &str,
    generator: Option<&mut Generator>,
) -> Result<()> {
    match kaiming_std(tensor, a, mode, nonlinearity)? {
        Some(std) => {
            let bound = 3f64.sqrt() * std;
            uniform_(tensor, -bound, bound, generator)
        }
        None => Ok(()),
    }
}

/// He normal: N(0, std^2) with `std = gain / sqrt(fan)`.
pub fn kaiming_normal_(
    tensor: &Tensor,
    a: f64,
    mode: FanMode,
    nonlinearity: &str,
    generator: Option<&mut Generator>,
) -> Result<()> {
    match kaiming_std(tensor, a, mode, nonlinearity)? {
        Some(std) => normal_(tensor, 0.0, std, generator),
        None => Ok(()),
    }
}

/// A (semi-)orthogonal matrix times `gain`, viewing the tensor as `[shape[0], rest]`: the Q
/// of a Gaussian matrix's QR decomposition with R's diagonal made positive, as PyTorch.
pub fn orthogonal_(tensor: &Tensor, gain: f64, generator: Option<&mut Generator>) -> Result<()> {
    let shape = tensor.shape();
    if shape.len() < 2 {
        return Err(invalid(format!(
            "init.orthogonal_: only tensors with 2 or more dimensions are supported, got shape {shape:?}"
        )));
    }
    expect_float("orthogonal_", tensor)?;
    if tensor.numel() == 0 {
        return Ok(());
    }
    let rows = shape[0];
    let cols = tensor.numel() / rows;
    let sample = |g: &mut Generator| (0..rows * cols).map(|_| g.normal()).collect::<Vec<_>>();
    let flat = match generator {
        Some(g) => sample(g),
        None => with_global_generator(sample),
    };
    // QR of the tall orientation: `m x n` with `m >= n`, stored column-major as columns.
    let (m, n) = (rows.max(cols), rows.min(cols));
    let mut columns: Vec<Vec<f64>> = (0..n)
        .map(|j| {
            (0..m)
                .map(|i| {
                    if rows >= cols {
                        flat[i * cols + j]
                    } else {
                        flat[j * cols + i]
                    }
                })
                .collect()
        })
        .collect();
    orthonormalize(&mut columns);
    let values = (0..rows * cols)
        .map(|k| {
            let (r, c) = (k / cols, k % cols);
            let q = if rows >= cols {
                columns[c][r]
            } else {
                columns[r][c]
            };
            q * gain
        })
        .collect();
    write(tensor, values)
}

/// Modified Gram-Schmidt with one re-orthogonalisation pass: the Q of a QR decomposition
/// whose R has a positive diagonal (the sign-corrected Q PyTorch returns).
fn orthonormalize(columns: &mut [Vec<f64>]) {
    for j in 0..columns.len() {
        let (done, rest) = columns.split_at_mut(j);
        let v = &mut rest[0];
        for _ in 0..2 {
            for q in done.iter() {
                let dot: f64 = q.iter().zip(v.iter()).map(|(a, b)| a * b).sum();
                v.iter_mut().zip(q).for_each(|(x, qi)| *x -= dot * qi);
            }
        }
        let norm = v.iter().map(|x| x * x).sum::<f64>().sqrt();
        v.iter_mut().for_each(|x| *x /= norm);
    }
}

/// Standard normal CDF, from the complementary error function (fractional error < 1.2e-7).
fn normal_cdf(x: f64) -> f64 {
    0.5 * erfc(-x / std::f64::consts::SQRT_2)
}

/// `erfc` by Numerical Recipes' Chebyshev fit (`erfcc`).
fn erfc(x: f64) -> f64 {
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let poly = -z * z - 1.26551223
        + t * (1.00002368
            + t * (0.37409196
                + t * (0.09678418
                    + t * (-0.18628806
                        + t * (0.27886807
                            + t * (-1.13520398
                                + t * (1.48851587 + t * (-0.82215223 + t * 0.17087277))))))));
    let r = t * poly.exp();
    if x >= 0.0 { r } else { 2.0 - r }
}

/// Standard normal quantile by Acklam's rational approximation (relative error < 1.2e-9).
fn normal_quantile(p: f64) -> f64 {
    const A: [f64; 6] = [
        -3.969683028665376e+01,
        2.209460984245205e+02,
        -2.759285104469687e+02,
        1.38357751867269e+02,
        -3.066479806614716e+01,
        2.506628277459239e+00,
    ];
    const B: [f64; 5] = [
        -5.447609879822406e+01,
        1.615858368580409e+02,
        -1.556989798598866e+02,
        6.680131188771972e+01,
        -1.328068155288572e+01,
    ];
    const C: [f64; 6] = [
        -7.784894002430293e-03,
        -3.223964580411365e-01,
        -2.400758277161838e+00,
        -2.549732539343734e+00,
        4.374664141464968e+00,
        2.938163982698783e+00,
    ];
    const D: [f64; 4] = [
        7.784695709041462e-03,
        3.224671290700398e-01,
        2.445134137142996e+00,
        3.754408661907416e+00,
    ];
    let p = p.clamp(1e-300, 1.0 - 1e-16);
    let tail = |q: f64| {
        (((((C[0] * q + C[1]) * q + C[2]) * q + C[3]) * q + C[4]) * q + C[5])
            / ((((D[0] * q + D[1]) * q + D[2]) * q + D[3]) * q + 1.0)
    };
    if p < 0.02425 {
        tail((-2.0 * p.ln()).sqrt())
    } else if p > 1.0 - 0.02425 {
        -tail((-2.0 * (1.0 - p).ln()).sqrt())
    } else {
        let q = p - 0.5;
        let r = q * q;
        (((((A[0] * r + A[1]) * r + A[2]) * r + A[3]) * r + A[4]) * r + A[5]) * q
            / (((((B[0] * r + B[1]) * r + B[2]) * r + B[3]) * r + B[4]) * r + 1.0)
    }
}

thread_local! {
    static SKIPPING: Cell<bool> = const { Cell::new(false) };
}

/// Runs `build` with default initialisation switched off on this thread, like PyTorch's
/// `torch.nn.utils.skip_init`: layers constructed inside keep zero-filled parameters (instead
/// of PyTorch's uninitialised memory) until their `reset_parameters()` or an init function
/// fills them. BatchNorm's running statistics are buffers and are always set.
///
/// ```
/// use tessera_nn::{Linear, init};
/// let layer = init::skip_init(|| Linear::new(4, 3))?;
/// assert!(layer.weight.to_vec::<f32>()?.iter().all(|&w| w == 0.0));
/// # Ok::<(), tessera_nn::NnError>(())
/// ```
pub fn skip_init<R>(build: impl FnOnce() -> R) -> R {
    let _restore = tessera_tensor::Restore::set(&SKIPPING, true);
    build()
}

/// Whether constructors are inside [`skip_init`] on this thread.
pub fn is_init_skipped() -> bool {
    SKIPPING.with(|s| s.get())
}
