//! The small conformance models (`a_mylinear`, `b_sequential`, the CNN in eval and training
//! mode) run eagerly on the emulated driver's `cuda:0` against the CPU (see
//! `conformance_models`): what `device_conformance` checks on a GPU for every model, checked
//! here on every machine for the models the emulator runs in seconds (MobileNetV2 alone takes
//! a minute): each must run through, forward and backward. (Its own test binary: the backend registry is per process.)

mod conformance_models;
mod emulated_driver;
mod emulator;

use conformance_models::{Reached, check_models, every_model};
use emulated_driver::EmulatedDriver;
use std::sync::Arc;
use tessera_tensor::Device;

#[test]
fn small_conformance_models_on_the_emulated_device_equal_the_cpu() {
    tessera_cuda::init_with_driver(Arc::new(EmulatedDriver::new(1))).unwrap();
    let small: Vec<_> = every_model()
        .into_iter()
        .filter(|m| !m.case.starts_with("r_models"))
        .collect();
    assert_eq!(
        check_models(&small, Device::Cuda(0)),
        vec![
            ("a_mylinear", Reached::Everything),
            ("b_sequential", Reached::Everything),
            // The convolution's gradients, max pooling with indices and its backward from the
            // saved indices run on the device.
            ("d_cnn_eval", Reached::Everything),
            // Training-mode batch norm's running-statistics update (its i64 batch count
            // included) runs on the device and equals the CPU's.
            ("d_cnn_train", Reached::Everything),
        ]
    );
}
