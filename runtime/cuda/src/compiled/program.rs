//! [`CudaProgram`]: a lowered program prepared for one device. Every kernel the PTX renderer
//! generates is rendered for the device's target and loaded once, kernels with a GEMM or
//! convolution call included (the generated tile kernels of `crate::gemm`, epilogue fused);
//! the steps it does not generate (eager calls of ops the lowering does not cover, kernels
//! the renderer refuses, such as one rounding to bf16 below sm_80) are host steps, each
//! recorded with why. The slots get their places in one arena ([`ArenaLayout`]), allocated
//! here, and the attributes are uploaded once.

use super::layout::{ArenaLayout, SlotPlace};
use super::update::Binding;
use crate::driver::{CudaDriver, FunctionId, GraphId, KernelArg, LaunchDims, ModuleId};
use crate::tensor::device_state::DeviceState;
use crate::tensor::storage::CudaStorage;
use crate::{CudaBackend, CudaError, Result, render};
use std::sync::{Arc, Mutex};
use tessera_kernel::{ArenaBuffer, BufferRole, MemoryPlan, Program, SlotId, Step};
use tessera_tensor::{Device, Tensor};

/// The memory one kernel parameter is bound to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Param {
    Slot(SlotId),
    Scratch(ArenaBuffer),
    /// The status buffer of a kernel with gathers (`tessera_kernel::gather`): its own block,
    /// `CudaProgram::status[n]`, zeroed before each run and checked after it.
    Status(usize),
}

/// One loaded kernel of the program.
#[derive(Debug)]
pub(crate) struct DeviceLaunch {
    /// The program steps it runs (one, or a launch group's).
    pub(crate) steps: std::ops::Range<usize>,
    pub(crate) function: FunctionId,
    pub(crate) dims: LaunchDims,
    pub(crate) params: Vec<Param>,
}

/// A run of consecutive launches (captured as CUDA graphs) or one host step.
#[derive(Debug)]
pub(crate) enum Part {
    Launches {
        launches: Vec<DeviceLaunch>,
        graphs: Mutex<Vec<Captured>>,
    },
    Host {
        step: usize,
    },
}

/// A CUDA graph recorded from a range of a part's launches, with the arguments it was
/// recorded with: its kernel nodes keep those pointers, so a call binding other memory (an
/// updating run's targets) records the range again.
#[derive(Debug)]
pub(crate) struct Captured {
    pub(crate) range: std::ops::Range<usize>,
    pub(crate) graph: GraphId,
    pub(crate) args: Vec<Vec<KernelArg>>,
}

/// A step that does not run as a generated kernel on the device, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostStep {
    pub step: usize,
    pub reason: String,
}

/// Counters of a [`CudaProgram`]'s calls.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CudaRunStats {
    /// Calls run.
    pub calls: u64,
    /// Kernels launched one by one (the first call of each part, or every call without
    /// CUDA graphs).
    pub kernel_launches: u64,
    /// CUDA graphs captured, and replays of them.
    pub graphs_captured: u64,
    pub graph_launches: u64,
    /// Graphs captured again because a call bound other memory than the recorded graph's
    /// (counted in `graphs_captured` too).
    pub graphs_recaptured: u64,
    /// Host steps run.
    pub host_steps: u64,
    /// Outputs written in place over the tensors they update ([`CudaProgram::run_updating`]),
    /// and outputs copied out of the arena into new tensors, over all calls.
    pub outputs_in_place: u64,
    pub outputs_copied: u64,
}

impl std::ops::AddAssign for CudaRunStats {
    fn add_assign(&mut self, other: CudaRunStats) {
        self.calls += other.calls;
        self.kernel_launches += other.kernel_launches;
        self.graphs_captured += other.graphs_captured;
        self.graph_launches += other.graph_launches;
        self.graphs_recaptured += other.graphs_recaptured;
        self.host_steps += other.host_steps;
        self.outputs_in_place += other.outputs_in_place;
        self.outputs_copied += other.outputs_copied;
    }
}

/// A program on one CUDA device, ready to run ([`CudaProgram::run`]).
pub struct CudaProgram {
    pub(crate) driver: Arc<dyn CudaDriver>,
    pub(crate) state: Arc<DeviceState>,
    pub(crate) program: Program,
    /// The program's memory plan (the in-place rule reads which outputs kernels write).
    pub(crate) plan: MemoryPlan,
    pub(crate) parts: Vec<Part>,
    pub(crate) modules: Vec<ModuleId>,
    pub(crate) layout: ArenaLayout,
    pub(crate) arena: CudaStorage,
    /// The attributes on the device, in [`ArenaLayout::attributes`] order.
    pub(crate) attributes: Vec<Tensor>,
    pub(crate) host_steps: Vec<HostStep>,
    /// Per step, its kernel's scratch buffers in the arena (the memory plan's).
    pub(crate) scratch: Vec<Vec<ArenaBuffer>>,
    /// The status buffers of the kernels with gathers, with their kernels' names: outside the
    /// arena, whose bytes later steps reuse before the run's end, when they are read.
    pub(crate) status: Vec<(String, CudaStorage)>,
    pub(crate) graphs: bool,
    pub(crate) stats: Mutex<CudaRunStats>,
    /// Runs one at a time: they share the arena.
    pub(crate) running: Mutex<()>,
}

impl std::fmt::Debug for CudaProgram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaProgram")
            .field("device", &self.state.ordinal)
            .field("parts", &self.parts.len())
            .field("arena_bytes", &self.layout.bytes)
            .finish()
    }
}

impl Drop for CudaProgram {
    fn drop(&mut self) {
        for part in &self.parts {
            if let Part::Launches { graphs, .. } = part {
                for c in graphs.lock().unwrap_or_else(|e| e.into_inner()).iter() {
                    let _ = self.driver.destroy_graph(c.graph);
                }
            }
        }
        for m in &self.modules {
            let _ = self.driver.unload_module(*m);
        }
    }
}

impl CudaProgram {
    /// Prepares `program` (planned by `plan`) on device `ordinal` of `backend`: kernels
    /// rendered and loaded, the arena allocated, each attribute (named by the program's
    /// attribute slots) read by `attribute` and uploaded. `graphs` turns CUDA graphs on.
    pub fn new(
        backend: &CudaBackend,
        ordinal: usize,
        program: &Program,
        plan: &MemoryPlan,
        attribute: &dyn Fn(&str) -> std::result::Result<Tensor, String>,
        graphs: bool,
    ) -> Result<CudaProgram> {
        plan.check(program)?;
        let driver = Arc::clone(backend.driver());
        let state = backend.state(ordinal)?;
        let layout = ArenaLayout::new(program, plan);
        let arena = crate::tensor::copies::alloc_storage(
            &state.allocator,
            tessera_tensor::DType::U8,
            layout.bytes,
        )?;
        let mut attributes = Vec::with_capacity(layout.attributes.len());
        for name in &layout.attributes {
            let value = attribute(name).map_err(|message| CudaError::InvalidUse {
                call: "compiled program",
                message: format!("attribute {name}: {message}"),
            })?;
            attributes.push(value.contiguous()?.to_device(Device::Cuda(ordinal))?);
        }
        let mut prepared = CudaProgram {
            driver: Arc::clone(&driver),
            state,
            program: program.clone(),
            plan: plan.clone(),
            parts: Vec::new(),
            modules: Vec::new(),
            layout,
            arena,
            attributes,
            host_steps: Vec::new(),
            scratch: (0..program.steps.len())
                .map(|i| plan.scratch(i).to_vec())
                .collect(),
            status: Vec::new(),
            graphs,
            stats: Mutex::new(CudaRunStats::default()),
            running: Mutex::new(()),
        };
        let mut index = 0;
        while index < program.steps.len() {
            // A launch group is one kernel, launched once; a group some part of which the
            // renderer refuses runs as its steps would alone.
            if let Some(group) = program.launch_group_at(index)
                && let Some(launch) = prepared.group_launch(group.clone(), plan)?
            {
                match prepared.parts.last_mut() {
                    Some(Part::Launches { launches, .. }) => launches.push(launch),
                    _ => prepared.parts.push(Part::Launches {
                        launches: vec![launch],
                        graphs: Mutex::new(Vec::new()),
                    }),
                }
                index = group.end;
                continue;
            }
            let step = &program.steps[index];
            let at = index;
            index += 1;
            match prepared.launch_of(at, step, plan)? {
                Ok(launch) => match prepared.parts.last_mut() {
                    Some(Part::Launches { launches, .. }) => launches.push(launch),
                    _ => prepared.parts.push(Part::Launches {
                        launches: vec![launch],
                        graphs: Mutex::new(Vec::new()),
                    }),
                },
                Err(reason) => {
                    prepared.host_steps.push(HostStep { step: at, reason });
                    prepared.parts.push(Part::Host { step: at });
                }
            }
        }
        Ok(prepared)
    }

    /// The loaded launch of step `index`, or why it runs on the host.
    fn launch_of(
        &mut self,
        index: usize,
        step: &Step,
        plan: &MemoryPlan,
    ) -> Result<std::result::Result<DeviceLaunch, String>> {
        let (kernel, inputs, outputs) = match step {
            Step::Kernel {
                kernel,
                inputs,
                outputs,
                ..
            } => (kernel, inputs, outputs),
            Step::External { node, call, .. } => {
                let op = match call {
                    tessera_kernel::ExternalCall::Op(op) => op.name(),
                    tessera_kernel::ExternalCall::Module(path) => path.clone(),
                };
                let why = self
                    .program
                    .fallbacks
                    .iter()
                    .find(|f| f.node == *node)
                    .map_or("the lowering gives it no kernel", |f| f.reason.as_str());
                return Ok(Err(format!("%{node} ({op}) runs an eager kernel: {why}")));
            }
        };
        // A kernel with a GEMM or convolution call renders as the generated tile kernel
        // (`crate::gemm`) with the kernel's epilogue fused, exact for f32 as on the CPU.
        let rendered = match render(kernel, &self.state.target) {
            Ok(r) => r,
            Err(CudaError::Unsupported { what, .. }) => {
                return Ok(Err(format!(
                    "{} is not rendered to PTX: {what}",
                    kernel.name
                )));
            }
            Err(e) => return Err(e),
        };
        let params = self.params_of(index, kernel, inputs, outputs, plan)?;
        let module = self.driver.load_module(self.state.ordinal, &rendered.ptx)?;
        self.modules.push(module);
        let function = self.driver.function(module, &rendered.name)?;
        Ok(Ok(DeviceLaunch {
            steps: index..index + 1,
            dims: LaunchDims::linear(
                rendered.grid_for(self.state.properties.multiprocessors),
                rendered.block,
            ),
            function,
            params,
        }))
    }

    /// The one launch of the launch group `group` ([`crate::render_group`], each part on the
    /// blocks it would take alone), or `None` when the renderer refuses a part of it.
    fn group_launch(
        &mut self,
        group: std::ops::Range<usize>,
        plan: &MemoryPlan,
    ) -> Result<Option<DeviceLaunch>> {
        let steps = group.clone();
        let mut kernels = Vec::with_capacity(group.len());
        let mut params = Vec::new();
        for index in group {
            let Step::Kernel {
                kernel,
                inputs,
                outputs,
                ..
            } = &self.program.steps[index]
            else {
                return Ok(None);
            };
            let (kernel, inputs, outputs) = (kernel.clone(), inputs.clone(), outputs.clone());
            params.extend(self.params_of(index, &kernel, &inputs, &outputs, plan)?);
            kernels.push(kernel);
        }
        let refs: Vec<&tessera_kernel::Kernel> = kernels.iter().collect();
        let sm = self.state.properties.multiprocessors;
        let rendered = match crate::render_group(&refs, &self.state.target, &|r| r.grid_for(sm)) {
            Ok(r) => r,
            Err(CudaError::Unsupported { .. }) => return Ok(None),
            Err(e) => return Err(e),
        };
        let module = self.driver.load_module(self.state.ordinal, &rendered.ptx)?;
        self.modules.push(module);
        let function = self.driver.function(module, &rendered.name)?;
        Ok(Some(DeviceLaunch {
            steps,
            dims: LaunchDims::linear(rendered.grid, rendered.block),
            function,
            params,
        }))
    }

    /// The memory each buffer parameter of `kernel`, the kernel of step `index`, is bound to.
    fn params_of(
        &mut self,
        index: usize,
        kernel: &tessera_kernel::Kernel,
        inputs: &[SlotId],
        outputs: &[SlotId],
        plan: &MemoryPlan,
    ) -> Result<Vec<Param>> {
        let (mut ins, mut outs) = (inputs.iter(), outputs.iter());
        let mut scratch = plan.scratch(index).iter();
        let mut params = Vec::with_capacity(kernel.buffers.len());
        let status = kernel.status_buffers();
        for (at, p) in kernel.buffers.iter().enumerate() {
            let param = match p.role {
                BufferRole::Input => ins.next().map(|s| Param::Slot(*s)),
                BufferRole::Output => outs.next().map(|s| Param::Slot(*s)),
                BufferRole::Scratch if status.iter().any(|b| b.index() == at) => {
                    scratch.next();
                    let block = crate::tensor::copies::alloc_storage(
                        &self.state.allocator,
                        tessera_tensor::DType::I64,
                        tessera_kernel::gather::STATUS_LEN,
                    )?;
                    self.status.push((kernel.name.clone(), block));
                    Some(Param::Status(self.status.len() - 1))
                }
                BufferRole::Scratch => scratch.next().map(|b| Param::Scratch(*b)),
            };
            params.push(param.ok_or_else(|| CudaError::Launch {
                kernel: kernel.name.clone(),
                message: "has more buffer parameters than its step has slots".into(),
            })?);
        }
        Ok(params)
    }

    /// The steps that run on the host, with why.
    pub fn host_steps(&self) -> &[HostStep] {
        &self.host_steps
    }

    /// How many kernels run on the device per call (a launch group is one).
    pub fn device_kernels(&self) -> usize {
        self.parts
            .iter()
            .map(|p| match p {
                Part::Launches { launches, .. } => launches.len(),
                Part::Host { .. } => 0,
            })
            .sum()
    }

    /// How many of the device kernels are GEMM or convolution tile kernels (a kernel with an
    /// external GEMM or convolution call, its epilogue fused).
    pub fn device_products(&self) -> usize {
        let host: std::collections::HashSet<usize> =
            self.host_steps.iter().map(|h| h.step).collect();
        self.program
            .steps
            .iter()
            .enumerate()
            .filter(|(i, step)| {
                !host.contains(i)
                    && matches!(step, Step::Kernel { kernel, .. }
                        if kernel.gemm.is_some() || kernel.conv.is_some())
            })
            .count()
    }

    /// The arena's size in bytes (one allocation for the program's lifetime).
    pub fn arena_bytes(&self) -> usize {
        self.layout.bytes
    }

    /// The counters of the calls so far.
    pub fn stats(&self) -> CudaRunStats {
        *self.stats.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The device address and byte size of `slot`'s packed value: the memory `bound` binds it
    /// to, else its place.
    pub(crate) fn slot_memory(
        &self,
        slot: SlotId,
        bound: &Binding,
    ) -> Result<(crate::driver::DevicePtr, usize)> {
        if let Some(memory) = bound.slot(slot) {
            return Ok(memory);
        }
        match self.layout.places.get(slot.index()) {
            Some(SlotPlace::Arena { offset, bytes }) => Ok((self.arena.ptr().add(*offset), *bytes)),
            Some(SlotPlace::Attribute(n)) => {
                let t = &self.attributes[*n];
                let found = t.with_device_memory(|m, layout| {
                    (m as &dyn std::any::Any)
                        .downcast_ref::<CudaStorage>()
                        .map(|s| (s.ptr().add(layout.offset * s.element_bytes()), s.bytes()))
                });
                found.flatten().ok_or_else(|| CudaError::InvalidUse {
                    call: "compiled program",
                    message: format!(
                        "attribute {} is not in CUDA memory",
                        self.layout.attributes[*n]
                    ),
                })
            }
            None => Err(CudaError::InvalidUse {
                call: "compiled program",
                message: format!("slot {slot} is not planned"),
            }),
        }
    }
}
