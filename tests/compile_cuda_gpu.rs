//! On a machine with an NVIDIA GPU: every conformance model compiled for `cuda:0` through the
//! system driver (generated kernels, GEMM and convolution included, in CUDA graphs) gives the
//! CPU's output on two calls, the second replaying the captured graphs; each model's compile
//! report (device kernels, host steps and why) is printed; compiled SGD and Adam training
//! steps on `cuda:0` equal the CPU's and write their updates in place. Run with
//! `cargo test -p tessera --test compile_cuda_gpu -- --ignored --nocapture`.

mod compile_cuda_models;
mod compile_train_cuda_steps;

use compile_cuda_models::{check_compiled, every_model};
use compile_train_cuda_steps::sgd_and_adam_update_in_place;
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

#[test]
#[ignore = "needs a CUDA GPU"]
fn compiled_training_steps_on_the_gpu_update_their_parameters_in_place() {
    tessera::cuda::init().expect("an NVIDIA driver and GPU");
    for graphs in [true, false] {
        sgd_and_adam_update_in_place(Device::Cuda(0), graphs, &mut |_, _| {});
    }
}
