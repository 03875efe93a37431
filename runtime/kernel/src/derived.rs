//! Derived constants: slots a program computes from another slot (a weight) rather than
//! reads, such as a convolution's Winograd-transformed weights or a linear's transposed
//! weight. Each workspace keeps the last value it derived with a detached handle on the
//! source's storage and that storage's version, so the derivation runs once, on the first
//! call, and again only when the source changed (written in place, given new storage by
//! `set_data` or `load_state_dict`, or a different tensor passed): the derived value always
//! follows the weights it came from.

use crate::{KernelError, Program, Result, SlotId, SlotSource};
use std::fmt;
use tessera_tensor::op::{WinogradTile, winograd_weights};
use tessera_tensor::{Layout, Tensor};

/// What a derived slot computes from its source.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Derivation {
    /// The Winograd transform `G g G^T` of a `[C_out, C_in, 3, 3]` weight, as `[points,
    /// blocks, C_in, 64]` ([`tessera_tensor::op::winograd_weights`]).
    WinogradWeights(WinogradTile),
    /// The transpose of a 2-D tensor, packed: a linear's `[out, in]` weight as the `[in, out]`
    /// matrix its GEMM reads row by row.
    Transposed,
}

impl Derivation {
    /// The derived value of `source`.
    pub fn apply(&self, source: &Tensor) -> tessera_tensor::Result<Tensor> {
        match self {
            Derivation::WinogradWeights(tile) => winograd_weights(*tile, source),
            Derivation::Transposed => source.detach().transpose(0, 1)?.contiguous(),
        }
    }
}

impl fmt::Display for Derivation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Derivation::WinogradWeights(tile) => write!(f, "winograd {tile} weights"),
            Derivation::Transposed => write!(f, "transpose"),
        }
    }
}

/// A value a workspace derived, and what it was derived from.
pub(crate) struct DerivedValue {
    /// A detached handle on the source's storage (a clone would follow `set_data`).
    source: Tensor,
    version: u64,
    layout: Layout,
    value: Tensor,
}

impl DerivedValue {
    /// Whether `source` is still the tensor this value was derived from, unwritten since.
    fn derived_from(&self, source: &Tensor) -> bool {
        source.shares_storage(&self.source)
            && source.version() == self.version
            && source.with_layout(|l, _| *l == self.layout)
    }
}

/// Fills every derived slot of `program` in `slots` (whose sources are filled), from `kept`
/// where the source is unchanged, else deriving again and keeping the result.
pub(crate) fn fill_derived(
    program: &Program,
    slots: &mut [Option<Tensor>],
    kept: &mut [Option<DerivedValue>],
) -> Result<()> {
    for (i, slot) in program.slots.iter().enumerate() {
        let SlotSource::Derived { from, derivation } = &slot.source else {
            continue;
        };
        let id = SlotId::from_index(i);
        let fail = |message: String| KernelError::Backend {
            kernel: format!("derived slot {id} (%{})", slot.name),
            message,
        };
        let source = slots
            .get(from.index())
            .and_then(|s| s.clone())
            .ok_or_else(|| fail(format!("its source {from} is not an input or attribute")))?;
        let entry = kept
            .get_mut(i)
            .ok_or_else(|| fail("no room in the workspace".into()))?;
        let value = match entry {
            Some(e) if e.derived_from(&source) => e.value.clone(),
            _ => {
                let value = derivation.apply(&source).map_err(|e| KernelError::Derive {
                    slot: format!("{id} (%{})", slot.name),
                    what: format!("the {derivation} of {from}"),
                    source: Box::new(e),
                })?;
                *entry = Some(DerivedValue {
                    version: source.version(),
                    layout: source.layout(),
                    source: source.detach(),
                    value: value.clone(),
                });
                value
            }
        };
        let fits = value.with_layout(|l, d| {
            l.shape == slot.meta.shape && d == slot.meta.dtype && l.is_contiguous()
        });
        if !fits {
            return Err(fail(format!(
                "{derivation} of {from} gave {:?} {:?}, the slot holds {:?} {:?}",
                value.dtype(),
                value.shape(),
                slot.meta.dtype,
                slot.meta.shape
            )));
        }
        slots[i] = Some(value);
    }
    Ok(())
}
