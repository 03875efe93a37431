//! `CosineAnnealingLR`: anneals each group's lr from its base to `eta_min` along a cosine
//! over `t_max` epochs and back, with PyTorch 2.x's chainable recurrence.

use super::Optimizer;
use super::lr_scheduler::{LrScheduler, SchedulerBase};
use crate::{NnError, Result, Value};
use std::f64::consts::PI;

/// `torch.optim.lr_scheduler.CosineAnnealingLR`; its closed form is
/// `eta_min + (base - eta_min) * (1 + cos(pi * e / t_max)) / 2`.
#[derive(Debug, Clone)]
pub struct CosineAnnealingLR {
    pub t_max: usize,
    pub eta_min: f64,
    base: SchedulerBase,
}

impl CosineAnnealingLR {
    /// Attaches to `optimizer` and takes the initial step (epoch 0, lrs unchanged).
    pub fn new(optimizer: &mut dyn Optimizer, t_max: usize, eta_min: f64) -> Result<Self> {
        if t_max == 0 {
            return Err(NnError::Invalid(
                "CosineAnnealingLR: t_max must be positive".into(),
            ));
        }
        let mut s = CosineAnnealingLR {
            t_max,
            eta_min,
            base: SchedulerBase::attach("CosineAnnealingLR", optimizer),
        };
        s.step(optimizer)?;
        Ok(s)
    }
}

impl LrScheduler for CosineAnnealingLR {
    /// PyTorch's `get_lr`: the closed form on the first step of a resumed schedule, an
    /// additive step where the cosine turns back up, the ratio recurrence elsewhere.
    fn step(&mut self, optimizer: &mut dyn Optimizer) -> Result<()> {
        let (t_max, eta_min) = (self.t_max as f64, self.eta_min);
        let period = 2 * self.t_max as i64;
        self.base.step(optimizer, |base, groups| {
            let e = base.last_epoch;
            let lrs = groups.iter().zip(&base.base_lrs);
            if e == 0 {
                groups.iter().map(|g| g.lr()).collect()
            } else if base.step_count == 1 && e > 0 {
                lrs.map(|(_, &b)| {
                    eta_min + (b - eta_min) * (1.0 + (e as f64 * PI / t_max).cos()) / 2.0
                })
                .collect()
            } else if (e - 1 - t_max as i64).rem_euclid(period) == 0 {
                lrs.map(|(g, &b)| g.lr() + (b - eta_min) * (1.0 - (PI / t_max).cos()) / 2.0)
                    .collect()
            } else {
                groups
                    .iter()
                    .map(|g| {
                        (1.0 + (PI * e as f64 / t_max).cos())
                            / (1.0 + (PI * (e - 1) as f64 / t_max).cos())
                            * (g.lr() - eta_min)
                            + eta_min
                    })
                    .collect()
            }
        })
    }

    fn get_last_lr(&self) -> &[f64] {
        &self.base.last_lr
    }

    fn last_epoch(&self) -> i64 {
        self.base.last_epoch
    }

    fn state_dict(&self) -> Value {
        self.base.state_dict([
            ("T_max", Value::Int(self.t_max as i64)),
            ("eta_min", Value::Float(self.eta_min)),
        ])
    }

    fn load_state_dict(&mut self, state_dict: &Value) -> Result<()> {
        self.base.load_period_and_number(
            state_dict,
            ("T_max", &mut self.t_max),
            ("eta_min", &mut self.eta_min),
        )
    }
}
