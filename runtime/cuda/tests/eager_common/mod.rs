//! Helpers of the eager CUDA-tensor tests on the emulated driver: the backend registered once
//! per test binary on three emulated devices, deterministic inputs, and running an op on the
//! CPU and on the device to compare every output within a tolerance.

#![allow(dead_code)]

use super::emulated_driver::EmulatedDriver;
use std::sync::{Arc, OnceLock};
use tessera_cuda::{CudaBackend, init_with_driver};
use tessera_tensor::{DType, Device, Op, Result, Tensor};

pub const CUDA: Device = Device::Cuda(0);

/// The emulated driver and the backend registered on it, once for the binary.
pub fn backend() -> &'static (Arc<EmulatedDriver>, Arc<CudaBackend>) {
    static BACKEND: OnceLock<(Arc<EmulatedDriver>, Arc<CudaBackend>)> = OnceLock::new();
    BACKEND.get_or_init(|| {
        let driver = Arc::new(EmulatedDriver::new(3));
        let backend = init_with_driver(driver.clone()).expect("registering the backend");
        (driver, backend)
    })
}

/// `t` copied to `cuda:0`.
pub fn cuda(t: &Tensor) -> Result<Tensor> {
    backend();
    t.to_device(CUDA)
}

/// A sweep of [-4, 4] with, where `special`, signed zeros, infinities and NaN mixed in.
pub fn values(n: usize, seed: usize, special: bool) -> Vec<f64> {
    const SPECIAL: [f64; 5] = [0.0, -0.0, f64::INFINITY, f64::NEG_INFINITY, f64::NAN];
    (0..n)
        .map(|i| {
            let k = i * 7919 + seed * 104_729;
            if special && k % 13 == 5 {
                SPECIAL[(k / 13) % SPECIAL.len()]
            } else {
                (k % 997) as f64 / 997.0 * 8.0 - 4.0
            }
        })
        .collect()
}

/// A tensor of `shape` and `dtype` holding [`values`].
pub fn tensor(dtype: DType, shape: &[usize], seed: usize, special: bool) -> Tensor {
    let v = values(shape.iter().product(), seed, special);
    Tensor::from_vec(v, shape).unwrap().to_dtype(dtype).unwrap()
}

/// Whether `got` (from the device) equals `want` (CPU eager) within `tol` relative to
/// max(1, |want|): NaN matches NaN, infinities match exactly.
pub fn close(want: f64, got: f64, tol: f64) -> bool {
    (want.is_nan() && got.is_nan())
        || want == got
        || (want.is_finite() && (want - got).abs() <= tol * want.abs().max(1.0))
}

/// Compares every element of `got` (on the device) with `want` (CPU), shapes and dtypes too.
pub fn assert_close(what: &str, want: &Tensor, got: &Tensor, tol: f64) {
    assert_eq!(got.device(), CUDA, "{what}");
    assert_eq!(
        (got.shape(), got.dtype()),
        (want.shape(), want.dtype()),
        "{what}"
    );
    let (wv, gv) = (want.to_vec_f64().unwrap(), got.to_vec_f64().unwrap());
    for (i, (a, b)) in wv.iter().zip(&gv).enumerate() {
        assert!(close(*a, *b, tol), "{what}: element {i}: cpu {a}, cuda {b}");
    }
}

/// Runs `op` on the CPU and on the device (`inputs` copied there) and compares every output
/// within `tol`.
pub fn same_on_device_within(what: &str, op: &Op, inputs: &[Tensor], tol: f64) {
    let refs: Vec<&Tensor> = inputs.iter().collect();
    let want = op
        .apply(&refs)
        .unwrap_or_else(|e| panic!("{what} on the cpu: {e}"));
    let on_device: Vec<Tensor> = inputs.iter().map(|t| cuda(t).unwrap()).collect();
    same_views_on_device_within(what, op, inputs, &on_device, &want, tol);
}

/// Runs `op` on `device_inputs` (views on the device of `inputs`) and compares with `want`.
pub fn same_views_on_device_within(
    what: &str,
    op: &Op,
    inputs: &[Tensor],
    device_inputs: &[Tensor],
    want: &[Tensor],
    tol: f64,
) {
    assert_eq!(inputs.len(), device_inputs.len(), "{what}");
    let refs: Vec<&Tensor> = device_inputs.iter().collect();
    let got = op
        .apply(&refs)
        .unwrap_or_else(|e| panic!("{what} on cuda: {e}"));
    assert_eq!(want.len(), got.len(), "{what}");
    for (w, g) in want.iter().zip(&got) {
        assert_close(what, w, g, tol);
    }
}
