//! Running rendered kernels on an NVIDIA GPU through the driver API (cudarc, libcuda loaded at
//! run time). [`CudaDevice::new`] checks that libcuda is present before any driver call (cudarc
//! panics otherwise) and reports a typed [`CudaError::DeviceUnavailable`]; modules are loaded
//! with `cuModuleLoadDataEx` and the JIT's error log, so a rejected kernel's error names the
//! line, after its `.version` and `.target` are set for the driver and device found.
//!
//! This is the direct interface the GPU tests of the renderer use (one kernel, typed buffers);
//! CUDA tensors go through the [`CudaDriver`](crate::CudaDriver) trait instead.

use crate::driver::{driver_call as driver, driver_present, load_with_log};
use crate::{CudaError, PtxTarget, RenderedKernel, Result};
use cudarc::driver::sys;
use cudarc::driver::{CudaContext, CudaSlice, CudaStream, DevicePtrMut};
use std::ffi::{CString, c_void};
use std::sync::Arc;
use tessera_kernel::ScalarType;

/// One GPU: its context, default stream, driver version and PTX target.
#[derive(Debug)]
pub struct CudaDevice {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    driver_version: i32,
    target: PtxTarget,
    multiprocessors: u32,
}

/// A buffer in device memory, of one of the kernel IR's element types.
#[derive(Debug)]
pub enum DeviceBuffer {
    F32(CudaSlice<f32>),
    F64(CudaSlice<f64>),
    /// Bool elements, one byte each (0 or 1).
    Bool(CudaSlice<u8>),
    I64(CudaSlice<i64>),
}

impl DeviceBuffer {
    pub fn ty(&self) -> ScalarType {
        match self {
            DeviceBuffer::F32(_) => ScalarType::F32,
            DeviceBuffer::F64(_) => ScalarType::F64,
            DeviceBuffer::Bool(_) => ScalarType::Bool,
            DeviceBuffer::I64(_) => ScalarType::I64,
        }
    }

    pub fn len(&self) -> usize {
        match self {
            DeviceBuffer::F32(s) => s.len(),
            DeviceBuffer::F64(s) => s.len(),
            DeviceBuffer::Bool(s) => s.len(),
            DeviceBuffer::I64(s) => s.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A kernel loaded into a device's context, unloaded when dropped.
#[derive(Debug)]
pub struct LoadedKernel {
    ctx: Arc<CudaContext>,
    module: sys::CUmodule,
    function: sys::CUfunction,
    /// The rendering it was loaded from (its text as rendered, before the version was set).
    pub rendered: RenderedKernel,
}

impl Drop for LoadedKernel {
    fn drop(&mut self) {
        if self.ctx.bind_to_thread().is_ok() {
            // SAFETY: the module was loaded in this context and is unloaded once.
            let _ = unsafe { sys::cuModuleUnload(self.module) };
        }
    }
}

fn driver_error(call: &'static str) -> impl Fn(cudarc::driver::DriverError) -> CudaError {
    move |e| CudaError::Driver {
        call,
        code: format!("{e:?}"),
    }
}

impl CudaDevice {
    /// The device `ordinal`, or [`CudaError::DeviceUnavailable`] when libcuda is absent, the
    /// driver fails to initialise, or there is no such device. Never panics.
    pub fn new(ordinal: usize) -> Result<CudaDevice> {
        // cudarc panics on any driver call without the library.
        if !driver_present() {
            return Err(CudaError::DeviceUnavailable {
                reason: "the CUDA driver library (libcuda) was not found".into(),
            });
        }
        let unavailable =
            |what: &str, e: cudarc::driver::DriverError| CudaError::DeviceUnavailable {
                reason: format!("{what}: {e:?}"),
            };
        let ctx = CudaContext::new(ordinal)
            .map_err(|e| unavailable(&format!("creating a context on device {ordinal}"), e))?;
        let mut driver_version = 0;
        // SAFETY: the driver is initialised (the context exists); writes one int.
        driver("cuDriverGetVersion", unsafe {
            sys::cuDriverGetVersion(&mut driver_version)
        })?;
        let (major, minor) = ctx
            .compute_capability()
            .map_err(driver_error("compute_capability"))?;
        let multiprocessors = ctx
            .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
            .map_err(driver_error("cuDeviceGetAttribute"))?;
        let target = PtxTarget::SM80
            .for_driver(driver_version)
            .with_compute_capability(major, minor);
        Ok(CudaDevice {
            stream: ctx.default_stream(),
            ctx,
            driver_version,
            target,
            multiprocessors: multiprocessors.max(1) as u32,
        })
    }

    /// The driver's CUDA version (`cuDriverGetVersion`: 12040 for 12.4).
    pub fn driver_version(&self) -> i32 {
        self.driver_version
    }

    /// The PTX version and architecture kernels are loaded with on this device.
    pub fn target(&self) -> PtxTarget {
        self.target
    }

    pub fn multiprocessors(&self) -> u32 {
        self.multiprocessors
    }

    /// The stream kernels (and cuBLAS calls) are queued on.
    pub(crate) fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// `kernel`'s text with its `.version` and `.target` lines set for this device.
    pub fn ptx_for_device(&self, kernel: &RenderedKernel) -> String {
        let t = self.target;
        kernel
            .ptx
            .lines()
            .map(|l| {
                if l.starts_with(".version ") {
                    format!(".version {}.{}", t.version.0, t.version.1)
                } else if l.starts_with(".target ") {
                    format!(".target sm_{}", t.sm)
                } else {
                    l.to_string()
                }
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Loads `kernel` with the driver's JIT; a rejection is [`CudaError::ModuleRejected`] with
    /// the JIT's log.
    pub fn load(&self, kernel: &RenderedKernel) -> Result<LoadedKernel> {
        self.ctx
            .bind_to_thread()
            .map_err(driver_error("cuCtxSetCurrent"))?;
        let module = load_with_log(&kernel.name, &self.ptx_for_device(kernel))?;
        let name = CString::new(kernel.name.clone()).unwrap_or_default();
        let mut function: sys::CUfunction = std::ptr::null_mut();
        // SAFETY: the module was just loaded; `name` is NUL-terminated.
        let found = unsafe { sys::cuModuleGetFunction(&mut function, module, name.as_ptr()) };
        let loaded = LoadedKernel {
            ctx: self.ctx.clone(),
            module,
            function,
            rendered: kernel.clone(),
        };
        driver("cuModuleGetFunction", found)?;
        Ok(loaded)
    }

    /// Copies `data` to a new device buffer.
    pub fn upload_f32(&self, data: &[f32]) -> Result<DeviceBuffer> {
        let s = self
            .stream
            .clone_htod(data)
            .map_err(driver_error("cuMemcpyHtoD"))?;
        Ok(DeviceBuffer::F32(s))
    }

    /// See [`CudaDevice::upload_f32`].
    pub fn upload_f64(&self, data: &[f64]) -> Result<DeviceBuffer> {
        let s = self
            .stream
            .clone_htod(data)
            .map_err(driver_error("cuMemcpyHtoD"))?;
        Ok(DeviceBuffer::F64(s))
    }

    /// A zeroed device buffer of `len` elements of `ty` (f32 for the half types, whose
    /// kernels this low-level API does not launch).
    pub fn zeros(&self, ty: ScalarType, len: usize) -> Result<DeviceBuffer> {
        let alloc = driver_error("cuMemAlloc");
        Ok(match ty {
            ScalarType::F64 => DeviceBuffer::F64(self.stream.alloc_zeros(len).map_err(alloc)?),
            ScalarType::Bool => DeviceBuffer::Bool(self.stream.alloc_zeros(len).map_err(alloc)?),
            ScalarType::I64 => DeviceBuffer::I64(self.stream.alloc_zeros(len).map_err(alloc)?),
            _ => DeviceBuffer::F32(self.stream.alloc_zeros(len).map_err(alloc)?),
        })
    }

    /// The buffer's elements, as f64 (after the work queued before it finishes).
    pub fn download(&self, buffer: &DeviceBuffer) -> Result<Vec<f64>> {
        let copy = driver_error("cuMemcpyDtoH");
        Ok(match buffer {
            DeviceBuffer::F32(s) => self
                .stream
                .clone_dtoh(s)
                .map_err(copy)?
                .into_iter()
                .map(f64::from)
                .collect(),
            DeviceBuffer::F64(s) => self.stream.clone_dtoh(s).map_err(copy)?,
            DeviceBuffer::Bool(s) => {
                let bytes = self.stream.clone_dtoh(s).map_err(copy)?;
                bytes.into_iter().map(|b| f64::from(b != 0)).collect()
            }
            DeviceBuffer::I64(s) => {
                let values = self.stream.clone_dtoh(s).map_err(copy)?;
                values.into_iter().map(|v| v as f64).collect()
            }
        })
    }

    /// Queues `kernel` on the device's stream with `buffers` as its parameters, in order, and
    /// the grid [`RenderedKernel::grid_for`] this device's multiprocessors.
    pub fn launch(&self, kernel: &LoadedKernel, buffers: &mut [&mut DeviceBuffer]) -> Result<()> {
        let r = &kernel.rendered;
        let fail = |message: String| CudaError::Launch {
            kernel: r.name.clone(),
            message,
        };
        if buffers.len() != r.buffers.len() {
            return Err(fail(format!(
                "takes {} buffers, got {}",
                r.buffers.len(),
                buffers.len()
            )));
        }
        for (i, (b, p)) in buffers.iter().zip(&r.buffers).enumerate() {
            if b.ty() != p.ty || b.len() < p.len {
                return Err(fail(format!(
                    "buffer {i} is {}[{}], the kernel needs {}[{}]",
                    b.ty(),
                    b.len(),
                    p.ty,
                    p.len
                )));
            }
        }
        self.ctx
            .bind_to_thread()
            .map_err(driver_error("cuCtxSetCurrent"))?;
        let stream = &self.stream;
        let mut guards = Vec::with_capacity(buffers.len());
        let mut pointers: Vec<sys::CUdeviceptr> = Vec::with_capacity(buffers.len());
        for b in buffers.iter_mut() {
            let (ptr, guard) = match &mut **b {
                DeviceBuffer::F32(s) => s.device_ptr_mut(stream),
                DeviceBuffer::F64(s) => s.device_ptr_mut(stream),
                DeviceBuffer::Bool(s) => s.device_ptr_mut(stream),
                DeviceBuffer::I64(s) => s.device_ptr_mut(stream),
            };
            pointers.push(ptr);
            guards.push(guard);
        }
        if r.vector_width > 1
            && let Some(i) = pointers.iter().position(|p| p % 16 != 0)
        {
            return Err(fail(format!(
                "buffer {i} is not 16-byte aligned, which vector loads need"
            )));
        }
        let mut params: Vec<*mut c_void> = pointers
            .iter_mut()
            .map(|p| p as *mut sys::CUdeviceptr as *mut c_void)
            .collect();
        let grid = r.grid_for(self.multiprocessors);
        // SAFETY: the function takes one u64 pointer per buffer (the renderer's `.entry`), each
        // checked above to be of the parameter's type and at least its length, and the kernel
        // accesses nothing past those lengths (`Kernel::verify`).
        let launched = unsafe {
            sys::cuLaunchKernel(
                kernel.function,
                grid,
                1,
                1,
                r.block,
                1,
                1,
                0,
                stream.cu_stream(),
                params.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        };
        drop(guards);
        driver("cuLaunchKernel", launched)
    }

    /// Waits for the work queued on the device's stream.
    pub fn synchronize(&self) -> Result<()> {
        self.stream
            .synchronize()
            .map_err(driver_error("cuStreamSynchronize"))
    }
}
