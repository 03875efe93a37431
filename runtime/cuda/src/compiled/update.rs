//! Running a [`CudaProgram`] whose outputs update tensors it also reads (a compiled training
//! step's new parameters and optimizer state): where the safety rule of
//! `tessera_kernel::in_place` holds, the updating kernel's output is bound to the target's
//! own device memory, the inputs holding the target are read from there too (not copied
//! into the arena), and nothing is copied out for it. The targets' storage is write-locked
//! for the run and its version bumped, as every in-place write's. Targets that do not fit
//! (another device, a view, another shape or dtype) or whose update is not safe in place are
//! returned, as by [`CudaProgram::run`], for the caller to copy.

use super::program::CudaProgram;
use super::region::Region;
use crate::driver::DevicePtr;
use crate::{CudaError, Result};
use std::collections::{HashMap, HashSet};
use tessera_kernel::{InPlaceOutput, KernelExecutor, SlotId, SlotSource, UpdateTarget};
use tessera_tensor::{Device, Tensor};

/// Device memory a slot is bound to: its address and bytes.
pub(crate) type Memory = (DevicePtr, usize);

/// The memory one call binds slots to instead of their places in the arena (the targets
/// written in place, each with its slots), and which outputs that writes.
#[derive(Debug, Default)]
pub(crate) struct Binding {
    slots: Vec<Option<Memory>>,
    in_place: Vec<bool>,
    first_write: Option<usize>,
}

impl Binding {
    /// No slot bound: every output is copied out.
    pub(crate) fn none() -> Binding {
        Binding::default()
    }

    /// `chosen[i]`'s slots bound to `memory[i]` (its target's address and bytes).
    fn new(slots: usize, chosen: &[InPlaceOutput], memory: &[Memory]) -> Binding {
        let mut bound = Binding {
            slots: vec![None; slots],
            in_place: Vec::new(),
            first_write: chosen.iter().map(|c| c.step).min(),
        };
        for (c, m) in chosen.iter().zip(memory) {
            for s in &c.slots {
                bound.slots[s.index()] = Some(*m);
            }
            if bound.in_place.len() <= c.output {
                bound.in_place.resize(c.output + 1, false);
            }
            bound.in_place[c.output] = true;
        }
        bound
    }

    /// The memory `slot` is bound to, if any.
    pub(crate) fn slot(&self, slot: SlotId) -> Option<Memory> {
        self.slots.get(slot.index()).copied().flatten()
    }

    /// Whether output `k` is written in place.
    pub(crate) fn in_place(&self, k: usize) -> bool {
        self.in_place.get(k).copied().unwrap_or(false)
    }

    /// The step of the first kernel writing in place (before which the faults recorded by
    /// gathers are checked, so that a failed run leaves the targets as they were).
    pub(crate) fn first_write(&self) -> Option<usize> {
        self.first_write
    }
}

impl CudaProgram {
    /// Runs the program on `inputs`, as [`CudaProgram::run`]; output `k` updates
    /// `targets[k]` where given: written over it in place when it fits (a packed CUDA tensor
    /// of this device with the output's shape and dtype, every input sharing its storage
    /// being that same packed tensor) and the update is safe
    /// ([`tessera_kernel::in_place_outputs`]), and then `None` in the result; every other
    /// output is returned as a new CUDA tensor. When the run fails, no target was written
    /// (nothing that can fail runs after the first in-place write: the gathers' faults are
    /// checked before it).
    pub fn run_updating(
        &self,
        inputs: &[Tensor],
        targets: &[Option<Tensor>],
        executor: &dyn KernelExecutor,
    ) -> Result<Vec<Option<Tensor>>> {
        if targets.len() != self.program.outputs.len() {
            return Err(CudaError::InvalidUse {
                call: "compiled program",
                message: format!(
                    "{} update targets for a program of {} outputs",
                    targets.len(),
                    self.program.outputs.len()
                ),
            });
        }
        let holders = self.holders(inputs);
        let places: Vec<Option<Region>> = targets.iter().map(|t| self.place(t.as_ref()?)).collect();
        let fitting: Vec<Option<UpdateTarget>> = (targets.iter().zip(&places).enumerate())
            .map(|(k, (t, place))| self.update_target(k, t.as_ref()?, (*place)?, &holders))
            .collect();
        let shares = |k: usize, j: usize| match (places[k], places[j]) {
            (Some(a), Some(b)) => a.block == b.block,
            _ => false,
        };
        let chosen = tessera_kernel::in_place_outputs(&self.program, &self.plan, &fitting, &shares);
        let locked: Vec<&Tensor> = chosen
            .iter()
            .filter_map(|c| targets[c.output].as_ref())
            .collect();
        let slots = self.program.slots.len();
        // The run's lock before the targets': a plain run holding it may be reading them.
        let _one_at_a_time = self.running.lock().unwrap_or_else(|e| e.into_inner());
        with_locked(
            self.state.ordinal,
            &locked,
            &mut Vec::with_capacity(locked.len()),
            &mut |memory| {
                let bound = Binding::new(slots, &chosen, memory);
                self.run_bound(inputs, &bound, executor)
            },
        )
    }

    /// Output `k`'s target `t`, at `place`, as the in-place rule takes it, when it fits: the
    /// input slots holding it (each such input the same packed tensor, of the output's size),
    /// and no uploaded attribute in its memory.
    fn update_target(
        &self,
        k: usize,
        t: &Tensor,
        place: Region,
        holders: &Holders,
    ) -> Option<UpdateTarget> {
        let meta = self.plan.outputs().get(k)?;
        let fits = t
            .with_layout(|l, d| l.is_contiguous() && l.shape == meta.shape && d == meta.dtype)
            && t.device() == Device::Cuda(self.state.ordinal);
        if !fits || holders.attributes.contains(&place.block) {
            return None;
        }
        let mut aliases = Vec::new();
        for &(slot, first) in holders.inputs.get(&place.block).into_iter().flatten() {
            let slot_meta = &self.program.slot(slot).meta;
            let same = first == Some(place.first)
                && slot_meta.dtype == meta.dtype
                && slot_meta.numel() == meta.numel();
            if !same {
                return None;
            }
            aliases.push(slot);
        }
        Some(UpdateTarget { aliases })
    }

    /// The input slots and attributes of a call with `inputs`, by the memory block they are in.
    fn holders(&self, inputs: &[Tensor]) -> Holders {
        let mut holders = Holders::default();
        for (i, slot) in self.program.slots.iter().enumerate() {
            let SlotSource::Input(n) = slot.source else {
                continue;
            };
            let Some((input, place)) = inputs.get(n).and_then(|t| Some((t, self.place(t)?))) else {
                continue;
            };
            let packed = input.is_contiguous()
                && input.dtype() == slot.meta.dtype
                && input.numel() == slot.meta.numel();
            holders
                .inputs
                .entry(place.block)
                .or_default()
                .push((SlotId::from_index(i), packed.then_some(place.first)));
        }
        for a in &self.attributes {
            if let Some(place) = self.place(a) {
                holders.attributes.insert(place.block);
            }
        }
        holders
    }

    /// Where `t` lives, when it is CUDA memory of this device.
    fn place(&self, t: &Tensor) -> Option<Region> {
        t.with_device_memory(|m, layout| Region::of(m, layout, self.state.ordinal))
            .flatten()
    }
}

/// The input slots and uploaded attributes of one call by the block of their memory: for
/// each input slot, the address of its tensor's first element when that tensor is the
/// slot's packed value (else `None`).
#[derive(Debug, Default)]
struct Holders {
    inputs: HashMap<DevicePtr, Vec<(SlotId, Option<DevicePtr>)>>,
    attributes: HashSet<DevicePtr>,
}

/// Write-locks the storage of each of `targets` in turn (bumping its version), collecting
/// each one's address and bytes in `memory`, and calls `f` with them, every lock held.
fn with_locked<R>(
    ordinal: usize,
    targets: &[&Tensor],
    memory: &mut Vec<Memory>,
    f: &mut dyn FnMut(&[Memory]) -> Result<R>,
) -> Result<R> {
    let Some((first, rest)) = targets.split_first() else {
        return f(memory);
    };
    let not_cuda = || CudaError::InvalidUse {
        call: "compiled program",
        message: format!(
            "an update target on {} is not CUDA memory of device {ordinal}",
            first.device()
        ),
    };
    first
        .with_device_storage(true, |m, layout| {
            let r = Region::of(m, layout, ordinal).ok_or_else(not_cuda)?;
            memory.push((r.first, r.bytes));
            let r = with_locked(ordinal, rest, memory, f);
            memory.pop();
            r
        })
        .unwrap_or_else(|| Err(not_cuda()))
}
