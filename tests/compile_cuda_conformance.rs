//! The small conformance models (the linear note model, the MLP, the CNN) compiled for a CUDA
//! device on the emulated driver (the PTX emulator runs every kernel on the CPU): each gives
//! the CPU's output, the MLP and the CNN with their linear layers and convolutions as device
//! GEMM/convolution kernels and no host step, and its second call replays the CUDA graph. `compile_cuda_gpu` runs every
//! conformance model the same way on a real GPU. (Its own test binary: the backend registry is
//! per process.)

mod compile_cuda_models;
#[path = "../runtime/cuda/tests/emulated_driver/mod.rs"]
mod emulated_driver;
#[path = "../runtime/cuda/tests/emulator/mod.rs"]
mod emulator;

use compile_cuda_models::{check_compiled, every_model};
use emulated_driver::EmulatedDriver;
use std::sync::Arc;
use tessera::cuda::init_with_driver;
use tessera::tensor::Device;

#[test]
fn small_conformance_models_compiled_on_the_emulated_device_equal_the_cpu() {
    init_with_driver(Arc::new(EmulatedDriver::new(1))).expect("registering the backend");
    let small = ["a_mylinear", "b_sequential", "d_cnn_eval"];
    for m in every_model().iter().filter(|m| small.contains(&m.case)) {
        let compiled = check_compiled(m, Device::Cuda(0), 1e-5, 1e-5);
        let (case, report) = (compiled.case, &compiled.report);
        if case == "a_mylinear" {
            // Its input is one vector: a vector-matrix product, which the lowering leaves to
            // the eager kernel (a GEMM output of one dim); it runs as an eager device op.
            assert_eq!(report.host_steps.len(), 1, "{case}:\n{report}");
            continue;
        }
        assert!(report.host_steps.is_empty(), "{case}:\n{report}");
        assert!(report.device_products >= 1, "{case}:\n{report}");
    }
}
