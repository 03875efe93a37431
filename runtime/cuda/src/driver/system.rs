//! [`CudaDriver`] on the NVIDIA driver (cudarc, libcuda loaded at run time). Construction
//! checks that libcuda is present before any driver call (cudarc panics otherwise) and that
//! there is a device, so a machine without either gets [`CudaError::DeviceUnavailable`],
//! never a panic. Each device's primary context is retained on first use and bound to the
//! calling thread before every call; work goes on the context's legacy default stream.

use super::system_graph::{self, RecordedLaunch, SystemGraph, capture_misuse};
use super::{
    CudaDriver, DeviceProperties, DevicePtr, FunctionId, GraphId, KernelArg, LaunchDims, ModuleId,
    driver_call, load_with_log,
};
use crate::{CudaError, Result};
use cudarc::driver::CudaContext;
use cudarc::driver::sys::{self, CUresult};
use std::collections::HashMap;
use std::ffi::{CString, c_void};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// Whether the CUDA driver library can be loaded (no driver call is made).
pub fn driver_present() -> bool {
    // SAFETY: only looks for the library.
    unsafe { sys::is_culib_present() }
}

/// A loaded module and the device it was loaded on.
struct Module {
    device: usize,
    raw: sys::CUmodule,
}

/// A function of a loaded module.
struct Function {
    device: usize,
    module: ModuleId,
    raw: sys::CUfunction,
}

/// Handles the driver gave out, by id.
#[derive(Default)]
struct Handles {
    modules: HashMap<ModuleId, Module>,
    functions: HashMap<FunctionId, Function>,
    /// The launches recorded so far on each capturing device.
    captures: HashMap<usize, Vec<RecordedLaunch>>,
    graphs: HashMap<GraphId, SystemGraph>,
}

// SAFETY: CUmodule and CUfunction are opaque driver handles, valid from any thread once their
// context is bound; every use below binds the context first, under the mutex.
unsafe impl Send for Handles {}

/// The CUDA driver of this machine.
pub struct SystemDriver {
    contexts: Vec<OnceLock<Arc<CudaContext>>>,
    handles: Mutex<Handles>,
    next_id: AtomicU64,
}

impl fmt::Debug for SystemDriver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SystemDriver")
            .field("devices", &self.contexts.len())
            .finish()
    }
}

fn unavailable(what: &str, e: impl fmt::Debug) -> CudaError {
    CudaError::DeviceUnavailable {
        reason: format!("{what}: {e:?}"),
    }
}

fn driver_error(call: &'static str) -> impl Fn(cudarc::driver::DriverError) -> CudaError {
    move |e| CudaError::Driver {
        call,
        code: format!("{e:?}"),
    }
}

/// The entry name in a PTX text, for errors about the module.
fn module_name(ptx: &str) -> String {
    ptx.split(".entry")
        .nth(1)
        .and_then(|rest| rest.split(['(', '\n']).next())
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "<module without an entry>".into())
}

impl SystemDriver {
    /// The machine's driver, or [`CudaError::DeviceUnavailable`] when libcuda is absent, the
    /// driver fails to initialise, or it finds no device. Never panics.
    pub fn new() -> Result<SystemDriver> {
        if !driver_present() {
            return Err(CudaError::DeviceUnavailable {
                reason: "the CUDA driver library (libcuda) was not found".into(),
            });
        }
        let count = CudaContext::device_count()
            .map_err(|e| unavailable("initialising the CUDA driver", e))?;
        if count <= 0 {
            return Err(CudaError::DeviceUnavailable {
                reason: "the CUDA driver found no device".into(),
            });
        }
        Ok(SystemDriver {
            contexts: (0..count).map(|_| OnceLock::new()).collect(),
            handles: Mutex::new(Handles::default()),
            next_id: AtomicU64::new(1),
        })
    }

    /// Device `device`'s primary context, bound to this thread.
    fn bind(&self, device: usize) -> Result<&Arc<CudaContext>> {
        let slot = self
            .contexts
            .get(device)
            .ok_or_else(|| CudaError::DeviceUnavailable {
                reason: format!(
                    "no device cuda:{device}: the driver found {} device(s)",
                    self.contexts.len()
                ),
            })?;
        let ctx = match slot.get() {
            Some(ctx) => ctx,
            None => {
                let ctx = CudaContext::new(device).map_err(|e| {
                    unavailable(&format!("creating a context on device {device}"), e)
                })?;
                // Another thread may have won the race; its context is the same primary one.
                let _ = slot.set(ctx);
                slot.get().ok_or_else(|| CudaError::DeviceUnavailable {
                    reason: format!("the context of device {device} was not kept"),
                })?
            }
        };
        ctx.bind_to_thread()
            .map_err(driver_error("cuCtxSetCurrent"))?;
        Ok(ctx)
    }

    fn handles(&self) -> std::sync::MutexGuard<'_, Handles> {
        self.handles.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }
}

impl CudaDriver for SystemDriver {
    fn name(&self) -> &str {
        "cuda"
    }

    fn device_count(&self) -> usize {
        self.contexts.len()
    }

    fn properties(&self, device: usize) -> Result<DeviceProperties> {
        let ctx = self.bind(device)?;
        let mut driver_version = 0;
        // SAFETY: the driver is initialised (a context exists); writes one int.
        driver_call("cuDriverGetVersion", unsafe {
            sys::cuDriverGetVersion(&mut driver_version)
        })?;
        let multiprocessors = ctx
            .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
            .map_err(driver_error("cuDeviceGetAttribute"))?;
        Ok(DeviceProperties {
            name: ctx.name().map_err(driver_error("cuDeviceGetName"))?,
            compute_capability: ctx
                .compute_capability()
                .map_err(driver_error("cuDeviceGetAttribute"))?,
            multiprocessors: multiprocessors.max(1) as u32,
            total_memory: ctx.total_mem().map_err(driver_error("cuDeviceTotalMem"))?,
            driver_version,
        })
    }

    fn alloc(&self, device: usize, bytes: usize) -> Result<DevicePtr> {
        self.bind(device)?;
        let mut ptr: sys::CUdeviceptr = 0;
        // SAFETY: a context is bound; writes one pointer.
        let r = unsafe { sys::cuMemAlloc_v2(&mut ptr, bytes.max(1)) };
        match r {
            CUresult::CUDA_SUCCESS => Ok(DevicePtr::new(ptr)),
            CUresult::CUDA_ERROR_OUT_OF_MEMORY => Err(CudaError::OutOfMemory {
                device,
                bytes,
                code: format!("{r:?}"),
            }),
            _ => driver_call("cuMemAlloc", r).map(|()| DevicePtr::new(ptr)),
        }
    }

    unsafe fn free(&self, device: usize, ptr: DevicePtr) -> Result<()> {
        self.bind(device)?;
        // SAFETY: the caller passes a live allocation of this device, freed once.
        driver_call("cuMemFree", unsafe { sys::cuMemFree_v2(ptr.address()) })
    }

    unsafe fn copy_to_device(&self, device: usize, dst: DevicePtr, src: &[u8]) -> Result<()> {
        if src.is_empty() {
            return Ok(());
        }
        self.bind(device)?;
        // SAFETY: the caller promises the destination range; `src` is live host memory.
        driver_call("cuMemcpyHtoD", unsafe {
            sys::cuMemcpyHtoD_v2(dst.address(), src.as_ptr() as *const c_void, src.len())
        })
    }

    unsafe fn copy_to_host(&self, device: usize, dst: &mut [u8], src: DevicePtr) -> Result<()> {
        if dst.is_empty() {
            return Ok(());
        }
        self.bind(device)?;
        // SAFETY: the caller promises the source range; `dst` is live, writable host memory.
        driver_call("cuMemcpyDtoH", unsafe {
            sys::cuMemcpyDtoH_v2(dst.as_mut_ptr() as *mut c_void, src.address(), dst.len())
        })
    }

    unsafe fn copy_on_device(
        &self,
        device: usize,
        dst: DevicePtr,
        src: DevicePtr,
        bytes: usize,
    ) -> Result<()> {
        if bytes == 0 {
            return Ok(());
        }
        self.bind(device)?;
        // SAFETY: the caller promises both ranges.
        driver_call("cuMemcpyDtoD", unsafe {
            sys::cuMemcpyDtoD_v2(dst.address(), src.address(), bytes)
        })
    }

    unsafe fn memset(&self, device: usize, dst: DevicePtr, value: u8, bytes: usize) -> Result<()> {
        if bytes == 0 {
            return Ok(());
        }
        self.bind(device)?;
        // SAFETY: the caller promises the range.
        driver_call("cuMemsetD8", unsafe {
            sys::cuMemsetD8_v2(dst.address(), value, bytes)
        })
    }

    fn load_module(&self, device: usize, ptx: &str) -> Result<ModuleId> {
        self.bind(device)?;
        let raw = load_with_log(&module_name(ptx), ptx)?;
        let id = ModuleId::new(self.next_id());
        self.handles().modules.insert(id, Module { device, raw });
        Ok(id)
    }

    fn function(&self, module: ModuleId, entry: &str) -> Result<FunctionId> {
        let mut handles = self.handles();
        let (device, raw_module) = match handles.modules.get(&module) {
            Some(m) => (m.device, m.raw),
            None => {
                return Err(CudaError::InvalidUse {
                    call: "cuModuleGetFunction",
                    message: format!("{module} is not loaded"),
                });
            }
        };
        self.bind(device)?;
        let name = CString::new(entry).map_err(|_| CudaError::InvalidUse {
            call: "cuModuleGetFunction",
            message: format!("the entry name {entry:?} contains a NUL byte"),
        })?;
        let mut raw: sys::CUfunction = std::ptr::null_mut();
        // SAFETY: the module is loaded in the bound context; `name` is NUL-terminated.
        driver_call("cuModuleGetFunction", unsafe {
            sys::cuModuleGetFunction(&mut raw, raw_module, name.as_ptr())
        })?;
        let id = FunctionId::new(self.next_id());
        handles.functions.insert(
            id,
            Function {
                device,
                module,
                raw,
            },
        );
        Ok(id)
    }

    unsafe fn launch(
        &self,
        function: FunctionId,
        dims: LaunchDims,
        args: &[KernelArg],
    ) -> Result<()> {
        let (device, raw) = {
            let handles = self.handles();
            let f = handles
                .functions
                .get(&function)
                .ok_or_else(|| CudaError::InvalidUse {
                    call: "cuLaunchKernel",
                    message: format!("{function} is not a loaded function"),
                })?;
            (f.device, f.raw)
        };
        let mut storage: Vec<[u8; 8]> = args.iter().map(|a| a.bytes()).collect();
        if let Some(recorded) = self.handles().captures.get_mut(&device) {
            recorded.push(RecordedLaunch {
                function: raw,
                dims,
                args: storage,
            });
            return Ok(());
        }
        self.bind(device)?;
        let mut params: Vec<*mut c_void> = storage
            .iter_mut()
            .map(|b| b.as_mut_ptr() as *mut c_void)
            .collect();
        let [gx, gy, gz] = dims.grid;
        let [bx, by, bz] = dims.block;
        // SAFETY: the caller promises the arguments match the entry's parameters (each read
        // from the start of its 8-byte little-endian slot) and the memory they point to.
        driver_call("cuLaunchKernel", unsafe {
            sys::cuLaunchKernel(
                raw,
                gx,
                gy,
                gz,
                bx,
                by,
                bz,
                dims.shared_bytes,
                std::ptr::null_mut(),
                params.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        })
    }

    fn unload_module(&self, module: ModuleId) -> Result<()> {
        let mut handles = self.handles();
        let Some(m) = handles.modules.remove(&module) else {
            return Err(CudaError::InvalidUse {
                call: "cuModuleUnload",
                message: format!("{module} is not loaded"),
            });
        };
        handles.functions.retain(|_, f| f.module != module);
        self.bind(m.device)?;
        // SAFETY: the module was loaded in this device's context and is unloaded once.
        driver_call("cuModuleUnload", unsafe { sys::cuModuleUnload(m.raw) })
    }

    fn begin_capture(&self, device: usize) -> Result<()> {
        self.bind(device)?;
        let mut handles = self.handles();
        if handles.captures.contains_key(&device) {
            return Err(capture_misuse(
                "begin_capture",
                format!("device {device} is already capturing"),
            ));
        }
        handles.captures.insert(device, Vec::new());
        Ok(())
    }

    fn end_capture(&self, device: usize) -> Result<GraphId> {
        let mut recorded = self.handles().captures.remove(&device).ok_or_else(|| {
            capture_misuse("end_capture", format!("device {device} is not capturing"))
        })?;
        self.bind(device)?;
        let graph = system_graph::instantiate(device, &mut recorded)?;
        let id = GraphId::new(self.next_id.fetch_add(1, Ordering::Relaxed));
        self.handles().graphs.insert(id, graph);
        Ok(id)
    }

    unsafe fn launch_graph(&self, graph: GraphId) -> Result<()> {
        let handles = self.handles();
        let g = handles.graphs.get(&graph).ok_or_else(|| {
            capture_misuse("cuGraphLaunch", format!("{graph} is not a live graph"))
        })?;
        self.bind(g.device)?;
        // SAFETY: an instantiated graph of this context; the caller promises its pointers.
        driver_call("cuGraphLaunch", unsafe {
            sys::cuGraphLaunch(g.exec, std::ptr::null_mut())
        })
    }

    fn destroy_graph(&self, graph: GraphId) -> Result<()> {
        let g = self.handles().graphs.remove(&graph).ok_or_else(|| {
            capture_misuse("cuGraphDestroy", format!("{graph} is not a live graph"))
        })?;
        self.bind(g.device)?;
        system_graph::destroy(&g)
    }

    fn external_stream(&self, device: usize) -> Result<sys::CUstream> {
        self.bind(device)?;
        // Every call of this driver passes a null stream: the context's legacy default one.
        Ok(std::ptr::null_mut())
    }

    fn synchronize(&self, device: usize) -> Result<()> {
        self.bind(device)?;
        // SAFETY: a context is bound.
        driver_call("cuCtxSynchronize", unsafe { sys::cuCtxSynchronize() })
    }
}

impl Drop for SystemDriver {
    fn drop(&mut self) {
        let modules: Vec<Module> = self.handles().modules.drain().map(|(_, m)| m).collect();
        for m in modules {
            if self.bind(m.device).is_ok() {
                // SAFETY: loaded in that context, unloaded once.
                let _ = unsafe { sys::cuModuleUnload(m.raw) };
            }
        }
    }
}
