//! The two traits a device crate implements: its memory ([`DeviceStorage`]) and its copies
//! and kernels ([`DeviceBackend`]). Layouts stay with the tensor, as in candle's
//! `BackendStorage`: a backend sees memory plus the layout (shape, strides, offset) to read it
//! with, and returns packed row-major memory.

use crate::layout::Layout;
use crate::storage::CpuStorage;
use crate::{DType, Device, DeviceKind, Op, Result, TensorMeta};
use std::any::Any;
use std::fmt;
use std::sync::Arc;

/// A backend's own error inside [`TensorError::DeviceFailure`], shared so that
/// [`TensorError`] stays `Clone`; two are equal when they are the same failure.
///
/// [`TensorError`]: crate::TensorError
/// [`TensorError::DeviceFailure`]: crate::TensorError::DeviceFailure
#[derive(Debug, Clone)]
pub struct BackendError(pub Arc<dyn std::error::Error + Send + Sync>);

impl BackendError {
    pub fn new(error: impl std::error::Error + Send + Sync + 'static) -> BackendError {
        BackendError(Arc::new(error))
    }
}

impl fmt::Display for BackendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for BackendError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}

impl PartialEq for BackendError {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

/// One buffer of elements in memory a device crate owns. A backend gets its own type back
/// by downcasting (`(memory as &dyn Any).downcast_ref::<MyMemory>()`).
pub trait DeviceStorage: Any + Send + Sync + fmt::Debug {
    /// The device holding the memory (of the backend's kind).
    fn device(&self) -> Device;
    /// The element type.
    fn dtype(&self) -> DType;
    /// How many elements the buffer holds (views may read fewer).
    fn numel(&self) -> usize;
}

/// An op's input as a backend sees it: the memory and the layout to read it with.
#[derive(Debug, Clone, Copy)]
pub struct DeviceOperand<'a> {
    pub memory: &'a dyn DeviceStorage,
    pub layout: &'a Layout,
}

/// A device crate's copies and kernels for one kind of device, registered with
/// [`register_backend`](crate::backend::register_backend).
///
/// Methods that return `Option` return `None` when the backend has no kernel for what was
/// asked; dispatch turns that into [`TensorError::UnsupportedOnDevice`] naming the op and the
/// device, so a backend can grow one op at a time.
///
/// [`TensorError::UnsupportedOnDevice`]: crate::TensorError::UnsupportedOnDevice
pub trait DeviceBackend: Send + Sync {
    /// The kind of device this backend serves (never `Cpu` or `Meta`).
    fn kind(&self) -> DeviceKind;

    /// A short name for errors (`cudarc`).
    fn name(&self) -> &str;

    /// Copies packed host elements onto `device`, or fails with `DeviceUnavailable` when that
    /// device does not exist.
    fn copy_from_cpu(&self, host: &CpuStorage, device: Device) -> Result<Box<dyn DeviceStorage>>;

    /// Copies the elements `layout` selects from `memory` to the host, packed row-major.
    fn copy_to_cpu(&self, memory: &dyn DeviceStorage, layout: &Layout) -> Result<CpuStorage>;

    /// Overwrites the elements `layout` selects in `memory` with `values` (packed row-major,
    /// of the memory's dtype): the in-place writes (`copy_`, `fill_`, optimizer steps).
    fn write_from_cpu(
        &self,
        memory: &mut dyn DeviceStorage,
        layout: &Layout,
        values: &CpuStorage,
    ) -> Option<Result<()>> {
        let _ = (memory, layout, values);
        None
    }

    /// Runs `op` on `inputs` (all on one device of this kind, shapes and dtypes already checked
    /// by the op's meta function), returning one packed buffer per entry of `outputs` with that
    /// shape and dtype. Views (`reshape`, `permute`, `narrow`, `expand`) never come here: they
    /// only change the layout, and the tensor crate does that for every device; `contiguous`
    /// does come here.
    fn apply(
        &self,
        op: &Op,
        inputs: &[DeviceOperand<'_>],
        outputs: &[TensorMeta],
    ) -> Option<Result<Vec<Box<dyn DeviceStorage>>>>;
}
