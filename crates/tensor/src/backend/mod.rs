//! The device seam: how memory that another crate owns (CUDA memory from `tessera-cuda`)
//! becomes tensors without this crate depending on that crate's driver.
//!
//! A device crate implements [`DeviceStorage`] for its memory and [`DeviceBackend`] for its
//! copies and kernels, and calls [`register_backend`] once at run time. From then on
//! `to_device` onto that kind of device copies through the backend, every op on tensors there
//! is sent to it ([`DeviceBackend::apply`]), and reading values back (`to_vec`, printing)
//! copies to the host. An op the backend lacks is [`TensorError::UnsupportedOnDevice`] naming
//! the op and the device; with no backend registered, `to_device` is
//! [`TensorError::DeviceUnavailable`]. CPU tensors never look at any of this: their ops pay
//! one branch on the device.
//!
//! [`TensorError::UnsupportedOnDevice`]: crate::TensorError::UnsupportedOnDevice
//! [`TensorError::DeviceUnavailable`]: crate::TensorError::DeviceUnavailable

mod device_backend;
pub(crate) mod dispatch;
mod registry;

pub use device_backend::{BackendError, DeviceBackend, DeviceOperand, DeviceStorage};
pub(crate) use registry::backend_for;
pub use registry::{register_backend, registered_backend};
