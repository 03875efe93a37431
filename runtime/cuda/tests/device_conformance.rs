//! On a machine with an NVIDIA GPU: every conformance model (`a_mylinear`, `b_sequential`, the
//! CNN in eval and training mode, MobileNetV2, ViT, the tiny GPT) run eagerly on `cuda:0`
//! through the system driver against the same model on the CPU and PyTorch's recorded output
//! (see `conformance_models`). A mismatch or a device failure fails; the first op each model
//! still lacks on the device is printed. Run with
//! `cargo test -p tessera-cuda --test device_conformance -- --ignored --nocapture`.

mod conformance_models;

use conformance_models::{check_models, every_model};
use tessera_tensor::Device;

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn every_conformance_model_on_the_gpu_equals_the_cpu() {
    let backend = tessera_cuda::init().expect("an NVIDIA driver and GPU");
    eprintln!("{:?}", backend.properties(0));
    // Each model's progress is printed as it finishes.
    let reached = check_models(&every_model(), Device::Cuda(0));
    assert_eq!(reached.len(), every_model().len());
}
