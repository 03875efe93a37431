//! [`RecurrentWeights`]: the parameters of a recurrent layer or cell under PyTorch's names,
//! which depend on the layer count and directions (`weight_ih_l0`, `bias_hh_l1_reverse`), so
//! they are registered by name at construction rather than as struct fields.

use super::options::parameter;
use super::recurrent_step::StepWeights;
use crate::{ModuleField, Parameter, Result, Visitor, init};
use tessera_tensor::{DType, Device};

/// The weights of one layer and direction (a "slot"): PyTorch's name suffix (`_l1_reverse`,
/// or empty for a cell) and the width of that slot's input.
pub(crate) struct Slot {
    pub suffix: String,
    pub input_size: usize,
}

/// A recurrent module's parameters in PyTorch's registration order: for each layer and
/// direction `weight_ih`, `weight_hh`, then (with `bias`) `bias_ih`, `bias_hh`. Gate blocks
/// are stacked along dim 0, so `weight_ih` is `[gates * hidden_size, input width]`.
pub struct RecurrentWeights {
    params: Vec<(String, Parameter)>,
    /// Parameters per slot: 4 with biases, 2 without.
    per_slot: usize,
}

impl RecurrentWeights {
    /// Zero parameters for `slots`, `gates` blocks of `hidden_size` rows each.
    pub(crate) fn new(
        slots: &[Slot],
        gates: usize,
        hidden_size: usize,
        bias: bool,
        dtype: DType,
        device: Device,
    ) -> Result<Self> {
        let rows = gates * hidden_size;
        let mut params = Vec::new();
        for slot in slots {
            let suffix = &slot.suffix;
            params.push((
                format!("weight_ih{suffix}"),
                parameter(&[rows, slot.input_size], dtype, device)?,
            ));
            params.push((
                format!("weight_hh{suffix}"),
                parameter(&[rows, hidden_size], dtype, device)?,
            ));
            if bias {
                params.push((
                    format!("bias_ih{suffix}"),
                    parameter(&[rows], dtype, device)?,
                ));
                params.push((
                    format!("bias_hh{suffix}"),
                    parameter(&[rows], dtype, device)?,
                ));
            }
        }
        Ok(RecurrentWeights {
            params,
            per_slot: if bias { 4 } else { 2 },
        })
    }

    /// The parameter called `name` (`weight_hh_l0_reverse`), if there is one.
    pub fn get(&self, name: &str) -> Option<&Parameter> {
        self.params.iter().find(|(n, _)| n == name).map(|(_, p)| p)
    }

    /// Every parameter with its name, in registration order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Parameter)> {
        self.params.iter().map(|(n, p)| (n.as_str(), p))
    }

    /// The weights of slot `index` (layer * directions + direction).
    pub(crate) fn slot(&self, index: usize) -> StepWeights<'_> {
        let first = index * self.per_slot;
        let at = |k: usize| self.params[first + k].1.tensor();
        let bias = |k: usize| (self.per_slot == 4).then(|| at(k));
        StepWeights {
            weight_ih: at(0),
            weight_hh: at(1),
            bias_ih: bias(2),
            bias_hh: bias(3),
        }
    }

    /// PyTorch's `reset_parameters` of every recurrent module: each weight and bias, in
    /// registration order, from U(-1/sqrt(hidden_size), 1/sqrt(hidden_size)).
    pub(crate) fn reset(&self, hidden_size: usize) -> Result<()> {
        let bound = if hidden_size > 0 {
            1.0 / (hidden_size as f64).sqrt()
        } else {
            0.0
        };
        for (_, p) in &self.params {
            init::uniform_(p, -bound, bound, None)?;
        }
        Ok(())
    }
}

/// The parameters register under their own names; the field's name is not part of them.
impl ModuleField for RecurrentWeights {
    fn visit_field<'a>(&'a self, _name: &str, visitor: &mut dyn Visitor<'a>) {
        for (name, p) in &self.params {
            visitor.parameter(name, Some(p));
        }
    }
}
