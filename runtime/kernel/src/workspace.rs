//! What one run of a planned program works in: the arena its [`MemoryPlan`] lays out, and the
//! tables a run fills and empties again (slot tensors, buffer pointers), sized once so that a
//! warm run allocates nothing of its own. A compiled module keeps one per concurrent caller.

use crate::memory_plan::{ArenaBuffer, MemoryPlan};
use crate::run::OutVec;
use crate::{BufferPtr, Program, SlotId, Step};
use tessera_tensor::Tensor;

/// One aligned block of the arena.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct ArenaBlock([u8; crate::memory_plan::ARENA_ALIGN]);

/// The memory a run of one program uses; made for a plan by [`Workspace::new`].
pub struct Workspace {
    arena: Vec<ArenaBlock>,
    /// The tensor of each slot that has one (inputs, attributes, results leaving the arena).
    pub(crate) slots: Vec<Option<Tensor>>,
    /// Per slot, the caller's buffer a program output is written into.
    pub(crate) targets: Vec<Option<BufferPtr>>,
    /// The current kernel's buffers, in parameter order.
    pub(crate) buffers: Vec<BufferPtr>,
    /// The current kernel's tensor inputs, and the parameter each fills.
    pub(crate) reads: Vec<(Tensor, usize)>,
    /// The read-locked pointers of `reads`, while the kernel runs.
    pub(crate) read_ptrs: Vec<BufferPtr>,
    /// The current kernel's outputs that become tensors, with their slots and lengths.
    pub(crate) fresh: Vec<(OutVec, SlotId, usize)>,
    /// The current launch's kernel steps (one, or a launch group's), each with its range of
    /// `buffers`.
    pub(crate) parts: Vec<(usize, std::ops::Range<usize>)>,
    /// Per slot, the value last derived for a derived slot, kept between runs.
    pub(crate) derived: Vec<Option<crate::derived::DerivedValue>>,
}

// SAFETY: the raw pointers a workspace holds (`targets`, `buffers`, `read_ptrs`) are set and
// used within one run, on the running thread and the workers it waits for, and cleared before
// the run returns; between runs the workspace owns only its arena, vectors and tensors, all
// of which may move between threads.
unsafe impl Send for Workspace {}

impl Workspace {
    /// A workspace for `program` run under `plan`: the arena allocated at the plan's size and
    /// every table at the largest size a step needs.
    pub fn new(program: &Program, plan: &MemoryPlan) -> Workspace {
        let params_of = |s: &Step| match s {
            Step::Kernel { kernel, .. } => kernel.buffers.len(),
            Step::External { .. } => 0,
        };
        let one = program.steps.iter().map(params_of).max().unwrap_or(0);
        let grouped = program
            .launch_groups
            .iter()
            .map(|g| {
                program
                    .steps
                    .get(g.clone())
                    .map_or(0, |s| s.iter().map(params_of).sum())
            })
            .max()
            .unwrap_or(0);
        let params = one.max(grouped);
        let parts = program
            .launch_groups
            .iter()
            .map(|g| g.len())
            .max()
            .unwrap_or(1);
        let blocks = plan.arena_bytes.div_ceil(crate::memory_plan::ARENA_ALIGN);
        let n = program.slots.len();
        Workspace {
            arena: vec![ArenaBlock([0; crate::memory_plan::ARENA_ALIGN]); blocks],
            slots: vec![None; n],
            targets: vec![None; n],
            buffers: Vec::with_capacity(params),
            reads: Vec::with_capacity(params),
            read_ptrs: Vec::with_capacity(params),
            fresh: Vec::with_capacity(params),
            parts: Vec::with_capacity(parts),
            derived: (0..n).map(|_| None).collect(),
        }
    }

    /// The arena's size in bytes.
    pub fn arena_bytes(&self) -> usize {
        self.arena.len() * crate::memory_plan::ARENA_ALIGN
    }

    /// The arena's start (its blocks are contiguous and 64-byte aligned).
    pub fn arena_start(&self) -> *const u8 {
        self.arena.as_ptr() as *const u8
    }

    /// The pointer to the arena buffer `b`, which the plan placed inside the arena.
    pub(crate) fn arena_ptr(&mut self, b: &ArenaBuffer) -> BufferPtr {
        let base = self.arena.as_mut_ptr() as *mut u8;
        // The plan sized the arena to hold every buffer it placed; a workspace made for
        // another plan is refused by the runner before any pointer is taken.
        let offset = b.offset.min(self.arena_bytes());
        BufferPtr {
            // SAFETY: `offset` is at most the arena's length, so the pointer stays inside (or
            // one past) its allocation.
            ptr: unsafe { base.add(offset) },
            len: b.len,
            ty: b.ty,
        }
    }

    /// Empties the run's tables (keeping their capacity): no tensor of the last run stays
    /// referenced but the derived constants and the detached handles on what they were
    /// derived from, and no pointer into a caller's buffer survives it.
    pub(crate) fn reset(&mut self) {
        self.slots.iter_mut().for_each(|s| *s = None);
        self.targets.iter_mut().for_each(|t| *t = None);
        self.buffers.clear();
        self.reads.clear();
        self.read_ptrs.clear();
        self.fresh.clear();
        self.parts.clear();
    }
}
