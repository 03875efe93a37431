//! Making CUDA tensors available: [`init`] registers the backend on the machine's driver,
//! [`init_with_driver`] on any [`CudaDriver`] (the tests' emulated one). Until one of them
//! runs, `to_device(Device::Cuda(i))` is `TensorError::DeviceUnavailable`.

use super::CudaBackend;
use crate::driver::{CudaDriver, SystemDriver};
use crate::{CudaError, Result};
use std::sync::{Arc, Mutex};

/// The backend registered last by this crate (what compiled programs run on).
static CURRENT: Mutex<Option<Arc<CudaBackend>>> = Mutex::new(None);
use tessera_tensor::backend::register_backend;

/// Registers the CUDA backend on this machine's driver (PyTorch's `torch.cuda.init`). Without
/// libcuda, or with no device, it is [`CudaError::DeviceUnavailable`] and registers nothing;
/// it never panics. Calling it again replaces the backend for new tensors (existing ones keep
/// theirs).
pub fn init() -> Result<Arc<CudaBackend>> {
    init_with_driver(Arc::new(SystemDriver::new()?))
}

/// Registers the CUDA backend on `driver`.
pub fn init_with_driver(driver: Arc<dyn CudaDriver>) -> Result<Arc<CudaBackend>> {
    if driver.device_count() == 0 {
        return Err(CudaError::DeviceUnavailable {
            reason: format!("the {} driver has no device", driver.name()),
        });
    }
    let backend = Arc::new(CudaBackend::new(driver));
    register_backend(backend.clone())?;
    *CURRENT.lock().unwrap_or_else(|e| e.into_inner()) = Some(backend.clone());
    Ok(backend)
}

/// The CUDA backend registered by [`init`] or [`init_with_driver`]; when none was, [`init`]
/// registers the machine's driver now ([`CudaError::DeviceUnavailable`] without one).
pub fn current_backend() -> Result<Arc<CudaBackend>> {
    if let Some(b) = CURRENT.lock().unwrap_or_else(|e| e.into_inner()).clone() {
        return Ok(b);
    }
    init()
}
