//! The CUDA driver as one narrow trait, [`CudaDriver`]: devices and their properties, device
//! memory, copies, PTX modules and launches. Everything above it (the caching allocator, CUDA
//! tensors, eager kernels) is written against the trait, so it runs on the real driver
//! ([`SystemDriver`], cudarc with libcuda loaded at run time) and, in the tests, on a PTX
//! emulator that executes the same kernels on the CPU.
//!
//! # Ordering
//!
//! A driver keeps one queue of work per device (the real driver: the legacy default stream of
//! the device's primary context). Copies, memsets and launches on one device run in the order
//! they were issued; [`CudaDriver::copy_to_host`] returns after the work issued before it has
//! finished and its bytes are on the host, and [`CudaDriver::copy_to_device`] has read the
//! host slice when it returns. So memory freed after a launch may be reused by later work on
//! the same device without waiting: that later work runs after the launch.
//!
//! # Safety
//!
//! The methods that take a [`DevicePtr`] are `unsafe`: the caller promises the pointer came
//! from [`CudaDriver::alloc`] on that device, is not freed, and that the range touched lies in
//! the allocation. The real driver cannot check this (a wrong pointer corrupts device memory or
//! faults the context); the emulated one does and reports [`CudaError::InvalidUse`].
//!
//! [`CudaError::InvalidUse`]: crate::CudaError::InvalidUse

mod handles;
mod jit;
mod launch;
mod properties;
mod system;
mod system_graph;

pub use handles::{DevicePtr, FunctionId, GraphId, ModuleId};
pub(crate) use jit::{driver_call, load_with_log};
pub use launch::{KernelArg, LaunchDims};
pub use properties::DeviceProperties;
pub use system::{SystemDriver, driver_present};

use crate::Result;
use std::fmt;

/// The operations of the CUDA driver API that Tessera uses, for devices `0..device_count()`.
pub trait CudaDriver: Send + Sync + fmt::Debug {
    /// A short name for errors and for the tensor backend (`cuda`, `emulated ptx`).
    fn name(&self) -> &str;

    /// How many devices there are (at least one: a driver with none fails to construct).
    fn device_count(&self) -> usize;

    /// What device `device` is: its name, compute capability, multiprocessors, memory, and
    /// the driver version (which decides the PTX version it loads).
    fn properties(&self, device: usize) -> Result<DeviceProperties>;

    /// `bytes` bytes (at least 1) of uninitialised device memory, aligned to 256 bytes;
    /// [`CudaError::OutOfMemory`](crate::CudaError::OutOfMemory) when the device is full.
    fn alloc(&self, device: usize, bytes: usize) -> Result<DevicePtr>;

    /// Returns memory from [`CudaDriver::alloc`] to the driver.
    ///
    /// # Safety
    /// `ptr` was allocated on `device` by this driver and is freed once; no work issued
    /// later uses it.
    unsafe fn free(&self, device: usize, ptr: DevicePtr) -> Result<()>;

    /// Copies `src` to `dst..dst + src.len()`.
    ///
    /// # Safety
    /// The destination range lies in one live allocation of `device`.
    unsafe fn copy_to_device(&self, device: usize, dst: DevicePtr, src: &[u8]) -> Result<()>;

    /// Copies `src..src + dst.len()` to `dst`, after the work issued before it.
    ///
    /// # Safety
    /// The source range lies in one live allocation of `device`.
    unsafe fn copy_to_host(&self, device: usize, dst: &mut [u8], src: DevicePtr) -> Result<()>;

    /// Copies `bytes` bytes from `src` to `dst` on the device (the ranges do not overlap).
    ///
    /// # Safety
    /// Both ranges lie in live allocations of `device`.
    unsafe fn copy_on_device(
        &self,
        device: usize,
        dst: DevicePtr,
        src: DevicePtr,
        bytes: usize,
    ) -> Result<()>;

    /// Sets `bytes` bytes from `dst` to `value`.
    ///
    /// # Safety
    /// The range lies in one live allocation of `device`.
    unsafe fn memset(&self, device: usize, dst: DevicePtr, value: u8, bytes: usize) -> Result<()>;

    /// Loads a PTX module on `device` with the driver's JIT;
    /// [`CudaError::ModuleRejected`](crate::CudaError::ModuleRejected) carries the JIT's log
    /// (which names the line) when it refuses the text.
    fn load_module(&self, device: usize, ptx: &str) -> Result<ModuleId>;

    /// The `.entry` named `entry` of a loaded module.
    fn function(&self, module: ModuleId, entry: &str) -> Result<FunctionId>;

    /// Queues `function` on its device's queue with `args` as its parameters, in order.
    ///
    /// # Safety
    /// `args` match the entry's parameters in number and type, every pointer among them is
    /// a live allocation of the function's device, and the kernel touches nothing outside
    /// them for this launch configuration.
    unsafe fn launch(
        &self,
        function: FunctionId,
        dims: LaunchDims,
        args: &[KernelArg],
    ) -> Result<()>;

    /// Unloads a module; its functions are invalid afterwards.
    fn unload_module(&self, module: ModuleId) -> Result<()>;

    /// Starts recording `device`'s launches into a CUDA graph: until
    /// [`CudaDriver::end_capture`], [`CudaDriver::launch`] on that device records the launch
    /// (its function, dimensions and argument values) and runs nothing. Copies are not
    /// recorded (a capture holds kernels only); a second begin on a capturing device is
    /// [`CudaError::InvalidUse`](crate::CudaError::InvalidUse).
    fn begin_capture(&self, device: usize) -> Result<()>;

    /// Ends `device`'s capture and instantiates what it recorded as an executable graph,
    /// which [`CudaDriver::launch_graph`] replays (the recorded launches, in order, with the
    /// recorded arguments) on the device's queue.
    fn end_capture(&self, device: usize) -> Result<GraphId>;

    /// Queues a replay of `graph` on its device.
    ///
    /// # Safety
    /// Every pointer among the recorded arguments is still a live allocation of the device
    /// with the extent the kernels touch (what [`CudaDriver::launch`] requires, for each
    /// recorded launch).
    unsafe fn launch_graph(&self, graph: GraphId) -> Result<()>;

    /// Destroys `graph` (after the replays queued so far).
    fn destroy_graph(&self, graph: GraphId) -> Result<()>;
    /// Makes `device`'s context current on the calling thread and returns the stream this
    /// driver queues its work on, so that a library enqueuing its own work on the driver's
    /// memory (NCCL collectives) runs in order with the driver's copies and launches. The
    /// system driver returns the legacy default stream (the null `CUstream`) of the device's
    /// primary context. A driver without a CUDA context (the tests' emulator) cannot host such
    /// work and says so with [`CudaError::InvalidUse`](crate::CudaError::InvalidUse); a
    /// device it does not have is [`CudaError::DeviceUnavailable`](crate::CudaError::DeviceUnavailable).
    fn external_stream(&self, device: usize) -> Result<cudarc::driver::sys::CUstream>;

    /// Waits until the work issued on `device` has finished; an asynchronous fault of that
    /// work (an illegal address in a kernel) is reported here.
    fn synchronize(&self, device: usize) -> Result<()>;
}
