//! Running a [`CudaProgram`]: the inputs copied into their fixed places in the arena (packed),
//! each part run in order (a run of launches captured into a CUDA graph on the first call and
//! replayed afterwards, or launched one by one without graphs; a host step through
//! [`super::host`]), and each output copied out of the arena into new CUDA storage, so the
//! tensors a call returns never alias memory the next call writes.

use super::program::{CudaProgram, DeviceLaunch, Param, Part};
use crate::driver::{DevicePtr, KernelArg};
use crate::tensor::copies::alloc_storage;
use crate::tensor::storage::CudaStorage;
use crate::{CudaError, Result};
use tessera_kernel::{KernelExecutor, SlotSource, SlotView};
use tessera_tensor::{Device, Op, Tensor};

impl CudaProgram {
    /// Runs the program on `inputs` (CUDA tensors of this device, one per program input),
    /// host steps with `executor`; returns the outputs as CUDA tensors.
    pub fn run(&self, inputs: &[Tensor], executor: &dyn KernelExecutor) -> Result<Vec<Tensor>> {
        let _one_at_a_time = self.running.lock().unwrap_or_else(|e| e.into_inner());
        self.copy_inputs(inputs)?;
        self.clear_status()?;
        for part in &self.parts {
            match part {
                Part::Launches { launches, graph } => self.run_launches(launches, graph)?,
                Part::Host { step } => {
                    self.run_host(*step, executor)?;
                    self.stats
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .host_steps += 1;
                }
            }
        }
        self.check_status()?;
        let outputs = self
            .program
            .outputs
            .iter()
            .map(|v| self.output(v))
            .collect::<Result<Vec<_>>>()?;
        self.stats.lock().unwrap_or_else(|e| e.into_inner()).calls += 1;
        Ok(outputs)
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
            (m as &dyn std::any::Any)
                .downcast_ref::<CudaStorage>()
                .filter(|s| s.ordinal() == self.state.ordinal)
                .map(|s| {
                    let element = s.element_bytes();
                    (
                        s.ptr().add(layout.offset * element),
                        layout.numel() * element,
                    )
                })
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

    fn copy_inputs(&self, inputs: &[Tensor]) -> Result<()> {
        for (i, slot) in self.program.slots.iter().enumerate() {
            let SlotSource::Input(n) = slot.source else {
                continue;
            };
            let input = inputs.get(n).ok_or_else(|| CudaError::InvalidUse {
                call: "compiled program",
                message: format!("input {n} missing: {} given", inputs.len()),
            })?;
            let (_keep, src, bytes) = self.packed_memory(input)?;
            let (dst, place) = self.slot_memory(tessera_kernel::SlotId::from_index(i))?;
            if bytes != place || input.dtype() != slot.meta.dtype {
                return Err(CudaError::InvalidUse {
                    call: "compiled program",
                    message: format!(
                        "input {n} is {:?} {}, the program was compiled for {:?} {}",
                        input.shape(),
                        input.dtype(),
                        slot.meta.shape,
                        slot.meta.dtype
                    ),
                });
            }
            // SAFETY: both ranges lie in live allocations of this device (checked sizes).
            unsafe {
                self.driver
                    .copy_on_device(self.state.ordinal, dst, src, bytes)?
            };
        }
        Ok(())
    }

    fn run_launches(
        &self,
        launches: &[DeviceLaunch],
        graph: &std::sync::Mutex<Option<crate::driver::GraphId>>,
    ) -> Result<()> {
        if !self.graphs {
            self.issue(launches)?;
            self.stats
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .kernel_launches += launches.len() as u64;
            return Ok(());
        }
        let mut graph = graph.lock().unwrap_or_else(|e| e.into_inner());
        let id = match *graph {
            Some(id) => id,
            None => {
                let device = self.state.ordinal;
                self.driver.begin_capture(device)?;
                let issued = self.issue(launches);
                let ended = self.driver.end_capture(device);
                issued?;
                let id = ended?;
                *graph = Some(id);
                let mut stats = self.stats.lock().unwrap_or_else(|e| e.into_inner());
                stats.graphs_captured += 1;
                stats.kernel_launches += launches.len() as u64;
                id
            }
        };
        // SAFETY: the recorded launches' pointers are the arena's and the attributes', which
        // this program keeps alive, at the places the kernels were checked against.
        unsafe { self.driver.launch_graph(id)? };
        self.stats
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .graph_launches += 1;
        Ok(())
    }

    /// Queues `launches` in order.
    fn issue(&self, launches: &[DeviceLaunch]) -> Result<()> {
        for launch in launches {
            let mut args = Vec::with_capacity(launch.params.len());
            for param in &launch.params {
                args.push(KernelArg::Ptr(match *param {
                    Param::Slot(slot) => self.slot_memory(slot)?.0,
                    Param::Scratch(b) => self.arena.ptr().add(b.offset),
                    Param::Status(n) => self.status[n].1.ptr(),
                }));
            }
            // SAFETY: one pointer per buffer parameter in order; each slot's place holds its
            // packed value (the memory plan checked every arena buffer against the kernels
            // that use it; fixed places and attributes hold the slot's whole value).
            unsafe { self.driver.launch(launch.function, launch.dims, &args)? };
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

    /// The value `v` names, copied out of the arena into a new CUDA tensor.
    pub(crate) fn output(&self, v: &SlotView) -> Result<Tensor> {
        let meta = &self.program.slot(v.slot).meta;
        let (src, bytes) = self.slot_memory(v.slot)?;
        let storage = alloc_storage(&self.state.allocator, meta.dtype, meta.numel())?;
        // SAFETY: the new block holds `bytes`, the slot's packed value.
        unsafe {
            self.driver.copy_on_device(
                self.state.ordinal,
                storage.ptr(),
                src,
                bytes.min(storage.bytes()),
            )?
        };
        let mut t = Tensor::from_device_memory(Box::new(storage), &meta.shape)?;
        for view in &v.views {
            t = Op::View(view.clone()).apply1(&[&t])?;
        }
        debug_assert_eq!(t.device(), Device::Cuda(self.state.ordinal));
        Ok(t)
    }
}
