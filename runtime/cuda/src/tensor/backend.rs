//! [`CudaBackend`]: the tensor crate's [`DeviceBackend`] for `cuda` devices, on any
//! [`CudaDriver`]. It keeps a [`DeviceState`] per device (made on first use), copies through
//! the driver, and runs eager ops as cached kernels ([`super::eager`]).

use super::copies::{download, upload, write};
use super::device_state::DeviceState;
use super::eager;
use super::errors::tensor_error;
use super::storage::CudaStorage;
use crate::allocator::AllocatorStats;
use crate::driver::{CudaDriver, DeviceProperties};
use crate::{CudaError, Result};
use std::any::Any;
use std::fmt;
use std::sync::{Arc, Mutex};
use tessera_tensor::backend::{DeviceBackend, DeviceOperand, DeviceStorage};
use tessera_tensor::layout::Layout;
use tessera_tensor::storage::CpuStorage;
use tessera_tensor::{Device, DeviceKind, Op, TensorError, TensorMeta};

/// CUDA tensors on the devices of one driver.
pub struct CudaBackend {
    driver: Arc<dyn CudaDriver>,
    devices: Mutex<Vec<Option<Arc<DeviceState>>>>,
}

impl fmt::Debug for CudaBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CudaBackend")
            .field("driver", &self.driver)
            .finish()
    }
}

/// `m` as CUDA storage (dispatch only gives a backend memory it made, so this fails only on
/// a broken invariant, which is reported rather than panicking).
fn cuda_storage(m: &dyn DeviceStorage) -> std::result::Result<&CudaStorage, TensorError> {
    (m as &dyn Any)
        .downcast_ref::<CudaStorage>()
        .ok_or_else(|| TensorError::InvalidArgument {
            op: "cuda".into(),
            msg: format!("{m:?} is not memory of the CUDA backend"),
        })
}

impl CudaBackend {
    /// A backend on `driver` (not registered: see [`crate::init_with_driver`]).
    pub fn new(driver: Arc<dyn CudaDriver>) -> CudaBackend {
        let count = driver.device_count();
        CudaBackend {
            driver,
            devices: Mutex::new(vec![None; count]),
        }
    }

    pub fn driver(&self) -> &Arc<dyn CudaDriver> {
        &self.driver
    }

    /// Device `ordinal`'s state, made on its first use.
    pub(crate) fn state(&self, ordinal: usize) -> Result<Arc<DeviceState>> {
        let mut devices = self.devices.lock().unwrap_or_else(|e| e.into_inner());
        let count = devices.len();
        let slot = devices
            .get_mut(ordinal)
            .ok_or_else(|| CudaError::DeviceUnavailable {
                reason: format!(
                    "no device cuda:{ordinal}: the {} driver has {count}",
                    self.driver.name()
                ),
            })?;
        if let Some(state) = slot {
            return Ok(Arc::clone(state));
        }
        let state = Arc::new(DeviceState::new(&self.driver, ordinal)?);
        *slot = Some(Arc::clone(&state));
        Ok(state)
    }

    /// What device `ordinal` is.
    pub fn properties(&self, ordinal: usize) -> Result<DeviceProperties> {
        Ok(self.state(ordinal)?.properties.clone())
    }

    /// The caching allocator's counters on device `ordinal`.
    pub fn memory_stats(&self, ordinal: usize) -> Result<AllocatorStats> {
        Ok(self.state(ordinal)?.allocator.stats())
    }

    /// Returns device `ordinal`'s cached memory to the driver (PyTorch's
    /// `torch.cuda.empty_cache`).
    pub fn empty_cache(&self, ordinal: usize) -> Result<()> {
        self.state(ordinal)?.allocator.empty_cache()
    }

    /// How many eager ops have loaded kernels on device `ordinal`.
    pub fn cached_kernels(&self, ordinal: usize) -> Result<usize> {
        Ok(self.state(ordinal)?.kernels.len())
    }

    /// Waits for the work queued on device `ordinal`.
    pub fn synchronize(&self, ordinal: usize) -> Result<()> {
        self.driver.synchronize(ordinal)
    }

    fn error(&self, op: &str, device: Device) -> impl Fn(CudaError) -> TensorError + '_ {
        let op = op.to_string();
        move |e| tensor_error(&op, device, self.driver.name(), e)
    }
}

impl DeviceBackend for CudaBackend {
    fn kind(&self) -> DeviceKind {
        DeviceKind::Cuda
    }

    fn name(&self) -> &str {
        self.driver.name()
    }

    fn copy_from_cpu(
        &self,
        host: &CpuStorage,
        device: Device,
    ) -> tessera_tensor::Result<Box<dyn DeviceStorage>> {
        let Device::Cuda(ordinal) = device else {
            return Err(TensorError::InvalidArgument {
                op: "to_device".into(),
                msg: format!(
                    "the {} backend serves cuda devices, not {device}",
                    self.name()
                ),
            });
        };
        let fail = self.error("to_device", device);
        let state = self.state(ordinal).map_err(&fail)?;
        Ok(Box::new(upload(&state.allocator, host).map_err(&fail)?))
    }

    fn copy_to_cpu(
        &self,
        memory: &dyn DeviceStorage,
        layout: &Layout,
    ) -> tessera_tensor::Result<CpuStorage> {
        let storage = cuda_storage(memory)?;
        download(storage, layout).map_err(self.error("to_cpu", memory.device()))
    }

    fn write_from_cpu(
        &self,
        memory: &mut dyn DeviceStorage,
        layout: &Layout,
        values: &CpuStorage,
    ) -> Option<tessera_tensor::Result<()>> {
        let device = memory.device();
        Some(
            cuda_storage(memory)
                .and_then(|s| write(s, layout, values).map_err(self.error("copy_", device))),
        )
    }

    fn apply(
        &self,
        op: &Op,
        inputs: &[DeviceOperand<'_>],
        outputs: &[TensorMeta],
    ) -> Option<tessera_tensor::Result<Vec<Box<dyn DeviceStorage>>>> {
        eager::apply(self, op, inputs, outputs)
    }
}
