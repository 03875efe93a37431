//! The weights of `scripts/torchvision_models.py`: every state-dict tensor given by a formula of
//! its position and key, computed bit for bit alike in Python and Rust, so torchvision's outputs
//! for them can be stored without storing the weights (and big models fill fast in tests).

use tessera_tensor::{DType, Tensor};

/// `numel` pseudo-random values in (-1, 1) for state-dict entry `p`: with
/// `k = (7 j^2 + 13 j + 101 p) mod 1021`, element `j` is `(2k + 1) / 1021 - 1`.
pub fn pseudo_random(numel: usize, p: usize) -> impl Iterator<Item = f64> {
    (0..numel as u64).map(move |j| {
        let k = (7 * j * j + 13 * j + 101 * p as u64) % 1021;
        (2 * k + 1) as f64 / 1021.0 - 1.0
    })
}

/// State-dict entry `p` called `key` of `shape`: `num_batches_tracked` 0 (int64); tensors of
/// two or more dims `s * sqrt(3 / fan_in)`; `running_var` `1 + 0.25 (1 + s)`; other 1-D
/// `weight`s `1 + 0.1 s`; anything else `0.1 s` (float32).
pub fn formula_tensor(key: &str, shape: &[usize], p: usize) -> Tensor {
    if key.ends_with("num_batches_tracked") {
        return Tensor::zeros(shape, DType::I64).expect("a shape");
    }
    let numel: usize = shape.iter().product();
    let s = pseudo_random(numel, p);
    let values: Vec<f64> = if shape.len() >= 2 {
        let scale = (3.0 / (numel / shape[0]) as f64).sqrt();
        s.map(|s| s * scale).collect()
    } else if key.ends_with("running_var") {
        s.map(|s| 1.0 + 0.25 * (1.0 + s)).collect()
    } else if key.ends_with("weight") {
        s.map(|s| 1.0 + 0.1 * s).collect()
    } else {
        s.map(|s| 0.1 * s).collect()
    };
    Tensor::from_vec(values, shape)
        .and_then(|t| t.to_dtype(DType::F32))
        .expect("values match the shape")
}
