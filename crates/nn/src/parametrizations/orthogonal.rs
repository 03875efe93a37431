//! `orthogonal`: PyTorch's `parametrizations.orthogonal` with the matrix-exponential map
//! and trivialization — the weight is `base @ exp(A)` (first columns), `A` skew-symmetric
//! from `original`'s lower triangle, so it stays orthogonal while `original` trains.

use super::current_value;
use super::linalg::{has_orthonormal_columns, matrix_exp, orthogonality_atol, orthonormalize};
use crate::parametrize::{Parametrization, register_parametrization};
use crate::{Module, NnError, Result, Visitor};
use tessera_tensor::{DType, Tensor, no_grad};

/// PyTorch's `_Orthogonal` with `orthogonal_map="matrix_exp"` and `use_trivialization=True`.
///
/// For an `n x k` weight (transposed first when wide) `forward(X)` embeds `tril(X)` in an
/// `n x n` matrix, takes `A = X - X^T` and returns `base @ exp(A)[:, :k]`. `right_inverse(Q)`
/// sets the `base` buffer to `Q` completed to an orthogonal matrix (made orthogonal first if
/// it is not) and returns `-I`, whose `A` is zero, so a registered orthogonal weight keeps
/// its value.
pub struct Orthogonal {
    shape: [usize; 2],
    base: Tensor,
}

impl Orthogonal {
    /// For a weight of this shape and dtype (a matrix of floats).
    pub fn new(shape: &[usize], dtype: DType) -> Result<Orthogonal> {
        let &[rows, cols] = shape else {
            return Err(NnError::Invalid(format!(
                "orthogonal expects a matrix, got a tensor of {} dimensions (batches of \
                 matrices are not supported)",
                shape.len()
            )));
        };
        if !dtype.is_float() {
            return Err(NnError::Invalid(format!(
                "orthogonal expects a floating point weight, got {dtype}"
            )));
        }
        let n = rows.max(cols);
        Ok(Orthogonal {
            shape: [rows, cols],
            base: Tensor::eye(n, n, dtype)?,
        })
    }

    /// `(n, k, transposed)`: the tall shape the maps work in.
    fn tall(&self) -> (usize, usize, bool) {
        let [rows, cols] = self.shape;
        (rows.max(cols), rows.min(cols), rows < cols)
    }

    fn check_shape(&self, x: &Tensor) -> Result<()> {
        if x.shape() != self.shape {
            return Err(NnError::Invalid(format!(
                "_Orthogonal expects a tensor of shape {:?}, got {:?}",
                self.shape,
                x.shape()
            )));
        }
        Ok(())
    }
}

impl Parametrization for Orthogonal {
    fn name(&self) -> String {
        "_Orthogonal".into()
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.check_shape(x)?;
        let (n, k, transposed) = self.tall();
        let x = if transposed { x.t()? } else { x.clone() };
        let lower: Vec<f64> = (0..n * k)
            .map(|i| if i / k >= i % k { 1.0 } else { 0.0 })
            .collect();
        let mut x = x.mul(&Tensor::from_vec(lower, &[n, k])?.to_dtype(x.dtype())?)?;
        if n != k {
            x = Tensor::cat(&[&x, &Tensor::zeros(&[n, n - k], x.dtype())?], 1)?;
        }
        let mut q = matrix_exp(&x.sub(&x.t()?)?)?;
        if n != k {
            q = q.narrow(1, 0, k)?;
        }
        let q = self.base.matmul(&q)?;
        Ok(if transposed { q.t()? } else { q })
    }

    fn right_inverse(&self, q: &Tensor) -> Result<Tensor> {
        self.check_shape(q)?;
        let _guard = no_grad();
        let (n, k, transposed) = self.tall();
        let tall = if transposed { q.t()? } else { q.clone() };
        let values = tall.to_vec_f64()?;
        let base =
            if n == k && has_orthonormal_columns(&values, n, k, orthogonality_atol(q.dtype())) {
                values
            } else {
                // Complete Q's columns with random ones and orthonormalize: Q's own columns
                // come first, so an orthonormal Q is kept.
                let random = Tensor::randn(&[n, n - k], DType::F64)?.to_vec::<f64>()?;
                let mut square = vec![0.0; n * n];
                for i in 0..n {
                    square[i * n..i * n + k].copy_from_slice(&values[i * k..(i + 1) * k]);
                    square[i * n + k..(i + 1) * n]
                        .copy_from_slice(&random[i * (n - k)..(i + 1) * (n - k)]);
                }
                orthonormalize(&square, n, n)
            };
        self.base
            .set_data(&Tensor::from_vec(base, &[n, n])?.to_dtype(q.dtype())?);
        let [rows, cols] = self.shape;
        Ok(Tensor::eye(rows, cols, q.dtype())?.mul_scalar(-1.0)?)
    }

    fn visit_buffers<'a>(&'a self, visitor: &mut dyn Visitor<'a>) {
        visitor.buffer("base", Some(&self.base), true);
    }
}

/// Makes the matrix `tensor_name` of `module` orthogonal (PyTorch's
/// `parametrizations.orthogonal(module, name)`): its rows are orthonormal when it is wide,
/// its columns when tall, and optimizers that update
/// `parametrizations.<name>.original` keep it so.
///
/// The map is always the matrix exponential (PyTorch's default for square matrices;
/// PyTorch uses Householder reflections for non-square ones, which parametrize the same
/// set differently) with trivialization, so the state dict holds
/// `parametrizations.<name>.original` and `parametrizations.<name>.0.base` as in PyTorch.
pub fn orthogonal<M: Module + ?Sized>(module: &mut M, tensor_name: &str) -> Result<()> {
    let weight = current_value(module, tensor_name)?;
    let parametrization = Orthogonal::new(&weight.shape(), weight.dtype())?;
    register_parametrization(module, tensor_name, parametrization, true)
}
