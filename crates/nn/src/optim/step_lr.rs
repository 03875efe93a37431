//! `StepLR`: multiplies each group's lr by `gamma` every `step_size` epochs, as
//! `torch.optim.lr_scheduler.StepLR` (chainable form, closed form `base * gamma^(e / step_size)`).

use super::Optimizer;
use super::lr_scheduler::{LrScheduler, SchedulerBase};
use crate::{NnError, Result, Value};

/// `torch.optim.lr_scheduler.StepLR`.
#[derive(Debug, Clone)]
pub struct StepLR {
    pub step_size: usize,
    pub gamma: f64,
    base: SchedulerBase,
}

impl StepLR {
    /// Attaches to `optimizer` and takes the initial step (epoch 0, lrs unchanged).
    pub fn new(optimizer: &mut dyn Optimizer, step_size: usize, gamma: f64) -> Result<Self> {
        if step_size == 0 {
            return Err(NnError::Invalid(
                "StepLR: step_size must be positive".into(),
            ));
        }
        let mut s = StepLR {
            step_size,
            gamma,
            base: SchedulerBase::attach("StepLR", optimizer),
        };
        s.step(optimizer)?;
        Ok(s)
    }
}

impl LrScheduler for StepLR {
    fn step(&mut self, optimizer: &mut dyn Optimizer) -> Result<()> {
        let (step_size, gamma) = (self.step_size as i64, self.gamma);
        self.base.step(optimizer, |base, groups| {
            let decay = base.last_epoch != 0 && base.last_epoch.rem_euclid(step_size) == 0;
            groups
                .iter()
                .map(|g| if decay { g.lr() * gamma } else { g.lr() })
                .collect()
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
            ("step_size", Value::Int(self.step_size as i64)),
            ("gamma", Value::Float(self.gamma)),
        ])
    }

    fn load_state_dict(&mut self, state_dict: &Value) -> Result<()> {
        self.base.load_period_and_number(
            state_dict,
            ("step_size", &mut self.step_size),
            ("gamma", &mut self.gamma),
        )
    }
}
