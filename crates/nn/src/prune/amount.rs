//! How much to prune: a fraction of the candidates or a count, with PyTorch's validation and
//! rounding (`round(amount * n)`, ties to even, as Python's `round`).

use crate::{NnError, Result};

/// PyTorch's `amount` argument: a float in `[0, 1]` is a fraction of the candidates, an
/// integer is how many to prune.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Amount {
    /// A fraction in `[0, 1]`; `round(fraction * n)` candidates are pruned, ties to even
    /// (`0.5 * 5 = 2.5` prunes 2).
    Fraction(f64),
    /// An absolute number of candidates, at most their number.
    Count(usize),
}

impl From<f64> for Amount {
    fn from(fraction: f64) -> Amount {
        Amount::Fraction(fraction)
    }
}

impl From<usize> for Amount {
    fn from(count: usize) -> Amount {
        Amount::Count(count)
    }
}

impl Amount {
    /// PyTorch's `_validate_pruning_amount_init`: a fraction must lie in `[0, 1]`.
    pub(crate) fn validate(self) -> Result<Amount> {
        match self {
            Amount::Fraction(f) if !(0.0..=1.0).contains(&f) => Err(NnError::Invalid(format!(
                "amount={f} should either be a float in the range [0, 1] or a non-negative integer"
            ))),
            _ => Ok(self),
        }
    }

    /// How many of `n` candidates to prune (PyTorch's `_compute_nparams_toprune` after
    /// `_validate_pruning_amount`).
    pub(crate) fn count(self, n: usize) -> Result<usize> {
        match self.validate()? {
            Amount::Count(k) if k > n => Err(NnError::Invalid(format!(
                "amount={k} should be smaller than the number of parameters to prune={n}"
            ))),
            Amount::Count(k) => Ok(k),
            Amount::Fraction(f) => Ok((f * n as f64).round_ties_even() as usize),
        }
    }
}
