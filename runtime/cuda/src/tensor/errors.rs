//! The CUDA backend's errors as the tensor crate's: a missing device stays
//! `DeviceUnavailable`; every other failure is `DeviceFailure`, naming the op and the device
//! and keeping the [`CudaError`] as its source.

use crate::CudaError;
use tessera_tensor::backend::BackendError;
use tessera_tensor::{Device, TensorError};

/// `e`, raised while running `op` on `device` with the backend `backend`, as a tensor error.
pub(crate) fn tensor_error(op: &str, device: Device, backend: &str, e: CudaError) -> TensorError {
    match e {
        CudaError::DeviceUnavailable { reason } => {
            TensorError::DeviceUnavailable { device, reason }
        }
        CudaError::Tensor(inner) => inner,
        other => TensorError::DeviceFailure {
            op: op.to_string(),
            device,
            backend: backend.to_string(),
            source: BackendError::new(other),
        },
    }
}
