//! `StepLR`: multiplies each group's lr by `gamma` every `step_size` epochs, as
//! `torch.optim.lr_scheduler.StepLR` (chainable form, closed form `base * gamma^(e / step_size)`).

use super::Optimizer;
use super::lr_scheduler::{LrScheduler, SchedulerBase, as_dict};
use super::state::Dict;
use crate::{Key, NnError, Result, Value};

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
        let mut d = Dict::new();
        d.insert("step_size".into(), Value::Int(self.step_size as i64));
        d.insert("gamma".into(), Value::Float(self.gamma));
        self.base.write(&mut d);
        Value::Dict(d)
    }

    fn load_state_dict(&mut self, state_dict: &Value) -> Result<()> {
        let d = as_dict("StepLR", state_dict)?;
        let mut step_size = self.step_size;
        let mut gamma = self.gamma;
        if let Some(v) = d.get(&Key::from("step_size")) {
            step_size = self.base.positive(v, "step_size")?;
        }
        if let Some(v) = d.get(&Key::from("gamma")) {
            gamma = self.base.number(v, "gamma")?;
        }
        self.base.read(d)?;
        self.step_size = step_size;
        self.gamma = gamma;
        Ok(())
    }
}
