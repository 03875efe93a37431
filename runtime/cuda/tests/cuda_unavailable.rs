//! CUDA tensors where no backend is registered (its own test binary: the registry is per
//! process): moving a tensor to a CUDA device is `DeviceUnavailable`, and `tessera_cuda::init`
//! on a machine without libcuda is `DeviceUnavailable` too, registers nothing, and never
//! panics.

use tessera_cuda::{CudaError, driver_present, init};
use tessera_tensor::backend::registered_backend;
use tessera_tensor::{Device, DeviceKind, Tensor, TensorError};

#[test]
fn a_tensor_cannot_move_to_cuda_without_a_backend() {
    let x = Tensor::from_vec(vec![1.0f32, 2.0], &[2]).unwrap();
    match x.to_device(Device::Cuda(0)) {
        Err(TensorError::DeviceUnavailable { device, reason }) => {
            assert_eq!(device, Device::Cuda(0));
            assert!(reason.contains("tessera-cuda"), "{reason}");
        }
        other => panic!("expected DeviceUnavailable, got {other:?}"),
    }
}

#[test]
fn init_without_libcuda_is_unavailable_and_registers_nothing() {
    if driver_present() {
        println!("skipped: libcuda is present on this machine");
        return;
    }
    match init() {
        Err(CudaError::DeviceUnavailable { reason }) => assert!(reason.contains("libcuda")),
        other => panic!("expected DeviceUnavailable, got {other:?}"),
    }
    assert!(registered_backend(DeviceKind::Cuda).is_none());
    let x = Tensor::from_vec(vec![1.0f64], &[1]).unwrap();
    assert!(matches!(
        x.to_device(Device::Cuda(0)),
        Err(TensorError::DeviceUnavailable { .. })
    ));
}
