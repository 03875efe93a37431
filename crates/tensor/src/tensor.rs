//! The `Tensor` handle: a cheap clone of an `Arc`, sharing storage with its views and
//! carrying the autograd state (`requires_grad`, `.grad`, the node that made it).

use crate::autograd::GradEdge;
use crate::layout::Layout;
use crate::storage::{CpuStorage, StorageElement};
use crate::tensor_storage::{DeviceBuffer, Storage};
use crate::{DType, Device, Element, Result, TensorError};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

static NEXT_TENSOR_ID: AtomicU64 = AtomicU64::new(1);

/// Identity of a tensor handle (not of its storage): clones share it, views do not.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TensorId(u64);

/// A storage buffer plus the version counter that in-place writes bump, so that autograd can
/// refuse a backward through a value that was overwritten after it was saved.
#[derive(Debug)]
pub(crate) struct StorageCell {
    pub(crate) buffer: RwLock<Storage>,
    pub(crate) version: AtomicU64,
    /// Values computed from this buffer (see [`Tensor::derived`]).
    pub(crate) derived: crate::derived::DerivedValues,
}

impl Drop for StorageCell {
    /// Hands large host buffers to the buffer cache for reuse.
    fn drop(&mut self) {
        let buffer = self.buffer.get_mut().unwrap_or_else(|e| e.into_inner());
        if let Storage::Cpu(cpu) =
            std::mem::replace(buffer, Storage::Cpu(CpuStorage::Bool(Vec::new())))
        {
            cpu.recycle();
        }
    }
}

/// The shape and dtype of a tensor without its data: what meta functions compute.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TensorMeta {
    pub shape: Vec<usize>,
    pub dtype: DType,
}

impl TensorMeta {
    pub fn new(shape: impl Into<Vec<usize>>, dtype: DType) -> Self {
        TensorMeta {
            shape: shape.into(),
            dtype,
        }
    }

    /// The element count, saturating at `usize::MAX` for shapes too large to allocate.
    pub fn numel(&self) -> usize {
        crate::size::saturating_numel(&self.shape)
    }
}

/// An example tensor stands for its shape and dtype (tracing takes either).
impl From<&Tensor> for TensorMeta {
    fn from(t: &Tensor) -> Self {
        t.meta()
    }
}

#[derive(Debug, Clone)]
pub(crate) struct TensorData {
    pub(crate) storage: Arc<StorageCell>,
    pub(crate) layout: Layout,
    pub(crate) dtype: DType,
    pub(crate) device: Device,
}

pub(crate) struct TensorImpl {
    id: TensorId,
    data: RwLock<TensorData>,
    requires_grad: AtomicBool,
    pub(crate) grad: Mutex<Option<Tensor>>,
    pub(crate) grad_fn: Mutex<Option<GradEdge>>,
    pub(crate) post_accumulate_grad_hooks: Mutex<crate::autograd::HookList>,
}

/// An n-dimensional array on a device; clones are handles to the same tensor, so in-place
/// updates are seen by every holder, as in PyTorch.
#[derive(Clone)]
pub struct Tensor(pub(crate) Arc<TensorImpl>);

pub(crate) fn poisoned<T>(e: std::sync::PoisonError<T>) -> T {
    e.into_inner()
}

impl Tensor {
    pub(crate) fn from_data(data: TensorData) -> Tensor {
        Tensor(Arc::new(TensorImpl {
            id: TensorId(NEXT_TENSOR_ID.fetch_add(1, Ordering::Relaxed)),
            data: RwLock::new(data),
            requires_grad: AtomicBool::new(false),
            grad: Mutex::new(None),
            grad_fn: Mutex::new(None),
            post_accumulate_grad_hooks: Mutex::new(Vec::new()),
        }))
    }

    /// A contiguous CPU tensor owning `storage`, which must hold exactly `shape.product()` elements.
    pub(crate) fn from_cpu(storage: CpuStorage, shape: &[usize]) -> Tensor {
        debug_assert_eq!(
            Some(storage.len()),
            crate::size::checked_numel(shape),
            "storage length vs shape {shape:?}"
        );
        let dtype = storage.dtype();
        Tensor::contiguous_over(Storage::Cpu(storage), shape, dtype, Device::Cpu)
    }

    /// A contiguous tensor of `shape` in memory a device crate owns (checked to hold exactly
    /// `shape.product()` elements by [`DeviceBuffer::new`]).
    pub(crate) fn from_device(buffer: DeviceBuffer, shape: &[usize]) -> Tensor {
        let (dtype, device) = (buffer.memory.dtype(), buffer.memory.device());
        Tensor::contiguous_over(Storage::Device(buffer), shape, dtype, device)
    }

    /// A contiguous tensor of `shape` over fresh `storage` (version 0), counted in
    /// [`crate::allocated_bytes`] unless it is a meta tensor's.
    fn contiguous_over(storage: Storage, shape: &[usize], dtype: DType, device: Device) -> Tensor {
        if !matches!(storage, Storage::Meta) {
            crate::allocated::count(
                crate::size::saturating_numel(shape).saturating_mul(dtype.size_in_bytes()),
            );
        }
        Tensor::from_data(TensorData {
            storage: Arc::new(StorageCell {
                buffer: RwLock::new(storage),
                version: AtomicU64::new(0),
                derived: Default::default(),
            }),
            layout: Layout::contiguous(shape),
            dtype,
            device,
        })
    }

    /// A tensor with a shape and dtype but no data, on the meta device: ops on it compute
    /// output shapes and dtypes only (this is what tracing runs modules on).
    pub fn new_meta(shape: &[usize], dtype: DType) -> Tensor {
        Tensor::contiguous_over(Storage::Meta, shape, dtype, Device::Meta)
    }

    /// True for tensors on the meta device (shapes and dtypes only).
    pub fn is_meta(&self) -> bool {
        self.device() == Device::Meta
    }

    /// A new handle on the same storage with another layout (a view).
    pub(crate) fn view_with_layout(&self, layout: Layout) -> Tensor {
        let data = self.data();
        Tensor::from_data(TensorData { layout, ..data })
    }

    pub(crate) fn data(&self) -> TensorData {
        self.0.data.read().unwrap_or_else(poisoned).clone()
    }

    /// Calls `f` with the storage buffer (read-locked) and this tensor's layout.
    pub(crate) fn with_storage<R>(&self, f: impl FnOnce(&Storage, &Layout) -> R) -> R {
        let data = self.data();
        let guard = data.storage.buffer.read().unwrap_or_else(poisoned);
        f(&guard, &data.layout)
    }

    /// Calls `f` with the storage buffer (write-locked) and this tensor's layout, bumping the
    /// storage's version so that autograd notices the in-place write.
    pub(crate) fn with_storage_mut<R>(&self, f: impl FnOnce(&mut Storage, &Layout) -> R) -> R {
        let data = self.data();
        data.storage.version.fetch_add(1, Ordering::Relaxed);
        let mut guard = data.storage.buffer.write().unwrap_or_else(poisoned);
        f(&mut guard, &data.layout)
    }

    /// Replaces what this handle points at (storage and layout) with `other`'s, keeping the
    /// handle and its autograd identity. This is how `module.to(dtype)` keeps parameters valid.
    pub fn set_data(&self, other: &Tensor) {
        let data = other.data();
        *self.0.data.write().unwrap_or_else(poisoned) = data;
    }

    pub fn id(&self) -> TensorId {
        self.0.id
    }

    pub fn layout(&self) -> Layout {
        self.0.data.read().unwrap_or_else(poisoned).layout.clone()
    }

    /// The sizes of every dimension.
    pub fn shape(&self) -> Vec<usize> {
        self.0
            .data
            .read()
            .unwrap_or_else(poisoned)
            .layout
            .shape
            .clone()
    }

    /// The size of one dimension (negative counts from the end).
    pub fn size(&self, dim: isize) -> Result<usize> {
        let shape = self.shape();
        let d = crate::layout::normalize_dim("size", dim, shape.len())?;
        Ok(if shape.is_empty() { 1 } else { shape[d] })
    }

    pub fn strides(&self) -> Vec<usize> {
        self.0
            .data
            .read()
            .unwrap_or_else(poisoned)
            .layout
            .strides
            .clone()
    }

    pub fn storage_offset(&self) -> usize {
        self.0.data.read().unwrap_or_else(poisoned).layout.offset
    }

    pub fn ndim(&self) -> usize {
        self.0.data.read().unwrap_or_else(poisoned).layout.ndim()
    }

    pub fn numel(&self) -> usize {
        self.0.data.read().unwrap_or_else(poisoned).layout.numel()
    }

    pub fn dtype(&self) -> DType {
        self.0.data.read().unwrap_or_else(poisoned).dtype
    }

    pub fn device(&self) -> Device {
        self.0.data.read().unwrap_or_else(poisoned).device
    }

    pub fn meta(&self) -> TensorMeta {
        let d = self.0.data.read().unwrap_or_else(poisoned);
        TensorMeta {
            shape: d.layout.shape.clone(),
            dtype: d.dtype,
        }
    }

    pub fn is_contiguous(&self) -> bool {
        self.0
            .data
            .read()
            .unwrap_or_else(poisoned)
            .layout
            .is_contiguous()
    }

    /// True when both tensors view the same storage buffer.
    pub fn shares_storage(&self, other: &Tensor) -> bool {
        if Arc::ptr_eq(&self.0, &other.0) {
            return true;
        }
        let mine = self.0.data.read().unwrap_or_else(poisoned);
        let theirs = other.0.data.read().unwrap_or_else(poisoned);
        Arc::ptr_eq(&mine.storage, &theirs.storage)
    }

    /// How many in-place writes the storage has seen.
    pub fn version(&self) -> u64 {
        let d = self.0.data.read().unwrap_or_else(poisoned);
        d.storage.version.load(Ordering::Relaxed)
    }

    // ----- autograd state -----

    pub fn requires_grad(&self) -> bool {
        self.0.requires_grad.load(Ordering::Relaxed)
    }

    /// Sets `requires_grad` on a leaf (PyTorch's `requires_grad_`). Only float tensors can
    /// require gradients, and a non-leaf cannot be switched off.
    pub fn requires_grad_(&self, requires_grad: bool) -> Result<Tensor> {
        if requires_grad && !self.dtype().is_float() {
            return Err(TensorError::Autograd(format!(
                "only tensors of floating point dtype can require gradients, got {}",
                self.dtype()
            )));
        }
        if !requires_grad && !self.is_leaf() {
            return Err(TensorError::Autograd(
                "you can only change requires_grad flags of leaf variables; use detach()".into(),
            ));
        }
        self.0.requires_grad.store(requires_grad, Ordering::Relaxed);
        Ok(self.clone())
    }

    pub(crate) fn set_requires_grad_unchecked(&self, requires_grad: bool) {
        self.0.requires_grad.store(requires_grad, Ordering::Relaxed);
    }

    /// The accumulated gradient of a leaf, if any backward reached it.
    pub fn grad(&self) -> Option<Tensor> {
        self.0.grad.lock().unwrap_or_else(poisoned).clone()
    }

    /// Replaces the gradient (`None` clears it, as `zero_grad(set_to_none=True)` does).
    pub fn set_grad(&self, grad: Option<Tensor>) {
        *self.0.grad.lock().unwrap_or_else(poisoned) = grad;
    }

    /// True for tensors not produced by a recorded op (user-created, or not requiring grad).
    pub fn is_leaf(&self) -> bool {
        self.0.grad_fn.lock().unwrap_or_else(poisoned).is_none()
    }

    pub(crate) fn grad_fn(&self) -> Option<GradEdge> {
        self.0.grad_fn.lock().unwrap_or_else(poisoned).clone()
    }

    pub(crate) fn set_grad_fn(&self, edge: GradEdge) {
        *self.0.grad_fn.lock().unwrap_or_else(poisoned) = Some(edge);
        self.set_requires_grad_unchecked(true);
    }

    /// The name of the op whose backward produces this tensor's gradient (`None` for leaves).
    pub fn grad_fn_name(&self) -> Option<String> {
        self.grad_fn().map(|e| e.node.op_name())
    }

    /// A new handle on the same storage, cut from the autograd graph.
    pub fn detach(&self) -> Tensor {
        Tensor::from_data(self.data())
    }

    /// Cuts this handle from the autograd graph in place: it becomes a leaf that does not
    /// require grad, keeping its data (PyTorch's `detach_`).
    pub fn detach_(&self) -> &Tensor {
        *self.0.grad_fn.lock().unwrap_or_else(poisoned) = None;
        self.set_requires_grad_unchecked(false);
        self
    }

    /// Makes this handle denote `other`, as rebinding a Python attribute (`m.weight = w`)
    /// does: every holder of this handle now sees `other`'s data (shared storage) and
    /// gradients flowing into it reach `other`'s graph.
    ///
    /// Unlike [`Tensor::set_data`], which keeps the handle's autograd identity, this takes
    /// `other`'s: its node (so `is_leaf()` and `requires_grad()` follow `other`), or, when
    /// `other` is a leaf that requires grad, an alias node (`reshapeBackward` to the same
    /// shape) whose gradient accumulates into `other.grad()`; that node is recorded only
    /// in grad mode, as any op is. The handle's own `.grad` is cleared. Rebinding a handle
    /// to itself does nothing. Parametrized module fields are built on this.
    pub fn rebind(&self, other: &Tensor) {
        if Arc::ptr_eq(&self.0, &other.0) {
            return;
        }
        self.set_data(other);
        self.set_grad(None);
        self.detach_();
        if let Some(edge) = other.grad_fn() {
            self.set_grad_fn(edge);
        } else if other.requires_grad() && crate::is_grad_enabled() {
            let alias = crate::op::Op::View(crate::op::ViewOp::Reshape(other.shape()));
            crate::autograd::record(&alias, &[other], std::slice::from_ref(self));
        }
    }

    // ----- reading data -----

    /// Calls `f` with the elements in row-major order: borrowed when contiguous, gathered
    /// otherwise. `T` must be the tensor's dtype.
    pub fn with_slice<T: StorageElement, R>(&self, f: impl FnOnce(&[T]) -> R) -> Result<R> {
        self.read_as("with_slice", f)
    }

    /// [`Tensor::with_slice`] for the method `op`, which errors name (reading a traced value
    /// names the method that read it: `item`, `to_vec`).
    fn read_as<T: StorageElement, R>(&self, op: &str, f: impl FnOnce(&[T]) -> R) -> Result<R> {
        self.read_storage(op, |slice: &[T], layout| match layout.contiguous_range() {
            Some(range) => Ok(f(&slice[range])),
            None => {
                // Fallible: an expanded view may stand for more elements than memory holds.
                let mut gathered: Vec<T> =
                    crate::buffer_cache::with_capacity(op, layout.numel(), T::DTYPE)?;
                gathered.extend(layout.offsets().map(|o| slice[o]));
                Ok(f(&gathered))
            }
        })?
    }

    /// Calls `f` with the tensor's whole CPU storage (every element of it, not only this
    /// view's) and the view's layout into it, so a strided reader (a compiled kernel) indexes
    /// it in place; device storage is copied to the host and given with a contiguous layout.
    /// `T` must be the tensor's dtype.
    pub fn with_storage_slice<T: StorageElement, R>(
        &self,
        f: impl FnOnce(&[T], &Layout) -> R,
    ) -> Result<R> {
        self.read_storage("with_storage_slice", f)
    }

    /// The tensor's layout and dtype, read in place (no copy, so no allocation: what a
    /// compiled program's warm call checks its inputs with).
    pub fn with_layout<R>(&self, f: impl FnOnce(&Layout, DType) -> R) -> R {
        let d = self.0.data.read().unwrap_or_else(poisoned);
        f(&d.layout, d.dtype)
    }

    /// [`Tensor::with_storage_slice`] for CPU storage, copying nothing (no allocation). This
    /// handle's metadata stays read-locked while `f` runs: `f` must not `set_data` it.
    pub fn with_cpu_slice<T: StorageElement, R>(
        &self,
        f: impl FnOnce(&[T], &Layout) -> R,
    ) -> Result<R> {
        let op = "with_cpu_slice";
        let d = self.0.data.read().unwrap_or_else(poisoned);
        expect_element::<T>(op, d.dtype)?;
        let guard = d.storage.buffer.read().unwrap_or_else(poisoned);
        let slice = T::slice(guard.cpu(op)?).expect("storage dtype matches tensor dtype");
        Ok(f(slice, &d.layout))
    }

    /// [`Tensor::with_cpu_slice`], writable: the storage is write-locked and its version
    /// bumped (an in-place write, as autograd counts them). `f` gets the whole storage and
    /// this view's layout into it, and must not `set_data` this handle.
    pub fn with_cpu_slice_mut<T: StorageElement, R>(
        &self,
        f: impl FnOnce(&mut [T], &Layout) -> R,
    ) -> Result<R> {
        let op = "with_cpu_slice_mut";
        let d = self.0.data.read().unwrap_or_else(poisoned);
        expect_element::<T>(op, d.dtype)?;
        d.storage.version.fetch_add(1, Ordering::Relaxed);
        let mut guard = d.storage.buffer.write().unwrap_or_else(poisoned);
        if let Storage::Cpu(cpu) = &mut *guard {
            let slice = T::slice_mut(cpu).expect("storage dtype matches tensor dtype");
            return Ok(f(slice, &d.layout));
        }
        Err(match guard.cpu(op) {
            Err(e) => e,
            Ok(_) => TensorError::NoData { op: op.into() },
        })
    }

    /// Calls `f` with the device crate's memory behind this tensor and the view's layout into
    /// it, for a device library that works on that memory in place (NCCL collectives through
    /// `tessera-cuda`). The storage is write-locked and its version bumped when `write` (an
    /// in-place write, as autograd counts them), read-locked otherwise. `None` for CPU and
    /// meta tensors. `f` must not `set_data` this handle.
    pub fn with_device_storage<R>(
        &self,
        write: bool,
        f: impl FnOnce(&dyn crate::backend::DeviceStorage, &Layout) -> R,
    ) -> Option<R> {
        let d = self.0.data.read().unwrap_or_else(poisoned);
        if write {
            d.storage.version.fetch_add(1, Ordering::Relaxed);
            let guard = d.storage.buffer.write().unwrap_or_else(poisoned);
            match &*guard {
                Storage::Device(buffer) => Some(f(buffer.memory.as_ref(), &d.layout)),
                _ => None,
            }
        } else {
            let guard = d.storage.buffer.read().unwrap_or_else(poisoned);
            match &*guard {
                Storage::Device(buffer) => Some(f(buffer.memory.as_ref(), &d.layout)),
                _ => None,
            }
        }
    }

    /// [`Tensor::with_storage_slice`] for the method `op`, which errors name.
    fn read_storage<T: StorageElement, R>(
        &self,
        op: &str,
        f: impl FnOnce(&[T], &Layout) -> R,
    ) -> Result<R> {
        let data = self.data();
        expect_element::<T>(op, data.dtype)?;
        let guard = data.storage.buffer.read().unwrap_or_else(poisoned);
        if let Storage::Device(buffer) = &*guard {
            let host = buffer.to_host(&data.layout)?;
            drop(guard);
            let layout = Layout::contiguous(&data.layout.shape);
            return Ok(f(
                T::slice(&host).expect("the host copy has the tensor's dtype"),
                &layout,
            ));
        }
        let slice = T::slice(guard.cpu(op)?).expect("storage dtype matches tensor dtype");
        Ok(f(slice, &data.layout))
    }

    /// The elements in row-major order; `T` must be the tensor's dtype.
    pub fn to_vec<T: StorageElement>(&self) -> Result<Vec<T>> {
        self.read_as("to_vec", |s: &[T]| s.to_vec())
    }

    /// The elements converted to f64, whatever the dtype (f32 and f64 read straight from
    /// storage, without an intermediate f64 tensor).
    pub fn to_vec_f64(&self) -> Result<Vec<f64>> {
        self.to_vec_f64_as("to_vec_f64")
    }

    /// [`Tensor::to_vec_f64`] for the method `op`, which errors name.
    fn to_vec_f64_as(&self, op: &str) -> Result<Vec<f64>> {
        if self.is_meta() {
            // Checked first: converting a traced tensor would record a cast in the trace.
            return Err(TensorError::NoData { op: op.into() });
        }
        match self.dtype() {
            DType::F64 => self.read_as(op, |s: &[f64]| s.to_vec()),
            DType::F32 => self.read_as(op, |s: &[f32]| s.iter().map(|&x| f64::from(x)).collect()),
            _ => self
                .to_dtype(DType::F64)?
                .read_as(op, |s: &[f64]| s.to_vec()),
        }
    }

    /// The value of a one-element tensor.
    pub fn item<T: Element>(&self) -> Result<T> {
        if self.numel() != 1 {
            return Err(TensorError::invalid(
                "item",
                format!(
                    "a tensor with {} elements (shape {:?}) cannot be converted to a scalar",
                    self.numel(),
                    self.shape()
                ),
            ));
        }
        Ok(T::from_f64(self.to_vec_f64_as("item")?[0]))
    }
}

impl std::fmt::Debug for Tensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Tensor(shape={:?}, dtype={}, device={})",
            self.shape(),
            self.dtype(),
            self.device()
        )
    }
}

/// `Ok` when `T` is the element type of `dtype`, else the mismatch error of the method `op`.
fn expect_element<T: StorageElement>(op: &str, dtype: DType) -> Result<()> {
    if dtype == T::DTYPE {
        return Ok(());
    }
    Err(TensorError::DTypeMismatch {
        op: op.into(),
        expected: T::DTYPE,
        got: dtype,
    })
}
