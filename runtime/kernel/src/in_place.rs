//! Which outputs of a run may be written over the tensors they update (a training step's new
//! parameters and optimizer state), the safety rule every runner calls: the CPU's
//! [`crate::run_planned_updating`] and a device's, each telling it where each output's target
//! fits its memory and which slots hold the target's tensor.
//!
//! In place is safe for output `k` updating tensor `t` when the kernel step writing `k` is
//! the last step reading any slot that holds `t`, every earlier reader is a kernel (an eager
//! call would lock `t`'s storage, held for writing during the run), and that kernel reads `t`
//! elementwise at the very index it stores `k` (so each element is read before it is
//! overwritten, by the same point of the nest, whatever the split across threads), and no
//! other kernel of its launch group reads `t` (the group's kernels run at once). A kernel
//! starting with a GEMM or convolution call qualifies when the call does not read `t` (the
//! call reads its operands whole); a reduction kernel never does. So that a
//! failed run leaves every updated tensor as it was, the steps from the first in-place write
//! on must all be kernels writing only in place or into the arena: nothing after it allocates
//! or calls out (an update followed by a step that does is returned instead). So Adam's step
//! counts, written by kernels whose other outputs (the bias corrections) only the updates
//! read, are written in place too.

use crate::{BufferRole, Expr, MemoryPlan, Program, SlotHome, SlotId, Step};

/// Output `k`'s target as a runner sees it, given only where the target fits the output (its
/// shape, dtype and packed layout, in memory of the runner's device).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpdateTarget {
    /// The slots other than the output's own that hold the target's tensor (the input it
    /// updates, and any other slot sharing its storage).
    pub aliases: Vec<SlotId>,
}

/// An output written in place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InPlaceOutput {
    /// The program output.
    pub output: usize,
    /// The slots the run points at the target's memory: the output's own slot first, then
    /// every alias, which kernels read through the same memory.
    pub slots: Vec<SlotId>,
    /// The step of the kernel writing it.
    pub step: usize,
}

/// The outputs of `program` (planned by `plan`) that may be written over their targets:
/// `targets[k]` where output `k` has a fitting one, `shares(k, j)` whether the targets of
/// outputs `k` and `j` share storage (two outputs never write one tensor in place).
pub fn in_place_outputs(
    program: &Program,
    plan: &MemoryPlan,
    targets: &[Option<UpdateTarget>],
    shares: &dyn Fn(usize, usize) -> bool,
) -> Vec<InPlaceOutput> {
    let mut chosen: Vec<InPlaceOutput> = Vec::new();
    for (k, target) in targets.iter().enumerate() {
        let Some(target) = target else { continue };
        if !plan.direct.get(k).copied().unwrap_or(false)
            || chosen.iter().any(|c| shares(k, c.output))
        {
            continue;
        }
        let Some(out) = program.outputs.get(k).map(|v| v.slot) else {
            continue;
        };
        let aliases: Vec<SlotId> = target
            .aliases
            .iter()
            .copied()
            .filter(|s| *s != out)
            .collect();
        if let Some(step) = updating_step(program, out, &aliases) {
            chosen.push(InPlaceOutput {
                output: k,
                slots: std::iter::once(out).chain(aliases).collect(),
                step,
            });
        }
    }
    // Nothing after the first in-place write may fail: from it on, only kernels writing in
    // place or into the arena. A step that is not one (an eager call, a kernel allocating an
    // output) drops every update before it, which may make more kernels allocate: until none
    // changes.
    loop {
        let written: Vec<SlotId> = chosen.iter().map(|c| c.slots[0]).collect();
        let quiet = |s: &SlotId| written.contains(s) || matches!(plan.home(*s), SlotHome::Arena(_));
        let loud = program.steps.iter().rposition(|step| match step {
            Step::Kernel { outputs, .. } => !outputs.iter().all(quiet),
            Step::External { .. } => true,
        });
        let before = chosen.len();
        chosen.retain(|c| loud.is_none_or(|l| c.step > l));
        if chosen.len() == before {
            break;
        }
    }
    chosen
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
    if !kernel.reduce.is_empty() {
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
    // An external call reads its operands whole, also where other points already wrote: its
    // epilogue (an optimizer update fused into the GEMM computing the gradient) may write in
    // place only a tensor the call does not read.
    let called = [
        kernel.gemm.as_ref().map(|g| g.a),
        kernel.gemm.as_ref().map(|g| g.b),
        kernel.conv.as_ref().map(|c| c.input),
        kernel.conv.as_ref().map(|c| c.weight),
        kernel.conv.as_ref().and_then(|c| c.bias),
    ];
    if called
        .iter()
        .flatten()
        .any(|b| aliased.contains(&b.index()))
    {
        return None;
    }
    let elementwise = kernel.values.iter().all(|v| match &v.expr {
        Expr::Load { buffer, index } => !aliased.contains(&buffer.index()) || *index == store.index,
        Expr::LoadIf { buffer, .. } => !aliased.contains(&buffer.index()),
        _ => true,
    });
    elementwise.then_some(writer)
}
