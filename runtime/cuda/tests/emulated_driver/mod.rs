//! [`CudaDriver`] on the PTX emulator: device memory is the emulator's global memory (one per
//! device, addresses never reused, every access bounds-checked), a loaded module is parsed PTX,
//! and a launch runs its blocks one after another on the CPU. Everything above the driver
//! (the caching allocator, CUDA tensors, eager kernels) runs unchanged on it, so the tests of
//! those run on every machine. It reports what the real driver cannot check: a copy, free or
//! kernel access outside live memory is an error naming the address, not a corruption.
//!
//! It counts what it was asked (allocations, frees, launches, modules) so tests can see that
//! the allocator reuses memory and that kernels are loaded once.

#![allow(dead_code)]

use super::emulator::{GlobalMemory, LaunchConfig, Module, ParamValue};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use tessera_cuda::driver::{DevicePtr, FunctionId, GraphId, KernelArg, LaunchDims, ModuleId};
use tessera_cuda::{CudaDriver, CudaError, DeviceProperties, Result};

/// What the emulated driver has been asked to do so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DriverCounters {
    pub allocations: u64,
    pub frees: u64,
    pub launches: u64,
    pub modules_loaded: u64,
    pub copies_to_device: u64,
    pub copies_to_host: u64,
    /// Copies from device memory to device memory (`cuMemcpyDtoD`).
    pub copies_on_device: u64,
    /// Launches recorded while capturing (not run then).
    pub captured_launches: u64,
    /// Graphs instantiated by `end_capture`.
    pub graphs_instantiated: u64,
    /// Replays of graphs (`launch_graph`), and the kernels those replays ran.
    pub graph_launches: u64,
    pub replayed_launches: u64,
}

/// A launch as recorded by a capture.
type Recorded = (FunctionId, LaunchDims, Vec<KernelArg>);

struct State {
    memories: Vec<GlobalMemory>,
    modules: HashMap<ModuleId, (usize, Arc<Module>)>,
    functions: HashMap<FunctionId, (usize, ModuleId, Arc<Module>, String)>,
    next_id: u64,
    counters: DriverCounters,
    /// Modules loaded on each device.
    modules_per_device: Vec<u64>,
    /// The launches recorded so far on each capturing device.
    captures: HashMap<usize, Vec<Recorded>>,
    graphs: HashMap<GraphId, (usize, Vec<Recorded>)>,
    /// Each device's compute capability (8.0 unless a test sets another).
    capabilities: Vec<(i32, i32)>,
}

/// A driver whose devices are PTX emulators.
pub struct EmulatedDriver {
    state: Mutex<State>,
    /// The bytes each device holds; an allocation that does not fit in what is left is out
    /// of memory.
    total_memory: usize,
}

impl std::fmt::Debug for EmulatedDriver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmulatedDriver")
            .field("devices", &self.lock().memories.len())
            .finish()
    }
}

/// Instructions one emulated thread may run in a launch before it is declared stuck.
const STEP_LIMIT: u64 = 5_000_000;

fn emulator_error(call: &'static str) -> impl Fn(super::emulator::EmuError) -> CudaError {
    move |e| CudaError::InvalidUse {
        call,
        message: e.to_string(),
    }
}

impl EmulatedDriver {
    /// `devices` emulated devices of 64 MiB each.
    pub fn new(devices: usize) -> EmulatedDriver {
        EmulatedDriver::with_memory(devices, 64 << 20)
    }

    /// `devices` emulated devices of `total_memory` bytes each.
    pub fn with_memory(devices: usize, total_memory: usize) -> EmulatedDriver {
        EmulatedDriver {
            state: Mutex::new(State {
                memories: (0..devices).map(|_| GlobalMemory::default()).collect(),
                modules: HashMap::new(),
                functions: HashMap::new(),
                next_id: 1,
                counters: DriverCounters::default(),
                modules_per_device: vec![0; devices],
                captures: HashMap::new(),
                graphs: HashMap::new(),
                capabilities: vec![(8, 0); devices],
            }),
            total_memory,
        }
    }

    pub fn counters(&self) -> DriverCounters {
        self.lock().counters
    }

    /// Makes `device` report compute capability `capability` (what kernels are rendered
    /// for, when asked before the device's first use).
    pub fn set_compute_capability(&self, device: usize, capability: (i32, i32)) {
        if let Some(c) = self.lock().capabilities.get_mut(device) {
            *c = capability;
        }
    }

    /// How many modules were loaded on `device` so far.
    pub fn modules_loaded_on(&self, device: usize) -> u64 {
        self.lock().modules_per_device[device]
    }

    /// How many allocations are live on `device`.
    pub fn live_allocations(&self, device: usize) -> usize {
        self.lock().memories[device].buffer_count()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl State {
    fn memory(&mut self, device: usize) -> Result<&mut GlobalMemory> {
        let count = self.memories.len();
        self.memories
            .get_mut(device)
            .ok_or_else(|| CudaError::DeviceUnavailable {
                reason: format!("no device cuda:{device}: the emulator has {count}"),
            })
    }

    fn next_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }
}

impl CudaDriver for EmulatedDriver {
    fn name(&self) -> &str {
        "emulated ptx"
    }

    fn device_count(&self) -> usize {
        self.lock().memories.len()
    }

    fn properties(&self, device: usize) -> Result<DeviceProperties> {
        let mut state = self.lock();
        state.memory(device)?;
        Ok(DeviceProperties {
            name: format!("PTX emulator {device}"),
            compute_capability: state.capabilities[device],
            // One multiprocessor: grids of at most 8 blocks, so launches stay quick.
            multiprocessors: 1,
            total_memory: self.total_memory,
            // CUDA 11.0: kernels are rendered as PTX 7.0, the version the emulator reads.
            driver_version: 11000,
        })
    }

    fn alloc(&self, device: usize, bytes: usize) -> Result<DevicePtr> {
        let total = self.total_memory;
        let mut state = self.lock();
        let memory = state.memory(device)?;
        if memory.allocated_bytes().saturating_add(bytes) > total {
            return Err(CudaError::OutOfMemory {
                device,
                bytes,
                code: format!(
                    "{} of the emulated device's {total} bytes are allocated",
                    memory.allocated_bytes()
                ),
            });
        }
        let name = format!("alloc{}", memory.buffer_count());
        let address = memory.alloc(&name, bytes.max(1));
        state.counters.allocations += 1;
        Ok(DevicePtr::new(address))
    }

    unsafe fn free(&self, device: usize, ptr: DevicePtr) -> Result<()> {
        let mut state = self.lock();
        state
            .memory(device)?
            .free(ptr.address())
            .map_err(emulator_error("cuMemFree"))?;
        state.counters.frees += 1;
        Ok(())
    }

    unsafe fn copy_to_device(&self, device: usize, dst: DevicePtr, src: &[u8]) -> Result<()> {
        let mut state = self.lock();
        state.counters.copies_to_device += 1;
        if src.is_empty() {
            return Ok(());
        }
        state
            .memory(device)?
            .write_at(dst.address(), src)
            .map_err(emulator_error("cuMemcpyHtoD"))
    }

    unsafe fn copy_to_host(&self, device: usize, dst: &mut [u8], src: DevicePtr) -> Result<()> {
        let mut state = self.lock();
        state.counters.copies_to_host += 1;
        if dst.is_empty() {
            return Ok(());
        }
        let bytes = state
            .memory(device)?
            .read_at(src.address(), dst.len())
            .map_err(emulator_error("cuMemcpyDtoH"))?;
        dst.copy_from_slice(bytes);
        Ok(())
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
        let mut state = self.lock();
        state.counters.copies_on_device += 1;
        let memory = state.memory(device)?;
        let data = memory
            .read_at(src.address(), bytes)
            .map_err(emulator_error("cuMemcpyDtoD"))?
            .to_vec();
        memory
            .write_at(dst.address(), &data)
            .map_err(emulator_error("cuMemcpyDtoD"))
    }

    unsafe fn memset(&self, device: usize, dst: DevicePtr, value: u8, bytes: usize) -> Result<()> {
        if bytes == 0 {
            return Ok(());
        }
        self.lock()
            .memory(device)?
            .write_at(dst.address(), &vec![value; bytes])
            .map_err(emulator_error("cuMemsetD8"))
    }

    fn load_module(&self, device: usize, ptx: &str) -> Result<ModuleId> {
        let mut state = self.lock();
        state.memory(device)?;
        let module = Module::parse(ptx).map_err(|e| CudaError::ModuleRejected {
            kernel: "module".into(),
            code: "the emulator's parser".into(),
            log: e.to_string(),
        })?;
        let id = ModuleId::new(state.next_id());
        state.modules.insert(id, (device, Arc::new(module)));
        state.counters.modules_loaded += 1;
        state.modules_per_device[device] += 1;
        Ok(id)
    }

    fn function(&self, module: ModuleId, entry: &str) -> Result<FunctionId> {
        let mut state = self.lock();
        let (device, m) =
            state
                .modules
                .get(&module)
                .cloned()
                .ok_or_else(|| CudaError::InvalidUse {
                    call: "cuModuleGetFunction",
                    message: format!("{module} is not loaded"),
                })?;
        m.entry(entry)
            .map_err(emulator_error("cuModuleGetFunction"))?;
        let id = FunctionId::new(state.next_id());
        state
            .functions
            .insert(id, (device, module, m, entry.to_string()));
        Ok(id)
    }

    unsafe fn launch(
        &self,
        function: FunctionId,
        dims: LaunchDims,
        args: &[KernelArg],
    ) -> Result<()> {
        let mut state = self.lock();
        let device = state.functions.get(&function).map(|f| f.0);
        if let Some(recorded) = device.and_then(|d| state.captures.get_mut(&d)) {
            recorded.push((function, dims, args.to_vec()));
            state.counters.captured_launches += 1;
            return Ok(());
        }
        state.counters.launches += 1;
        drop(state);
        self.run_launch(function, dims, args)
    }

    fn begin_capture(&self, device: usize) -> Result<()> {
        let mut state = self.lock();
        state.memory(device)?;
        if state.captures.contains_key(&device) {
            return Err(CudaError::InvalidUse {
                call: "begin_capture",
                message: format!("device {device} is already capturing"),
            });
        }
        state.captures.insert(device, Vec::new());
        Ok(())
    }

    fn end_capture(&self, device: usize) -> Result<GraphId> {
        let mut state = self.lock();
        let recorded = state
            .captures
            .remove(&device)
            .ok_or_else(|| CudaError::InvalidUse {
                call: "end_capture",
                message: format!("device {device} is not capturing"),
            })?;
        let id = GraphId::new(state.next_id());
        state.graphs.insert(id, (device, recorded));
        state.counters.graphs_instantiated += 1;
        Ok(id)
    }

    unsafe fn launch_graph(&self, graph: GraphId) -> Result<()> {
        let recorded = {
            let mut state = self.lock();
            let (_, recorded) =
                state
                    .graphs
                    .get(&graph)
                    .cloned()
                    .ok_or_else(|| CudaError::InvalidUse {
                        call: "cuGraphLaunch",
                        message: format!("{graph} is not a live graph"),
                    })?;
            state.counters.graph_launches += 1;
            state.counters.replayed_launches += recorded.len() as u64;
            recorded
        };
        for (function, dims, args) in recorded {
            self.run_launch(function, dims, &args)?;
        }
        Ok(())
    }

    fn destroy_graph(&self, graph: GraphId) -> Result<()> {
        self.lock()
            .graphs
            .remove(&graph)
            .map(|_| ())
            .ok_or_else(|| CudaError::InvalidUse {
                call: "cuGraphDestroy",
                message: format!("{graph} is not a live graph"),
            })
    }

    fn unload_module(&self, module: ModuleId) -> Result<()> {
        let mut state = self.lock();
        state
            .modules
            .remove(&module)
            .ok_or_else(|| CudaError::InvalidUse {
                call: "cuModuleUnload",
                message: format!("{module} is not loaded"),
            })?;
        state
            .functions
            .retain(|_, (_, owner, _, _)| *owner != module);
        Ok(())
    }

    /// The emulator has no CUDA context an external library could enqueue on.
    fn external_stream(&self, device: usize) -> Result<cudarc::driver::sys::CUstream> {
        self.lock().memory(device)?;
        Err(CudaError::InvalidUse {
            call: "external_stream",
            message: format!(
                "the emulated driver has no CUDA context on cuda:{device} for an external \
                 library (NCCL) to enqueue work on"
            ),
        })
    }

    fn synchronize(&self, device: usize) -> Result<()> {
        self.lock().memory(device).map(|_| ())
    }
}

impl EmulatedDriver {
    /// Runs one launch on the emulator now.
    fn run_launch(&self, function: FunctionId, dims: LaunchDims, args: &[KernelArg]) -> Result<()> {
        let mut state = self.lock();
        let (device, _, module, entry) =
            state
                .functions
                .get(&function)
                .cloned()
                .ok_or_else(|| CudaError::InvalidUse {
                    call: "cuLaunchKernel",
                    message: format!("{function} is not a loaded function"),
                })?;
        let fail = |message: String| CudaError::Launch {
            kernel: entry.clone(),
            message,
        };
        if dims.grid[1..] != [1, 1] || dims.block[1..] != [1, 1] || dims.shared_bytes != 0 {
            return Err(fail(format!(
                "the emulator runs 1-D launches without dynamic shared memory, got {dims:?}"
            )));
        }
        let params: Vec<ParamValue> = args
            .iter()
            .map(|a| match *a {
                KernelArg::Ptr(p) => ParamValue::Ptr(p.address()),
                KernelArg::U64(v) => ParamValue::U64(v),
                KernelArg::F64(v) => ParamValue::U64(v.to_bits()),
                KernelArg::U32(v) => ParamValue::U32(v),
                KernelArg::I32(v) => ParamValue::U32(v as u32),
                KernelArg::F32(v) => ParamValue::U32(v.to_bits()),
            })
            .collect();
        let config = LaunchConfig {
            grid: dims.grid[0],
            block: dims.block[0],
            step_limit: STEP_LIMIT,
        };
        let memory = state.memory(device)?;
        module
            .launch(&entry, config, &params, memory)
            .map_err(|e| fail(e.to_string()))
    }
}
