//! Running a planned program whose outputs update tensors it also reads (a training step's new
//! parameters and optimizer state): a kernel writes such an output straight over the tensor
//! it updates, in place, when that is safe, and the other outputs come back as tensors for
//! the caller to copy.
//!
//! In place is safe for output `k` updating tensor `t` when the kernel step writing `k` is
//! the last step reading any slot that holds `t`, every earlier reader is a kernel (an eager
//! call would lock `t`'s storage, held for writing during the run), and that kernel reads `t`
//! elementwise at the very index it stores `k` (so each element is read before it is
//! overwritten, by the same point of the nest, whatever the split across threads), and no
//! other kernel of its launch group reads `t` (the group's kernels run at once). So that a
//! failed run leaves every updated tensor as it was, the steps from the first in-place write
//! on must all be kernels writing only in place: nothing after it allocates or calls out (an
//! update followed by a step that does is returned instead).

use crate::run::{Run, materialize};
use crate::run_into::with_locked;
use crate::{
    BufferRole, Environment, Expr, KernelError, KernelExecutor, MemoryPlan, Program, Result,
    SlotId, Step, Workspace,
};
use tessera_tensor::{Device, Tensor};

/// Runs `program` under `plan` in `workspace`; output `k` is written into `targets[k]` in
/// place where given and safe (see the module's doc) and is then `None` in the result, else
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

/// The outputs written in place, each with the slots its kernel writes through the target's
/// pointer: the output's own slot first, then every slot holding the tensor it updates.
fn in_place_outputs(
    program: &Program,
    plan: &MemoryPlan,
    ws: &Workspace,
    targets: &[Option<Tensor>],
) -> Vec<(usize, Vec<SlotId>)> {
    let mut chosen: Vec<(usize, Vec<SlotId>, usize)> = Vec::new();
    for (k, target) in targets.iter().enumerate() {
        let Some(t) = target else { continue };
        let shares = |other: &Option<Tensor>| other.as_ref().is_some_and(|o| o.shares_storage(t));
        let fits = t.with_layout(|l, d| {
            l.is_contiguous() && l.shape == plan.outputs[k].shape && d == plan.outputs[k].dtype
        }) && t.device() == Device::Cpu;
        if !plan.direct[k] || !fits || chosen.iter().any(|(j, _, _)| shares(&targets[*j])) {
            continue;
        }
        let out = program.outputs[k].slot;
        let aliases: Vec<SlotId> = (0..program.slots.len())
            .filter(|&s| s != out.index() && shares(&ws.slots[s]))
            .map(SlotId::from_index)
            .collect();
        if let Some(step) = updating_step(program, out, &aliases) {
            chosen.push((k, std::iter::once(out).chain(aliases).collect(), step));
        }
    }
    // Nothing after the first in-place write may fail: from it on, only kernels writing in
    // place. A step that is not one (an eager call, a kernel allocating an output) drops
    // every update before it, which may make more kernels allocate: until none changes.
    loop {
        let written: Vec<SlotId> = chosen.iter().map(|(_, slots, _)| slots[0]).collect();
        let loud = program.steps.iter().rposition(|step| match step {
            Step::Kernel { outputs, .. } => !outputs.iter().all(|s| written.contains(s)),
            Step::External { .. } => true,
        });
        let before = chosen.len();
        chosen.retain(|(_, _, step)| loud.is_none_or(|l| *step > l));
        if chosen.len() == before {
            break;
        }
    }
    chosen.into_iter().map(|(k, slots, _)| (k, slots)).collect()
}

/// The step writing slot `out` when it may write over the tensor held by the slots
/// `aliases`: a kernel step reading them last, elementwise at `out`'s store index, and no
/// step but kernels reading them before.
fn updating_step(program: &Program, out: SlotId, aliases: &[SlotId]) -> Option<usize> {
    let (writer, kernel, inputs, outputs) =
        program
            .steps
            .iter()
            .enumerate()
            .find_map(|(i, step)| match step {
                Step::Kernel {
                    kernel,
                    inputs,
                    outputs,
                    ..
                } if outputs.contains(&out) => Some((i, kernel, inputs, outputs)),
                _ => None,
            })?;
    // A returned alias would show the new value where the old one is due.
    if program.outputs.iter().any(|v| aliases.contains(&v.slot)) {
        return None;
    }
    let group = program.launch_group_of(writer);
    for (i, step) in program.steps.iter().enumerate() {
        let reads = match step {
            Step::Kernel { inputs, .. } => inputs.iter().any(|s| aliases.contains(s)),
            Step::External { inputs, .. } => {
                if inputs.iter().any(|v| aliases.contains(&v.slot)) {
                    return None;
                }
                false
            }
        };
        // A kernel launched with the writer may read while the writer writes.
        if reads && (i > writer || (i != writer && group.as_ref().is_some_and(|g| g.contains(&i))))
        {
            return None;
        }
    }
    if kernel.gemm.is_some() || kernel.conv.is_some() || !kernel.reduce.is_empty() {
        return None;
    }
    let param = |role: BufferRole, slots: &[SlotId], pick: &dyn Fn(SlotId) -> bool| {
        kernel
            .buffers
            .iter()
            .enumerate()
            .filter(move |(_, b)| b.role == role)
            .zip(slots)
            .filter(|(_, s)| pick(**s))
            .map(|((at, _), _)| at)
            .collect::<Vec<_>>()
    };
    let out_buffer = *param(BufferRole::Output, outputs, &|s| s == out).first()?;
    let stored: Vec<_> = kernel
        .stores
        .iter()
        .filter(|st| st.buffer.index() == out_buffer)
        .collect();
    let [store] = stored.as_slice() else {
        return None;
    };
    let aliased = param(BufferRole::Input, inputs, &|s| aliases.contains(&s));
    let elementwise = kernel.values.iter().all(|v| match &v.expr {
        Expr::Load { buffer, index } => !aliased.contains(&buffer.index()) || *index == store.index,
        Expr::LoadIf { buffer, .. } => !aliased.contains(&buffer.index()),
        _ => true,
    });
    elementwise.then_some(writer)
}
