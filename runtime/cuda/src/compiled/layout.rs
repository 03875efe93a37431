//! Where every slot of a compiled program lives on the device: one arena, allocated once per
//! prepared program. Its first part is the memory plan's arena (kernel intermediates and
//! scratch at the plan's offsets, reusing bytes between buffers whose lives do not overlap);
//! after it, a fixed, packed place for each input, each program output and each value an
//! external step reads or writes. Fixed places keep every pointer a kernel is given the same
//! from call to call, which is what lets a captured CUDA graph be replayed. Attributes
//! (weights) are uploaded separately, once per prepared program.

use tessera_kernel::{MemoryPlan, Program, SlotHome, SlotId, SlotSource};

/// Fixed places start at multiples of this many bytes (the driver's allocation alignment).
const PLACE_ALIGN: usize = 256;

/// Where one slot lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SlotPlace {
    /// `bytes` bytes at `offset` in the arena (packed elements of the slot's dtype).
    Arena { offset: usize, bytes: usize },
    /// Attribute `n` of the uploaded weights.
    Attribute(usize),
}

/// The arena's size and each slot's place.
#[derive(Debug, Clone)]
pub(crate) struct ArenaLayout {
    pub(crate) bytes: usize,
    pub(crate) places: Vec<SlotPlace>,
    /// The attributes' names, in upload order.
    pub(crate) attributes: Vec<String>,
}

fn aligned(bytes: usize) -> usize {
    bytes.div_ceil(PLACE_ALIGN) * PLACE_ALIGN
}

impl ArenaLayout {
    pub(crate) fn new(program: &Program, plan: &MemoryPlan) -> ArenaLayout {
        let mut bytes = aligned(plan.arena_bytes());
        let mut attributes = Vec::new();
        let places = program
            .slots
            .iter()
            .enumerate()
            .map(
                |(i, slot)| match (&slot.source, plan.home(SlotId::from_index(i))) {
                    (SlotSource::Attribute(name), _) => {
                        attributes.push(name.clone());
                        SlotPlace::Attribute(attributes.len() - 1)
                    }
                    (_, SlotHome::Arena(b)) => SlotPlace::Arena {
                        offset: b.offset,
                        bytes: b.bytes(),
                    },
                    _ => {
                        let size = slot.meta.numel() * slot.meta.dtype.size_in_bytes();
                        let place = SlotPlace::Arena {
                            offset: bytes,
                            bytes: size,
                        };
                        bytes += aligned(size.max(1));
                        place
                    }
                },
            )
            .collect();
        ArenaLayout {
            bytes: bytes.max(1),
            places,
            attributes,
        }
    }
}
