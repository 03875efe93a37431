//! Running a planned program whose outputs update tensors it also reads (a training step's new
//! parameters and optimizer state): a kernel writes such an output straight over the tensor
//! it updates, in place, when that is safe (the rule of [`crate::in_place`], which a device's
//! runner calls too), and the other outputs come back as tensors for the caller to copy.

use crate::run::{Run, materialize};
use crate::run_into::with_locked;
use crate::{
    Environment, KernelError, KernelExecutor, MemoryPlan, Program, Result, SlotId, UpdateTarget,
    Workspace,
};
use tessera_tensor::{Device, Tensor};

/// Runs `program` under `plan` in `workspace`; output `k` is written into `targets[k]` in
/// place where given and safe (see [`crate::in_place`]) and is then `None` in the result, else
/// returned as a tensor (whose value the caller copies into its target, if any).
#[allow(clippy::too_many_arguments)] // the run's parts, as `run_planned`'s
pub fn run_planned_updating(
    program: &Program,
    plan: &MemoryPlan,
    workspace: &mut Workspace,
    env: &dyn Environment,
    executor: &dyn KernelExecutor,
    inputs: &[Tensor],
    targets: &[Option<Tensor>],
) -> Result<Vec<Option<Tensor>>> {
    if targets.len() != program.outputs.len() {
        return Err(KernelError::OutputCount {
            expected: program.outputs.len(),
            got: targets.len(),
        });
    }
    let run = Run {
        program,
        plan,
        env,
        executor,
    };
    let result = run.load(workspace, inputs).and_then(|()| {
        let in_place = in_place_outputs(program, plan, workspace, targets);
        let lock = |i: usize| {
            in_place.get(i).map(|(k, slots)| {
                targets[*k]
                    .as_ref()
                    .map(|target| (slots.as_slice(), *k, target))
            })
        };
        with_locked(&run, workspace, &lock, 0)?;
        let end = program.steps.len();
        program
            .outputs
            .iter()
            .enumerate()
            .map(|(k, v)| {
                if in_place.iter().any(|(j, _)| *j == k) {
                    Ok(None)
                } else {
                    materialize(&workspace.slots, v, end).map(Some)
                }
            })
            .collect()
    });
    workspace.reset();
    result
}

/// The outputs written in place ([`crate::in_place_outputs`]), each with the slots its kernel
/// writes through the target's pointer: the output's own slot first, then every slot holding
/// the tensor it updates (the inputs, attributes and derived values loaded in `ws`).
fn in_place_outputs(
    program: &Program,
    plan: &MemoryPlan,
    ws: &Workspace,
    targets: &[Option<Tensor>],
) -> Vec<(usize, Vec<SlotId>)> {
    let fitting: Vec<Option<UpdateTarget>> = targets
        .iter()
        .enumerate()
        .map(|(k, target)| {
            let t = target.as_ref()?;
            let meta = plan.outputs.get(k)?;
            let fits = t
                .with_layout(|l, d| l.is_contiguous() && l.shape == meta.shape && d == meta.dtype)
                && t.device() == Device::Cpu;
            fits.then(|| UpdateTarget {
                aliases: (0..program.slots.len())
                    .filter(|&s| ws.slots[s].as_ref().is_some_and(|o| o.shares_storage(t)))
                    .map(SlotId::from_index)
                    .collect(),
            })
        })
        .collect();
    let shares = |k: usize, j: usize| match (&targets[k], &targets[j]) {
        (Some(a), Some(b)) => a.shares_storage(b),
        _ => false,
    };
    crate::in_place_outputs(program, plan, &fitting, &shares)
        .into_iter()
        .map(|c| (c.output, c.slots))
        .collect()
}
