//! The `Parametrization` trait: a map from stored tensors (`original`) to the value a module
//! sees, with the right inverse that turns an assigned value back into stored tensors.

use crate::{NnError, Result, Visitor};
use tessera_tensor::Tensor;

/// What PyTorch's parametrization modules are: `forward` computes the tensor the module
/// uses from `original`; `right_inverse` gives an `original` for a value, so that
/// `forward(right_inverse(x)) == x` for values in the parametrization's image.
///
/// Most parametrizations store one tensor and implement [`Parametrization::forward`] and
/// perhaps [`Parametrization::right_inverse`]. One stored in several tensors (weight norm's
/// `g` and `v`) overrides [`Parametrization::forward_originals`] and
/// [`Parametrization::right_inverse_originals`] instead; it must be the first in its chain.
pub trait Parametrization: Send + Sync {
    /// The class name in reprs (`_Orthogonal`).
    fn name(&self) -> String;

    /// The parametrized value of one stored tensor.
    fn forward(&self, x: &Tensor) -> Result<Tensor>;

    /// A stored tensor whose `forward` is `value`; the identity unless overridden.
    fn right_inverse(&self, value: &Tensor) -> Result<Tensor> {
        Ok(value.clone())
    }

    /// The parametrized value of the stored tensors (`original0`, `original1`, ... when
    /// there are several); defaults to [`Parametrization::forward`] of the single one.
    fn forward_originals(&self, originals: &[Tensor]) -> Result<Tensor> {
        match originals {
            [x] => self.forward(x),
            _ => Err(NnError::Invalid(format!(
                "{} takes one stored tensor, got {}",
                self.name(),
                originals.len()
            ))),
        }
    }

    /// The stored tensors for `value`; defaults to [`Parametrization::right_inverse`].
    fn right_inverse_originals(&self, value: &Tensor) -> Result<Vec<Tensor>> {
        Ok(vec![self.right_inverse(value)?])
    }

    /// Text inside the parentheses of its repr line.
    fn extra_repr(&self) -> String {
        String::new()
    }

    /// Buffers the parametrization owns (orthogonal's `base`), registered under
    /// `parametrizations.<name>.<index>.`.
    fn visit_buffers<'a>(&'a self, _visitor: &mut dyn Visitor<'a>) {}
}
