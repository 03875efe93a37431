//! The workspace's shared test helpers (`tessera-testkit`), under the name the tests use.
#![allow(unused_imports, dead_code)]

mod gradcheck;

pub use gradcheck::*;
pub use tessera_testkit::*;

use tessera_tensor::{DType, Tensor};

/// A 1-D f32 leaf tensor of `values` that requires grad.
pub fn f32_leaf(values: &[f32]) -> Tensor {
    Tensor::from_slice(values, &[values.len()])
        .unwrap()
        .requires_grad_(true)
        .unwrap()
}

/// `0, 1, 2, ...` as a tensor of `shape` and `dtype`.
pub fn iota(shape: &[usize], dtype: DType) -> Tensor {
    let n: usize = shape.iter().product();
    Tensor::arange(0.0, n as f64, 1.0, dtype)
        .unwrap()
        .reshape(shape)
        .unwrap()
}
