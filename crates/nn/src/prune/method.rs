//! The pruning methods and how each computes a new mask on the still-unpruned part of a
//! tensor, as PyTorch's `PruningContainer._combine_masks` does for iterative pruning.

use super::Amount;
use crate::{NnError, Result};
use tessera_tensor::{DType, Tensor};

/// One of PyTorch's pruning methods (`RandomUnstructured`, `L1Unstructured`,
/// `LnStructured`, `RandomStructured`); `dim` may be negative.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Method {
    RandomUnstructured,
    L1Unstructured,
    LnStructured { n: f64, dim: isize },
    RandomStructured { dim: isize },
}

impl Method {
    /// The new mask: `mask` with `amount` more entries (unstructured: among those still 1)
    /// or channels along `dim` (structured: among those not entirely 0) set to 0, chosen from
    /// `importance` (values in row-major order, of shape `shape`).
    pub(crate) fn combine(
        self,
        importance: &[f64],
        mask: &[f64],
        shape: &[usize],
        amount: Amount,
    ) -> Result<Vec<f64>> {
        match self {
            Method::RandomUnstructured | Method::L1Unstructured => {
                let alive: Vec<usize> = (0..mask.len()).filter(|&i| mask[i] == 1.0).collect();
                let k = amount.count(alive.len())?;
                let mut new = mask.to_vec();
                for j in self.unstructured_victims(importance, &alive, k)? {
                    new[alive[j]] = 0.0;
                }
                Ok(new)
            }
            Method::LnStructured { dim, .. } | Method::RandomStructured { dim } => {
                let channels = Channels::new(shape, dim)?;
                let mut sums = vec![0.0; channels.len];
                for (i, m) in mask.iter().enumerate() {
                    sums[channels.of(i)] += m.abs();
                }
                let alive: Vec<usize> = (0..channels.len).filter(|&c| sums[c] != 0.0).collect();
                let k = amount.count(alive.len())?;
                let mut new = mask.to_vec();
                if k == 0 {
                    return Ok(new);
                }
                let mut pruned = vec![false; channels.len];
                for j in self.structured_victims(importance, &channels, &alive, k)? {
                    pruned[alive[j]] = true;
                }
                for (i, m) in new.iter_mut().enumerate() {
                    if pruned[channels.of(i)] {
                        *m = 0.0;
                    }
                }
                Ok(new)
            }
        }
    }

    /// Positions in `alive` of the `k` entries to prune. L1: the smallest `|w|`, ties to
    /// the lower index (a stable sort; PyTorch's `topk` leaves ties unspecified). Random:
    /// the `k` largest of fresh uniform draws, as PyTorch's `topk(rand_like(t), k)`.
    fn unstructured_victims(
        self,
        importance: &[f64],
        alive: &[usize],
        k: usize,
    ) -> Result<Vec<usize>> {
        if k == 0 {
            return Ok(Vec::new());
        }
        let mut order: Vec<usize> = (0..alive.len()).collect();
        if self == Method::L1Unstructured {
            let score: Vec<f64> = alive.iter().map(|&i| importance[i].abs()).collect();
            order.sort_by(|&a, &b| score[a].total_cmp(&score[b]));
        } else {
            let prob = uniform(alive.len())?;
            order.sort_by(|&a, &b| prob[b].total_cmp(&prob[a]));
        }
        order.truncate(k);
        Ok(order)
    }

    /// Positions in `alive` of the `k` channels to prune. Ln: all but the `len - k` largest
    /// L_n norms (over every other dim), so the smallest norms go, ties pruning the higher
    /// index (a stable descending sort keeps the lower). Random: the `k` smallest of fresh
    /// uniform draws, as PyTorch's `kthvalue` threshold.
    fn structured_victims(
        self,
        importance: &[f64],
        channels: &Channels,
        alive: &[usize],
        k: usize,
    ) -> Result<Vec<usize>> {
        let mut order: Vec<usize> = (0..alive.len()).collect();
        match self {
            Method::LnStructured { n, .. } => {
                let norms = channels.norms(importance, n);
                order.sort_by(|&a, &b| norms[alive[b]].total_cmp(&norms[alive[a]]));
                Ok(order.split_off(alive.len() - k))
            }
            _ => {
                let prob = uniform(alive.len())?;
                order.sort_by(|&a, &b| prob[a].total_cmp(&prob[b]));
                order.truncate(k);
                Ok(order)
            }
        }
    }
}

/// Draws `n` uniform values from the global seeded generator.
fn uniform(n: usize) -> Result<Vec<f64>> {
    Ok(Tensor::rand(&[n], DType::F32)?.to_vec_f64()?)
}

/// The channels of a tensor along one dim: which channel each row-major index is in.
pub(crate) struct Channels {
    len: usize,
    stride: usize,
}

impl Channels {
    /// Structured pruning needs at least two dims (PyTorch's `_validate_structured_pruning`)
    /// and a dim in range.
    pub(crate) fn new(shape: &[usize], dim: isize) -> Result<Channels> {
        if shape.len() < 2 {
            return Err(NnError::Invalid(format!(
                "Structured pruning can only be applied to multidimensional tensors. \
                 Found tensor of shape {shape:?} with {} dims",
                shape.len()
            )));
        }
        let ndim = shape.len() as isize;
        let d = if dim < 0 { dim + ndim } else { dim };
        if !(0..ndim).contains(&d) {
            return Err(NnError::Invalid(format!(
                "Dimension out of range (expected to be in range of [{}, {}], but got {dim})",
                -ndim,
                ndim - 1
            )));
        }
        let d = d as usize;
        Ok(Channels {
            len: shape[d],
            stride: shape[d + 1..].iter().product(),
        })
    }

    fn of(&self, index: usize) -> usize {
        (index / self.stride) % self.len
    }

    /// The L_n norm of each channel over all other dims (`n = inf` is the largest `|x|`,
    /// `-inf` the smallest, `0` the number of non-zeros), as `torch.norm(t, p=n, dim=...)`.
    fn norms(&self, values: &[f64], n: f64) -> Vec<f64> {
        let mut acc = vec![
            if n == f64::NEG_INFINITY {
                f64::INFINITY
            } else {
                0.0
            };
            self.len
        ];
        for (i, v) in values.iter().enumerate() {
            let (a, x) = (&mut acc[self.of(i)], v.abs());
            *a = match n {
                f64::INFINITY => a.max(x),
                f64::NEG_INFINITY => a.min(x),
                0.0 => *a + f64::from(x != 0.0),
                _ => *a + x.powf(n),
            };
        }
        if n.is_finite() && n != 0.0 {
            acc.iter_mut().for_each(|a| *a = a.powf(1.0 / n));
        }
        acc
    }
}
