//! Linear weights read by their GEMM as a packed `[in, out]` copy: a `linear` multiplies by
//! `w^T`, which read in place from the `[out, in]` weight makes the `gemm` crate repack the
//! whole weight on every call (a strided gather, 4 KiB apart for 1024 inputs), for every
//! block of rows. A constant weight's transpose is a derived slot instead ([`crate::derived`]):
//! computed once on the first call, again only when the weight changes, and read row by
//! row, which the GEMM copies or reads directly.

use super::{Lowering, Val};
use crate::derived::Derivation;
use crate::{Result, SlotId, SlotSource};
use tessera_fx::NodeId;
use tessera_tensor::Op;

impl Lowering<'_> {
    /// The derived `[in, out]` copy of the weight `w` (node `weight`) of a linear, or `None`
    /// when the GEMM reads the weight as stored: on a device
    /// ([`crate::LowerOptions::weights_as_stored`]), for a weight the program computes, views
    /// or updates (a training step's weight would be copied again on every step), for a
    /// weight any node but a linear's weight operand reads, and for a weight of one row or
    /// column (already its own transpose).
    pub(super) fn transposed_weight(&mut self, weight: &NodeId, w: &Val) -> Result<Option<SlotId>> {
        let slot = self.program.slot(w.slot);
        let constant = matches!(slot.source, SlotSource::Attribute(_)) && w.views.is_empty();
        // A weight of one row or column is its own transpose in memory.
        let vector = w.layout.shape.iter().any(|&d| d <= 1);
        if self.options.weights_as_stored || !constant || w.layout.shape.len() != 2 || vector {
            return Ok(None);
        }
        let users = self
            .graph
            .users(weight)
            .map_err(|e| super::graph_error(self.graph, weight, e))?;
        for user in &users {
            let is_linear = matches!(self.op_of(user)?, Some(Op::Linear { .. }));
            let operands = self.operands(user)?;
            let only_as_weight = operands
                .iter()
                .enumerate()
                .all(|(i, o)| (o == weight) == (i == 1));
            if !is_linear || !only_as_weight {
                return Ok(None);
            }
        }
        let derivation = Derivation::Transposed;
        let existing = self.program.slots.iter().position(|s| {
            matches!(&s.source, SlotSource::Derived { from, derivation: d }
                if *from == w.slot && *d == derivation)
        });
        if let Some(index) = existing {
            return Ok(Some(SlotId::from_index(index)));
        }
        let shape = vec![w.layout.shape[1], w.layout.shape[0]];
        let name = format!("{}_transposed", slot.name);
        Ok(Some(self.derived_slot(w.slot, derivation, name, shape)))
    }
}
