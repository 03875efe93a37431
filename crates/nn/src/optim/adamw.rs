//! AdamW: Adam with decoupled weight decay (`p *= 1 - lr * weight_decay` before the Adam
//! update), as `torch.optim.AdamW`, which PyTorch 2.x also builds on Adam.

use super::adam::{AdamOptions, AdamState, adam_step};
use super::state::Groups;
use super::{GroupOptions, Optimizer, ParamGroup};
use crate::{Result, Value};
use tessera_tensor::Tensor;

/// AdamW hyper-parameters; `Default` is PyTorch's (as Adam's but `weight_decay` 1e-2).
#[derive(Debug, Clone, PartialEq)]
pub struct AdamWOptions {
    pub lr: f64,
    pub betas: (f64, f64),
    pub eps: f64,
    pub weight_decay: f64,
    pub amsgrad: bool,
    pub maximize: bool,
}

impl Default for AdamWOptions {
    fn default() -> Self {
        AdamWOptions {
            lr: 1e-3,
            betas: (0.9, 0.999),
            eps: 1e-8,
            weight_decay: 1e-2,
            amsgrad: false,
            maximize: false,
        }
    }
}

impl From<AdamWOptions> for AdamOptions {
    fn from(o: AdamWOptions) -> Self {
        AdamOptions {
            lr: o.lr,
            betas: o.betas,
            eps: o.eps,
            weight_decay: o.weight_decay,
            amsgrad: o.amsgrad,
            maximize: o.maximize,
            decoupled_weight_decay: true,
        }
    }
}

super::optimizer_over_groups!(
    /// `torch.optim.AdamW`; its groups hold [`AdamOptions`] with `decoupled_weight_decay` set.
    AdamW,
    AdamState,
    AdamWOptions,
    Adam
);

impl Optimizer for AdamW {
    fn step(&mut self) -> Result<()> {
        let _guard = tessera_tensor::no_grad();
        adam_step(&mut self.inner, &mut super::EagerUpdate)
    }

    fn step_with(&mut self, sink: &mut dyn super::UpdateSink) -> Result<()> {
        adam_step(&mut self.inner, sink)
    }

    super::forward_to_groups!();
}
