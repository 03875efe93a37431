//! The buffer behind a tensor and every view of it: host memory, memory a device crate owns
//! (reached through its registered backend), or no memory at all (meta tensors).

use crate::backend::{DeviceBackend, DeviceStorage};
use crate::layout::Layout;
use crate::storage::CpuStorage;
use crate::{DType, Device, Result, TensorError};
use std::fmt;
use std::sync::Arc;

/// Memory a device crate owns, with the backend that reads, writes and computes on it (kept
/// here so that ops on it never consult the registry).
pub(crate) struct DeviceBuffer {
    pub(crate) memory: Box<dyn DeviceStorage>,
    pub(crate) backend: Arc<dyn DeviceBackend>,
}

impl fmt::Debug for DeviceBuffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeviceBuffer")
            .field("memory", &self.memory)
            .field("backend", &self.backend.name())
            .finish()
    }
}

impl DeviceBuffer {
    /// Wraps memory a backend returned for `op`, checking that it is what was asked for.
    pub(crate) fn new(
        op: &str,
        memory: Box<dyn DeviceStorage>,
        backend: Arc<dyn DeviceBackend>,
        device: Device,
        dtype: DType,
        numel: usize,
    ) -> Result<DeviceBuffer> {
        let got = (memory.device(), memory.dtype(), memory.numel());
        if got != (device, dtype, numel) {
            return Err(TensorError::invalid(
                op,
                format!(
                    "the {} backend returned {} elements of {} on {} where {numel} elements of \
                     {dtype} on {device} were expected",
                    backend.name(),
                    got.2,
                    got.1,
                    got.0
                ),
            ));
        }
        Ok(DeviceBuffer { memory, backend })
    }

    /// The elements `layout` selects, copied to the host packed row-major.
    pub(crate) fn to_host(&self, layout: &Layout) -> Result<CpuStorage> {
        let host = self.backend.copy_to_cpu(self.memory.as_ref(), layout)?;
        if host.dtype() != self.memory.dtype() || host.len() != layout.numel() {
            return Err(TensorError::invalid(
                "to_cpu",
                format!(
                    "the {} backend copied {} elements of {} to the host where {} elements of {} \
                     were expected",
                    self.backend.name(),
                    host.len(),
                    host.dtype(),
                    layout.numel(),
                    self.memory.dtype()
                ),
            ));
        }
        Ok(host)
    }

    /// Overwrites the elements `layout` selects with `values` (packed row-major).
    pub(crate) fn write(&mut self, op: &str, layout: &Layout, values: &CpuStorage) -> Result<()> {
        let device = self.memory.device();
        self.backend
            .write_from_cpu(self.memory.as_mut(), layout, values)
            .unwrap_or_else(|| Err(unsupported(op, device, self.backend.as_ref())))
    }
}

/// The error for an op or copy that `backend` has no kernel for.
pub(crate) fn unsupported(op: &str, device: Device, backend: &dyn DeviceBackend) -> TensorError {
    TensorError::UnsupportedOnDevice {
        op: op.to_string(),
        device,
        backend: backend.name().to_string(),
    }
}

/// The buffer of a tensor on its device.
#[derive(Debug)]
pub(crate) enum Storage {
    Cpu(CpuStorage),
    /// Memory owned by a device crate.
    Device(DeviceBuffer),
    /// A meta tensor's storage: no data (its tensor's layout and dtype say what it would hold).
    Meta,
}

impl Storage {
    /// The host buffer, or an error naming the op for memory elsewhere (CPU kernels call
    /// this; dispatch sends ops on other devices to their backend before that).
    pub(crate) fn cpu(&self, op: &str) -> Result<&CpuStorage> {
        match self {
            Storage::Cpu(s) => Ok(s),
            Storage::Device(d) => Err(unsupported(op, d.memory.device(), d.backend.as_ref())),
            Storage::Meta => Err(TensorError::NoData { op: op.to_string() }),
        }
    }

    /// The elements `layout` selects, packed row-major into a new host buffer, whatever the
    /// device (`to_device(Cpu)`, reading values, moving between devices).
    pub(crate) fn to_host(&self, op: &str, layout: &Layout) -> Result<CpuStorage> {
        match self {
            Storage::Cpu(s) => Ok(match layout.contiguous_range() {
                Some(range) => s.copy_range(range),
                None => s.gather(layout.offsets()),
            }),
            Storage::Device(d) => d.to_host(layout),
            Storage::Meta => Err(TensorError::NoData { op: op.to_string() }),
        }
    }
}
