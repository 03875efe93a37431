//! On a machine with an NVIDIA GPU: every conformance model compiled for `cuda:0` through the
//! system driver (generated kernels, GEMM and convolution included, in CUDA graphs) gives the
//! CPU's output on two calls, the second replaying the captured graphs; each model's compile
//! report (device kernels, host steps and why) is printed. Run with
//! `cargo test -p tessera --test compile_cuda_gpu -- --ignored --nocapture`.

mod compile_cuda_models;

use compile_cuda_models::{check_compiled, every_model};
use tessera::tensor::Device;

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn every_conformance_model_compiled_for_the_gpu_equals_the_cpu() {
    let backend = tessera::cuda::init().expect("an NVIDIA driver and GPU");
    eprintln!("{:?}", backend.properties(0));
    for m in every_model() {
        let compiled = check_compiled(&m, Device::Cuda(0), 1e-4, 1e-4);
        eprintln!("{} compiled on cuda:0:\n{}", compiled.case, compiled.report);
    }
}
