//! The matrix functions orthogonal parametrizations need and the tensor crate lacks: a
//! differentiable matrix exponential built from matmuls, and Gram-Schmidt orthonormalization
//! (QR's Q with a positive diagonal in R) for the no-grad right inverse.

use crate::{NnError, Result};
use tessera_tensor::{DType, Tensor, no_grad};

/// Taylor terms after scaling; with `‖A‖ ≤ 1/2` the remainder is below `0.5^13 / 13! ≈ 2e-14`.
const TAYLOR_DEGREE: u32 = 12;

/// `exp(a)` of a square matrix by scaling and squaring: `exp(a) = exp(a / 2^s)^(2^s)` with
/// the Taylor series (Horner form) for the scaled matrix. Every step is a recorded op, so
/// gradients flow through it.
pub(crate) fn matrix_exp(a: &Tensor) -> Result<Tensor> {
    let shape = a.shape();
    let [n, m] = shape[..] else {
        return Err(NnError::Invalid(format!(
            "matrix_exp expects a matrix, got shape {shape:?}"
        )));
    };
    if n != m {
        return Err(NnError::Invalid(format!(
            "matrix_exp expects a square matrix, got shape {shape:?}"
        )));
    }
    let frobenius = {
        let _guard = no_grad();
        a.to_vec_f64()?.iter().map(|v| v * v).sum::<f64>().sqrt()
    };
    let squarings = if frobenius > 0.5 {
        (frobenius / 0.5).log2().ceil() as i32
    } else {
        0
    };
    let scaled = a.mul_scalar(0.5f64.powi(squarings))?;
    let eye = Tensor::eye(n, n, a.dtype())?;
    // exp(A) ≈ I + A (I + A/2 (I + A/3 (... (I + A/d))))
    let mut result = eye.clone();
    for j in (1..=TAYLOR_DEGREE).rev() {
        result = eye.add(&scaled.matmul(&result)?.mul_scalar(1.0 / f64::from(j))?)?;
    }
    for _ in 0..squarings {
        result = result.matmul(&result)?;
    }
    Ok(result)
}

/// The columns of the `rows x cols` row-major `a` made orthonormal in order (QR's Q with
/// R's diagonal positive, as PyTorch's `_make_orthogonal`). A column dependent on the ones
/// before it is replaced by the first standard basis vector that is not.
pub(crate) fn orthonormalize(a: &[f64], rows: usize, cols: usize) -> Vec<f64> {
    let mut columns: Vec<Vec<f64>> = Vec::with_capacity(cols);
    for j in 0..cols {
        let column: Vec<f64> = (0..rows).map(|i| a[i * cols + j]).collect();
        let candidates = std::iter::once(column).chain((0..rows).map(|e| {
            let mut basis = vec![0.0; rows];
            basis[e] = 1.0;
            basis
        }));
        for mut v in candidates {
            // Two passes of modified Gram-Schmidt keep the result orthogonal to rounding.
            for _ in 0..2 {
                for q in &columns {
                    let dot: f64 = q.iter().zip(&v).map(|(a, b)| a * b).sum();
                    v.iter_mut().zip(q).for_each(|(x, q)| *x -= dot * q);
                }
            }
            let norm = v.iter().map(|x| x * x).sum::<f64>().sqrt();
            if norm > 1e-10 {
                columns.push(v.into_iter().map(|x| x / norm).collect());
                break;
            }
        }
    }
    let mut out = vec![0.0; rows * cols];
    for (j, column) in columns.iter().enumerate() {
        for (i, x) in column.iter().enumerate() {
            out[i * cols + j] = *x;
        }
    }
    out
}

/// Whether the `rows x cols` row-major `q` has orthonormal columns within `atol`.
pub(crate) fn has_orthonormal_columns(q: &[f64], rows: usize, cols: usize, atol: f64) -> bool {
    (0..cols).all(|a| {
        (0..cols).all(|b| {
            let dot: f64 = (0..rows).map(|i| q[i * cols + a] * q[i * cols + b]).sum();
            let expected = if a == b { 1.0 } else { 0.0 };
            (dot - expected).abs() <= atol
        })
    })
}

/// PyTorch's `1e3 * finfo(dtype).eps`, the tolerance of its orthogonality test.
pub(crate) fn orthogonality_atol(dtype: DType) -> f64 {
    let eps = match dtype {
        DType::F64 => f64::EPSILON,
        DType::F16 => 9.765625e-4,
        DType::BF16 => 7.8125e-3,
        _ => f64::from(f32::EPSILON),
    };
    1e3 * eps
}
