//! The run-time table of device backends, keyed by device kind. Only tensors moving onto a
//! device read it (a tensor's memory keeps its backend, so ops never look it up).

use super::DeviceBackend;
use crate::{Device, DeviceKind, Result, TensorError};
use std::sync::{Arc, RwLock};

static BACKENDS: RwLock<Vec<Arc<dyn DeviceBackend>>> = RwLock::new(Vec::new());

/// Makes `backend` serve its kind of device from now on, returning the backend it replaces.
/// A device crate calls this once (PyTorch's `torch.cuda.init`); `Cpu` and `Meta` are built
/// in and cannot be replaced.
pub fn register_backend(backend: Arc<dyn DeviceBackend>) -> Result<Option<Arc<dyn DeviceBackend>>> {
    let kind = backend.kind();
    if matches!(kind, DeviceKind::Cpu | DeviceKind::Meta) {
        return Err(TensorError::invalid(
            "register_backend",
            format!(
                "the {kind} device is built in; the {} backend cannot replace it",
                backend.name()
            ),
        ));
    }
    let mut backends = BACKENDS.write().unwrap_or_else(|e| e.into_inner());
    match backends.iter_mut().find(|b| b.kind() == kind) {
        Some(slot) => Ok(Some(std::mem::replace(slot, backend))),
        None => {
            backends.push(backend);
            Ok(None)
        }
    }
}

/// The backend registered for `kind`, if any.
pub fn registered_backend(kind: DeviceKind) -> Option<Arc<dyn DeviceBackend>> {
    let backends = BACKENDS.read().unwrap_or_else(|e| e.into_inner());
    backends.iter().find(|b| b.kind() == kind).cloned()
}

/// The backend for `device`, or `DeviceUnavailable` when no device crate registered one.
pub(crate) fn backend_for(device: Device) -> Result<Arc<dyn DeviceBackend>> {
    registered_backend(device.kind()).ok_or_else(|| TensorError::DeviceUnavailable {
        device,
        reason: format!(
            "no backend is registered for {} devices; a device crate (tessera-cuda for cuda) \
             registers one at run time, and tensors live on the cpu until then",
            device.kind()
        ),
    })
}
