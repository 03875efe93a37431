//! Launch groups: runs of consecutive kernel steps a backend launches as one (one JIT call and
//! one parallel region on the CPU, one CUDA kernel on a device), as PyTorch's fused
//! optimizers and Inductor's combo kernels launch once for all of a step's parameter updates.
//!
//! A step may join a group when its kernel is elementwise (no reduction, no GEMM or
//! convolution call, no scratch or status buffer) and reads no other member's output; the
//! memory plan takes a group as one step ([`crate::MemoryPlan::new`]: what a member writes
//! lives from the group's start, what it reads to its end), so no member's buffer shares bytes
//! with another's and they may run at once, in any order. [`group_launches`] makes two kinds.
//! The update group: it moves every elementwise kernel (or elementwise epilogue of a GEMM or
//! convolution call) writing only program outputs that no later step up to the last of them
//! reads down to that last one (only steps that do not read their outputs are passed, and
//! slots are written once, so every value is computed as before), and makes the elementwise
//! ones one group: a training step's update kernels, which Adam interleaves with the kernels
//! of its per-parameter step scalars. The others (an update fused into the GEMM computing its
//! gradient, which cannot join a group) run just before the group, after the step scalars too,
//! which a device may not write in place (the in-place rule, [`crate::in_place_outputs`],
//! writes in place only after the last step that does not). Then each run of consecutive 0-d
//! kernels left (those step scalars, side by side once the updates moved) is a group too. The
//! criteria depend on no size, so programs lowered for two batches group alike. Nothing a kernel computes
//! changes: each member stays its own [`Step::Kernel`] (planning, in-place updating,
//! printing and fallbacks see it as before).

use crate::{BufferRole, KernelError, Program, Result, SlotId, Step};
use std::ops::Range;

/// Reorders `program`'s steps so that the kernels writing only program outputs come together
/// after the last one's earlier steps (when there are at least two), and records the
/// elementwise ones as a launch group when there are at least two; then makes each run of two or more consecutive 0-d kernels outside it a group
/// (Adam's per-parameter step scalars, which the update group leaves side by side).
pub fn group_launches(program: &mut Program) {
    updates_together(program);
    let mut runs = scalar_runs(program);
    program.launch_groups.append(&mut runs);
    program.launch_groups.sort_by_key(|g| g.start);
}

/// The update group (module doc).
fn updates_together(program: &mut Program) {
    let candidates: Vec<usize> = (0..program.steps.len())
        .filter(|&i| may_move(program, i) && writes_outputs_only(program, i))
        .collect();
    let Some(&last) = candidates.last() else {
        return;
    };
    let moved: Vec<usize> = candidates
        .iter()
        .copied()
        .filter(|&c| c == last || !read_in(program, writes(program, c), c + 1..last + 1))
        .collect();
    let (members, apart): (Vec<usize>, Vec<usize>) =
        moved.iter().partition(|&&c| may_join(program, c));
    if moved.len() < 2 {
        return;
    }
    let mut steps: Vec<Option<Step>> = std::mem::take(&mut program.steps)
        .into_iter()
        .map(Some)
        .collect();
    let mut order: Vec<Step> = Vec::with_capacity(steps.len());
    let mut start = 0;
    for i in 0..steps.len() {
        if i == last {
            order.extend(apart.iter().filter_map(|&m| steps[m].take()));
            start = order.len();
            order.extend(members.iter().filter_map(|&m| steps[m].take()));
        } else if !moved.contains(&i)
            && let Some(step) = steps[i].take()
        {
            order.push(step);
        }
    }
    program.steps = order;
    if members.len() >= 2 {
        let group = start..start + members.len();
        program.launch_groups = vec![group];
    }
}

/// Runs of two or more consecutive 0-d kernels in no group, none reading another's output.
fn scalar_runs(program: &Program) -> Vec<Range<usize>> {
    let scalar = |i: usize| {
        may_join(program, i)
            && program.launch_group_of(i).is_none()
            && matches!(&program.steps[i], Step::Kernel { kernel, .. } if kernel.domain.is_empty())
    };
    let mut runs = Vec::new();
    let mut start = 0;
    while start < program.steps.len() {
        let mut end = start;
        while end < program.steps.len()
            && scalar(end)
            && !(start..end).any(|m| read_in(program, writes(program, m), end..end + 1))
        {
            end += 1;
        }
        if end - start >= 2 {
            runs.push(start..end);
        }
        start = end.max(start + 1);
    }
    runs
}

/// Whether step `i` may run in a launch group: an elementwise kernel with no scratch buffer
/// (so no gather status either).
fn may_join(program: &Program, i: usize) -> bool {
    let Some(Step::Kernel { kernel, .. }) = program.steps.get(i) else {
        return false;
    };
    kernel.reduce.is_empty()
        && kernel.gemm.is_none()
        && kernel.conv.is_none()
        && kernel.buffers.iter().all(|b| b.role != BufferRole::Scratch)
}

/// Whether step `i` may move down to the update group: a kernel that may join a group, or
/// one that is the elementwise epilogue of a GEMM or convolution call (no reduction, no
/// scratch but the call's result, so no gather status: it cannot fail).
fn may_move(program: &Program, i: usize) -> bool {
    let Some(Step::Kernel { kernel, .. }) = program.steps.get(i) else {
        return false;
    };
    let call = [
        kernel.gemm.as_ref().map(|g| g.out),
        kernel.conv.as_ref().map(|c| c.out),
    ];
    kernel.reduce.is_empty()
        && kernel.buffers.iter().enumerate().all(|(b, p)| {
            p.role != BufferRole::Scratch || call.iter().flatten().any(|o| o.index() == b)
        })
}

/// Whether step `i` writes program outputs only (no value only kernels read).
fn writes_outputs_only(program: &Program, i: usize) -> bool {
    writes(program, i)
        .iter()
        .all(|s| program.outputs.iter().any(|v| v.slot == *s))
}

/// The slots step `i` writes.
fn writes(program: &Program, i: usize) -> &[SlotId] {
    match &program.steps[i] {
        Step::Kernel { outputs, .. } | Step::External { outputs, .. } => outputs,
    }
}

/// Whether a step of `range` reads one of `slots`.
fn read_in(program: &Program, slots: &[SlotId], range: Range<usize>) -> bool {
    program.steps[range].iter().any(|step| match step {
        Step::Kernel { inputs, .. } => inputs.iter().any(|s| slots.contains(s)),
        Step::External { inputs, .. } => inputs.iter().any(|v| slots.contains(&v.slot)),
    })
}

/// Checks `program`'s launch groups before a run trusts them: in step order, apart, of two
/// steps at least, each step one that may join a group, none reading another's output.
pub fn check_launch_groups(program: &Program) -> Result<()> {
    let fail = |group: &Range<usize>, why: String| KernelError::Backend {
        kernel: "(launch groups)".into(),
        message: format!("steps {group:?}: {why}"),
    };
    let mut end = 0;
    for group in &program.launch_groups {
        if group.start < end || group.end > program.steps.len() || group.len() < 2 {
            return Err(fail(
                group,
                format!(
                    "not a group of two steps or more after step {end} of {}",
                    program.steps.len()
                ),
            ));
        }
        end = group.end;
        for i in group.clone() {
            if !may_join(program, i) {
                return Err(fail(
                    group,
                    format!("step {i} is not an elementwise kernel"),
                ));
            }
            if read_in(program, writes(program, i), i + 1..group.end) {
                return Err(fail(
                    group,
                    format!("a later step of the group reads what step {i} writes"),
                ));
            }
        }
    }
    Ok(())
}

impl Program {
    /// The launch group starting at step `index`, if one does.
    pub fn launch_group_at(&self, index: usize) -> Option<Range<usize>> {
        self.launch_groups
            .iter()
            .find(|g| g.start == index)
            .cloned()
    }

    /// The launch group holding step `index`, if any.
    pub fn launch_group_of(&self, index: usize) -> Option<Range<usize>> {
        self.launch_groups
            .iter()
            .find(|g| g.contains(&index))
            .cloned()
    }

    /// How many launches the steps `steps` take: one per launch group holding any of them,
    /// one per other kernel step among them (external steps launch nothing).
    pub fn launches(&self, steps: impl IntoIterator<Item = usize>) -> usize {
        let mut groups: Vec<usize> = Vec::new();
        let mut count = 0;
        for i in steps {
            match self.launch_groups.iter().position(|g| g.contains(&i)) {
                Some(g) if !groups.contains(&g) => {
                    groups.push(g);
                    count += 1;
                }
                Some(_) => {}
                None => {
                    count += usize::from(matches!(self.steps.get(i), Some(Step::Kernel { .. })))
                }
            }
        }
        count
    }
}
