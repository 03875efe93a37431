//! Running a [`CudaProgram`]: the inputs copied into their fixed places in the arena (packed),
//! each part run in order (a run of launches captured into a CUDA graph on the first call and
//! replayed afterwards, recorded again when a call binds other memory than the graph's; or
//! launched one by one without graphs; a host step through [`super::host`]), and each output
//! copied out of the arena into new CUDA storage, allocated before the first step, so the
//! tensors a call returns never alias memory the next call writes. An updating run
//! ([`super::update`]) binds some slots to its targets' memory instead.

use super::program::{Captured, CudaProgram, DeviceLaunch, Param, Part};
use super::region::Region;
use super::update::Binding;
use crate::driver::{DevicePtr, KernelArg};
use crate::tensor::copies::alloc_storage;
use crate::{CudaError, Result};
use tessera_kernel::{KernelExecutor, SlotSource, SlotView};
use tessera_tensor::{Device, Op, Tensor};

impl CudaProgram {
    /// Runs the program on `inputs` (CUDA tensors of this device, one per program input),
    /// host steps with `executor`; returns the outputs as CUDA tensors.
    pub fn run(&self, inputs: &[Tensor], executor: &dyn KernelExecutor) -> Result<Vec<Tensor>> {
        let _one_at_a_time = self.running.lock().unwrap_or_else(|e| e.into_inner());
        let outputs = self.run_bound(inputs, &Binding::none(), executor)?;
        Ok(outputs.into_iter().flatten().collect())
    }

    /// Runs the program with the slots `bound` binds in their memory; the outputs it does not
    /// write in place come back as new CUDA tensors, the others as `None`. The caller holds
    /// `running` (runs share the arena).
    pub(crate) fn run_bound(
        &self,
        inputs: &[Tensor],
        bound: &Binding,
        executor: &dyn KernelExecutor,
    ) -> Result<Vec<Option<Tensor>>> {
        self.copy_inputs(inputs, bound)?;
        // Nothing allocates once a kernel may have written in place.
        let outputs = (self.program.outputs.iter().enumerate())
            .map(|(k, v)| (!bound.in_place(k)).then(|| self.new_output(v)).transpose())
            .collect::<Result<Vec<_>>>()?;
        self.clear_status()?;
        self.run_parts(bound, executor)?;
        self.check_status()?;
        let mut copied = 0;
        for (v, out) in self.program.outputs.iter().zip(&outputs) {
            if let Some((_, dst, place)) = out {
                self.copy_out(v, *dst, *place, bound)?;
                copied += 1;
            }
        }
        let mut stats = self.stats.lock().unwrap_or_else(|e| e.into_inner());
        stats.calls += 1;
        stats.outputs_copied += copied;
        stats.outputs_in_place += (outputs.len() as u64) - copied;
        Ok(outputs.into_iter().map(|o| o.map(|(t, _, _)| t)).collect())
    }

    /// Runs the parts in order. When a kernel writes in place and gathers record faults, the
    /// faults are checked before the first such kernel (a range of launches is then run as
    /// two graphs), so that a fault fails the run before any target is written.
    fn run_parts(&self, bound: &Binding, executor: &dyn KernelExecutor) -> Result<()> {
        let check_at = bound.first_write().filter(|_| !self.status.is_empty());
        let mut checked = check_at.is_none();
        for part in &self.parts {
            match part {
                Part::Launches { launches, graphs } => {
                    let all = 0..launches.len();
                    let cut = check_at
                        .filter(|_| !checked)
                        .and_then(|at| launches.iter().position(|l| l.steps.end > at));
                    let Some(cut) = cut else {
                        self.run_launches(launches, graphs, all, bound)?;
                        continue;
                    };
                    if cut > 0 {
                        self.run_launches(launches, graphs, 0..cut, bound)?;
                    }
                    self.check_status()?;
                    checked = true;
                    self.run_launches(launches, graphs, cut..all.end, bound)?;
                }
                Part::Host { step } => {
                    if check_at.is_some_and(|at| !checked && *step >= at) {
                        self.check_status()?;
                        checked = true;
                    }
                    self.run_host(*step, executor, bound)?;
                    self.stats
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .host_steps += 1;
                }
            }
        }
        Ok(())
    }

    /// The device address of element 0 of `t`'s packed values (`t` is made packed when it
    /// is a view), and the tensor holding them.
    pub(crate) fn packed_memory(&self, t: &Tensor) -> Result<(Tensor, DevicePtr, usize)> {
        let t = if t.is_contiguous() {
            t.clone()
        } else {
            t.contiguous()?
        };
        let found = t.with_device_memory(|m, layout| {
            Region::of(m, layout, self.state.ordinal).map(|r| (r.first, r.bytes))
        });
        let (ptr, bytes) = found.flatten().ok_or_else(|| CudaError::InvalidUse {
            call: "compiled program",
            message: format!(
                "a tensor on {} is not CUDA memory of device {}",
                t.device(),
                self.state.ordinal
            ),
        })?;
        Ok((t, ptr, bytes))
    }

    /// Copies each input into its place, except those `bound` binds (read where they are).
    fn copy_inputs(&self, inputs: &[Tensor], bound: &Binding) -> Result<()> {
        for (i, slot) in self.program.slots.iter().enumerate() {
            let SlotSource::Input(n) = slot.source else {
                continue;
            };
            let input = inputs.get(n).ok_or_else(|| CudaError::InvalidUse {
                call: "compiled program",
                message: format!("input {n} missing: {} given", inputs.len()),
            })?;
            let wrong = || CudaError::InvalidUse {
                call: "compiled program",
                message: format!(
                    "input {n} is {:?} {}, the program was compiled for {:?} {}",
                    input.shape(),
                    input.dtype(),
                    slot.meta.shape,
                    slot.meta.dtype
                ),
            };
            let id = tessera_kernel::SlotId::from_index(i);
            if bound.slot(id).is_some() {
                // Its storage is write-locked for the run: only its metadata is read.
                if input.dtype() != slot.meta.dtype || input.numel() != slot.meta.numel() {
                    return Err(wrong());
                }
                continue;
            }
            let (_keep, src, bytes) = self.packed_memory(input)?;
            let (dst, place) = self.slot_memory(id, bound)?;
            if bytes != place || input.dtype() != slot.meta.dtype {
                return Err(wrong());
            }
            // SAFETY: both ranges lie in live allocations of this device (checked sizes).
            unsafe {
                self.driver
                    .copy_on_device(self.state.ordinal, dst, src, bytes)?
            };
        }
        Ok(())
    }

    /// Runs `launches[range]`: launched one by one without CUDA graphs; else the range's
    /// graph replayed, captured first when there is none or when its recorded arguments differ
    /// from this call's (other memory bound).
    fn run_launches(
        &self,
        launches: &[DeviceLaunch],
        graphs: &std::sync::Mutex<Vec<Captured>>,
        range: std::ops::Range<usize>,
        bound: &Binding,
    ) -> Result<()> {
        let launches = &launches[range.clone()];
        let args = launches
            .iter()
            .map(|l| self.args_of(l, bound))
            .collect::<Result<Vec<_>>>()?;
        if !self.graphs {
            self.issue(launches, &args)?;
            self.stats
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .kernel_launches += launches.len() as u64;
            return Ok(());
        }
        let mut graphs = graphs.lock().unwrap_or_else(|e| e.into_inner());
        let found = graphs.iter().position(|c| c.range == range);
        let graph = match found {
            Some(i) if graphs[i].args == args => graphs[i].graph,
            _ => {
                let device = self.state.ordinal;
                self.driver.begin_capture(device)?;
                let issued = self.issue(launches, &args);
                let ended = self.driver.end_capture(device);
                issued?;
                let graph = ended?;
                let captured = Captured { range, graph, args };
                let mut stats = self.stats.lock().unwrap_or_else(|e| e.into_inner());
                stats.graphs_captured += 1;
                stats.kernel_launches += launches.len() as u64;
                match found {
                    Some(i) => {
                        let old = std::mem::replace(&mut graphs[i], captured);
                        stats.graphs_recaptured += 1;
                        self.driver.destroy_graph(old.graph)?;
                    }
                    None => graphs.push(captured),
                }
                graph
            }
        };
        // SAFETY: the recorded launches' pointers are this call's: the arena's and the
        // attributes', which this program keeps alive, and the bound targets', locked for the
        // call; each at the place its kernel was checked against.
        unsafe { self.driver.launch_graph(graph)? };
        self.stats
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .graph_launches += 1;
        Ok(())
    }

    /// The arguments of `launch`: one pointer per buffer parameter, in order.
    fn args_of(&self, launch: &DeviceLaunch, bound: &Binding) -> Result<Vec<KernelArg>> {
        launch
            .params
            .iter()
            .map(|param| {
                Ok(KernelArg::Ptr(match *param {
                    Param::Slot(slot) => self.slot_memory(slot, bound)?.0,
                    Param::Scratch(b) => self.arena.ptr().add(b.offset),
                    Param::Status(n) => self.status[n].1.ptr(),
                }))
            })
            .collect()
    }

    /// Queues `launches` in order, with their `args`.
    fn issue(&self, launches: &[DeviceLaunch], args: &[Vec<KernelArg>]) -> Result<()> {
        for (launch, args) in launches.iter().zip(args) {
            // SAFETY: one pointer per buffer parameter in order; each slot's place holds its
            // packed value (the memory plan checked every arena buffer against the kernels
            // that use it; fixed places, attributes and bound targets hold the slot's whole
            // value).
            unsafe { self.driver.launch(launch.function, launch.dims, args)? };
        }
        Ok(())
    }

    /// Zeroes the status buffers of the kernels with gathers before a run.
    fn clear_status(&self) -> Result<()> {
        for (_, block) in &self.status {
            // SAFETY: the block is a live allocation of this device of `bytes()` bytes.
            unsafe {
                self.driver
                    .memset(self.state.ordinal, block.ptr(), 0, block.bytes())?
            };
        }
        Ok(())
    }

    /// Fails the run with the first fault a gather recorded (an index outside its dim).
    fn check_status(&self) -> Result<()> {
        for (kernel, block) in &self.status {
            let status =
                crate::tensor::eager::read_status(&self.driver, self.state.ordinal, block)?;
            tessera_kernel::gather::check_status(kernel, &status)?;
        }
        Ok(())
    }

    /// A new CUDA tensor for the value `v` names (its views applied), with the address and
    /// bytes of its storage, which [`CudaProgram::copy_out`] fills.
    fn new_output(&self, v: &SlotView) -> Result<(Tensor, DevicePtr, usize)> {
        let meta = &self.program.slot(v.slot).meta;
        let storage = alloc_storage(&self.state.allocator, meta.dtype, meta.numel())?;
        let (ptr, bytes) = (storage.ptr(), storage.bytes());
        let mut t = Tensor::from_device_memory(Box::new(storage), &meta.shape)?;
        for view in &v.views {
            t = Op::View(view.clone()).apply1(&[&t])?;
        }
        debug_assert_eq!(t.device(), Device::Cuda(self.state.ordinal));
        Ok((t, ptr, bytes))
    }

    /// Copies `v`'s slot into `bytes` of new storage at `dst`.
    fn copy_out(&self, v: &SlotView, dst: DevicePtr, bytes: usize, bound: &Binding) -> Result<()> {
        let (src, place) = self.slot_memory(v.slot, bound)?;
        // SAFETY: the new block holds `bytes`, the slot's packed value.
        unsafe {
            self.driver
                .copy_on_device(self.state.ordinal, dst, src, place.min(bytes))
        }
    }

    /// The value `v` names, copied out of the arena into a new CUDA tensor.
    pub(crate) fn output(&self, v: &SlotView, bound: &Binding) -> Result<Tensor> {
        let (t, dst, bytes) = self.new_output(v)?;
        self.copy_out(v, dst, bytes, bound)?;
        Ok(t)
    }
}
