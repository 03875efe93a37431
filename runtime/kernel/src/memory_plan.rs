//! The memory plan of a program: where each slot lives while the program runs. Intermediate
//! kernel buffers (kernel outputs that no caller sees, and the scratch of GEMM and convolution
//! calls) share one arena, each at a fixed offset chosen from the steps' liveness so that
//! buffers whose lives do not overlap reuse the same bytes; slots that become user-visible
//! tensors (program outputs, arguments of external calls, which may keep them) never live
//! there, so no view of the arena escapes a run.

use crate::{BufferRole, Program, ScalarType, SlotId, SlotSource, Step};
use std::fmt;
use tessera_tensor::{Op, TensorMeta};

/// Arena offsets are multiples of this many bytes (a cache line; AVX-512 loads align to it).
pub const ARENA_ALIGN: usize = 64;

/// A buffer in the arena: its bytes `offset..offset + len * size` and the steps it lives
/// through (both ends included: written at the first, last read at the second).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArenaBuffer {
    pub offset: usize,
    pub ty: ScalarType,
    /// Elements.
    pub len: usize,
    pub first_step: usize,
    pub last_step: usize,
}

impl ArenaBuffer {
    /// Its size in bytes.
    pub fn bytes(&self) -> usize {
        self.len * element_bytes(self.ty)
    }

    fn overlaps_in_time(&self, other: &ArenaBuffer) -> bool {
        self.first_step <= other.last_step && other.first_step <= self.last_step
    }

    fn overlaps_in_space(&self, offset: usize, bytes: usize) -> bool {
        offset < self.offset + self.bytes() && self.offset < offset + bytes
    }
}

/// Bytes of one element of a buffer of type `ty`.
pub fn element_bytes(ty: ScalarType) -> usize {
    ty.bytes()
}

/// Where a slot's value lives during a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlotHome {
    /// A tensor handle: an input, an attribute, or an external call's result.
    Tensor,
    /// A kernel output that leaves the program's control (a program output, or an argument
    /// of an external call): a new tensor per run, or the caller's buffer for a program
    /// output run with [`crate::run_planned_into`].
    Fresh,
    /// A kernel output only kernels read, at a fixed place in the arena.
    Arena(ArenaBuffer),
}

/// The memory plan of one program, computed once when it is compiled. Only
/// [`MemoryPlan::new`] makes one (runs trust its placement), and a run checks that the plan
/// covers the program it is given ([`MemoryPlan::check`]).
#[derive(Debug, Clone, PartialEq)]
pub struct MemoryPlan {
    /// The arena's size in bytes.
    pub(crate) arena_bytes: usize,
    /// Where each slot lives, by [`SlotId`].
    pub(crate) slots: Vec<SlotHome>,
    /// Per step, the arena buffers of its kernel's scratch parameters, in parameter order.
    pub(crate) scratch: Vec<Vec<ArenaBuffer>>,
    /// Per step, the tensor slots it reads for the last time (dropped after it).
    pub(crate) releases: Vec<Vec<SlotId>>,
    /// The shape and dtype of each program output (its slot's, through its views).
    pub(crate) outputs: Vec<TensorMeta>,
    /// Per program output, whether its kernel may write it straight into a caller's buffer:
    /// a kernel output with no views, not read by an external call, and returned once.
    pub(crate) direct: Vec<bool>,
}

impl MemoryPlan {
    /// Plans `program`: liveness from its steps, then first-fit placement of the arena
    /// buffers, largest first, each at the lowest aligned offset free for its whole life. The
    /// steps of a launch group run at once, so liveness takes the group as one step: what a
    /// member writes lives from the group's first step, what it reads to the group's last
    /// ([`group_span`]), and no member's buffer shares bytes with another member's.
    pub fn new(program: &Program) -> MemoryPlan {
        let n = program.slots.len();
        let mut last_read: Vec<Option<usize>> = vec![None; n];
        let mut leaves = vec![false; n];
        let mut writer: Vec<Option<(usize, ScalarType, usize)>> = vec![None; n];
        for (index, step) in program.steps.iter().enumerate() {
            match step {
                Step::Kernel {
                    kernel,
                    inputs,
                    outputs,
                    ..
                } => {
                    let (first, last) = group_span(program, index);
                    inputs
                        .iter()
                        .for_each(|s| last_read[s.index()] = Some(last));
                    let params = kernel
                        .buffers
                        .iter()
                        .filter(|b| b.role == BufferRole::Output);
                    for (s, p) in outputs.iter().zip(params) {
                        writer[s.index()] = Some((first, p.ty, p.len));
                    }
                }
                Step::External { inputs, .. } => {
                    for v in inputs {
                        last_read[v.slot.index()] = Some(index);
                        leaves[v.slot.index()] = true;
                    }
                }
            }
        }
        for v in &program.outputs {
            leaves[v.slot.index()] = true;
        }
        let mut wanted: Vec<(Option<SlotId>, usize, ArenaBuffer)> = Vec::new();
        let mut slots = vec![SlotHome::Tensor; n];
        for (i, slot) in program.slots.iter().enumerate() {
            let (SlotSource::Step, Some((first_step, ty, len))) = (&slot.source, writer[i]) else {
                continue;
            };
            if leaves[i] {
                slots[i] = SlotHome::Fresh;
                continue;
            }
            let last_step = last_read[i].unwrap_or(first_step).max(first_step);
            let buffer = ArenaBuffer {
                offset: 0,
                ty,
                len,
                first_step,
                last_step,
            };
            wanted.push((Some(SlotId::from_index(i)), first_step, buffer));
        }
        for (index, step) in program.steps.iter().enumerate() {
            let Step::Kernel { kernel, .. } = step else {
                continue;
            };
            for b in kernel
                .buffers
                .iter()
                .filter(|b| b.role == BufferRole::Scratch)
            {
                let buffer = ArenaBuffer {
                    offset: 0,
                    ty: b.ty,
                    len: b.len,
                    first_step: index,
                    last_step: index,
                };
                wanted.push((None, index, buffer));
            }
        }
        let placed = place(wanted.iter().map(|(_, _, b)| *b).collect());
        let arena_bytes = placed
            .iter()
            .map(|b| aligned(b.offset + b.bytes()))
            .max()
            .unwrap_or(0);
        let mut scratch = vec![Vec::new(); program.steps.len()];
        for ((slot, step, _), buffer) in wanted.iter().zip(placed) {
            match slot {
                Some(s) => slots[s.index()] = SlotHome::Arena(buffer),
                None => scratch[*step].push(buffer),
            }
        }
        let mut releases = vec![Vec::new(); program.steps.len()];
        for (i, last) in last_read.iter().enumerate() {
            let held = !matches!(slots[i], SlotHome::Arena(_)) && !is_output(program, i);
            if let (Some(step), true) = (last, held) {
                releases[*step].push(SlotId::from_index(i));
            }
        }
        let mut direct = Vec::with_capacity(program.outputs.len());
        for (k, v) in program.outputs.iter().enumerate() {
            let once = !program.outputs[..k].iter().any(|o| o.slot == v.slot);
            let read_by_external = program.steps.iter().any(|s| match s {
                Step::External { inputs, .. } => inputs.iter().any(|i| i.slot == v.slot),
                Step::Kernel { .. } => false,
            });
            direct.push(
                once && v.views.is_empty()
                    && !read_by_external
                    && slots[v.slot.index()] == SlotHome::Fresh,
            );
        }
        MemoryPlan {
            arena_bytes,
            slots,
            scratch,
            releases,
            outputs: program
                .outputs
                .iter()
                .map(|v| output_meta(program, v))
                .collect(),
            direct,
        }
    }

    /// The arena's size in bytes.
    pub fn arena_bytes(&self) -> usize {
        self.arena_bytes
    }

    /// Where slot `slot` lives (a tensor for a slot the plan does not know).
    pub fn home(&self, slot: SlotId) -> SlotHome {
        self.slots
            .get(slot.index())
            .copied()
            .unwrap_or(SlotHome::Tensor)
    }

    /// The arena buffers of step `step`'s kernel scratch parameters, in parameter order
    /// (empty for an external step or a step the plan does not know).
    pub fn scratch(&self, step: usize) -> &[ArenaBuffer] {
        self.scratch.get(step).map_or(&[], Vec::as_slice)
    }

    /// Per program output, whether a run into caller buffers has its kernel write it there.
    pub fn direct(&self) -> &[bool] {
        &self.direct
    }

    /// The shape and dtype of each program output.
    pub fn outputs(&self) -> &[TensorMeta] {
        &self.outputs
    }

    /// Checks that this plan covers `program`: as many slots, steps and outputs; every arena
    /// buffer inside the arena, of the type of the kernel parameters it stands for, as long
    /// as its writer's and at least as long as each reader's, written in its first step and
    /// read only within its life. Then the placement, which
    /// keeps buffers of overlapping lives apart, makes every buffer a kernel touches its own.
    /// Allocates nothing (a run calls it every time).
    pub fn check(&self, program: &Program) -> crate::Result<()> {
        let fail = |message: &str| crate::KernelError::Backend {
            kernel: "(memory plan)".into(),
            message: message.into(),
        };
        if self.slots.len() != program.slots.len()
            || self.scratch.len() != program.steps.len()
            || self.releases.len() != program.steps.len()
            || self.outputs.len() != program.outputs.len()
            || self.direct.len() != program.outputs.len()
        {
            return Err(fail("the plan was made for another program"));
        }
        // A launch group's kernels may run at once: checked as groups, and below each buffer
        // against the group's span.
        crate::check_launch_groups(program)?;
        if self
            .arena_buffers()
            .any(|(_, b)| b.offset + b.bytes() > self.arena_bytes)
        {
            return Err(fail("a buffer lies outside the arena"));
        }
        for (index, step) in program.steps.iter().enumerate() {
            let Step::Kernel {
                kernel,
                inputs,
                outputs,
                ..
            } = step
            else {
                continue;
            };
            let (mut ins, mut outs) = (inputs.iter(), outputs.iter());
            let mut scratch = self.scratch[index].iter();
            for p in &kernel.buffers {
                let (b, written) = match p.role {
                    BufferRole::Input => (ins.next().map(|s| self.home(*s)), false),
                    BufferRole::Output => (outs.next().map(|s| self.home(*s)), true),
                    BufferRole::Scratch => (scratch.next().map(|b| SlotHome::Arena(*b)), true),
                };
                let Some(SlotHome::Arena(b)) = b else {
                    continue;
                };
                // A reader's parameter may be shorter than the buffer (it reaches less of it).
                let (first, last) = group_span(program, index);
                let fits = if written {
                    b.first_step == first && b.len == p.len
                } else {
                    b.first_step < first && last <= b.last_step && b.len >= p.len
                };
                if !fits || b.ty != p.ty {
                    return Err(fail("an arena buffer does not fit the kernel that uses it"));
                }
            }
            if scratch.next().is_some() {
                return Err(fail("more scratch buffers than the kernel has"));
            }
        }
        Ok(())
    }

    /// The arena buffers of the plan (slots', then scratch), for printing and checks.
    pub fn arena_buffers(&self) -> impl Iterator<Item = (Option<SlotId>, &ArenaBuffer)> {
        let slots = self.slots.iter().enumerate().filter_map(|(i, h)| match h {
            SlotHome::Arena(b) => Some((Some(SlotId::from_index(i)), b)),
            _ => None,
        });
        slots.chain(self.scratch.iter().flatten().map(|b| (None, b)))
    }

    /// The sum of the arena buffers' sizes: what the arena would need without reuse.
    pub fn unshared_bytes(&self) -> usize {
        self.arena_buffers().map(|(_, b)| aligned(b.bytes())).sum()
    }
}

/// The steps step `index` runs with: its launch group's first and last, or itself twice (a
/// group past the program's steps counts as none here; [`crate::check_launch_groups`] refuses
/// it before a run).
fn group_span(program: &Program, index: usize) -> (usize, usize) {
    program
        .launch_group_of(index)
        .filter(|g| g.end <= program.steps.len())
        .map_or((index, index), |g| (g.start, g.end - 1))
}

fn is_output(program: &Program, slot: usize) -> bool {
    program.outputs.iter().any(|v| v.slot.index() == slot)
}

/// The shape and dtype a program output has: its slot's, through its views (a view whose
/// meta cannot be computed leaves the slot's, and the run reports the view's error).
fn output_meta(program: &Program, v: &crate::SlotView) -> TensorMeta {
    let mut meta = program.slot(v.slot).meta.clone();
    for view in &v.views {
        match Op::View(view.clone()).meta(std::slice::from_ref(&meta)) {
            Ok(mut m) if m.len() == 1 => meta = m.remove(0),
            _ => break,
        }
    }
    meta
}

fn aligned(bytes: usize) -> usize {
    bytes.div_ceil(ARENA_ALIGN) * ARENA_ALIGN
}

/// Gives each buffer the lowest aligned offset that no buffer live at the same time covers,
/// placing the largest first (ties: the earliest written first); returned in input order.
fn place(mut buffers: Vec<ArenaBuffer>) -> Vec<ArenaBuffer> {
    let mut order: Vec<usize> = (0..buffers.len()).collect();
    order.sort_by_key(|&i| {
        (
            std::cmp::Reverse(buffers[i].bytes()),
            buffers[i].first_step,
            i,
        )
    });
    let mut placed: Vec<usize> = Vec::new();
    for i in order {
        let bytes = buffers[i].bytes();
        let mut busy: Vec<(usize, usize)> = placed
            .iter()
            .map(|&j| &buffers[j])
            .filter(|b| b.overlaps_in_time(&buffers[i]))
            .map(|b| (b.offset, b.offset + b.bytes()))
            .collect();
        busy.sort_unstable();
        let mut offset = 0;
        for (start, end) in busy {
            if offset + bytes <= start {
                break;
            }
            offset = offset.max(aligned(end));
        }
        debug_assert!(placed.iter().all(|&j| {
            !buffers[j].overlaps_in_time(&buffers[i])
                || !buffers[j].overlaps_in_space(offset, bytes)
        }));
        buffers[i].offset = offset;
        placed.push(i);
    }
    buffers
}

/// The arena's size and each buffer's place, one line each.
impl fmt::Display for MemoryPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "arena: {} bytes ({} without reuse), {} buffers",
            self.arena_bytes,
            self.unshared_bytes(),
            self.arena_buffers().count()
        )?;
        for (slot, b) in self.arena_buffers() {
            let what = match slot {
                Some(s) => s.to_string(),
                None => format!("scratch of step {}", b.first_step),
            };
            writeln!(
                f,
                "  {what}: {}[{}] at {}..{}, steps {}..={}",
                b.ty,
                b.len,
                b.offset,
                b.offset + b.bytes(),
                b.first_step,
                b.last_step
            )?;
        }
        Ok(())
    }
}
