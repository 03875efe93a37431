//! The [`LrScheduler`] trait and the bookkeeping every scheduler shares, as PyTorch's
//! `LRScheduler` base class (`base_lrs`, `last_epoch`, `_step_count`, `_last_lr`).

use super::state::Dict;
use super::{Optimizer, ParamGroup};
use crate::{Key, NnError, Result, Value};

/// A learning-rate schedule over epochs. The scheduler does not hold the optimizer: each
/// `step` is given it, and writes the new lr into its param groups.
pub trait LrScheduler {
    /// Advances one epoch (`last_epoch += 1`) and sets every group's lr.
    fn step(&mut self, optimizer: &mut dyn Optimizer) -> Result<()>;

    /// The lrs the last `step` set, one per param group.
    fn get_last_lr(&self) -> &[f64];

    fn last_epoch(&self) -> i64;

    /// PyTorch's scheduler `state_dict`: its own fields, `base_lrs`, `last_epoch`,
    /// `_step_count`, `_get_lr_called_within_step` and `_last_lr`.
    fn state_dict(&self) -> Value;

    /// Restores a [`LrScheduler::state_dict`]; absent keys keep their values.
    fn load_state_dict(&mut self, state_dict: &Value) -> Result<()>;
}

/// What every scheduler tracks besides its own hyper-parameters.
#[derive(Debug, Clone)]
pub(crate) struct SchedulerBase {
    pub name: &'static str,
    pub base_lrs: Vec<f64>,
    pub last_epoch: i64,
    pub step_count: i64,
    pub last_lr: Vec<f64>,
}

impl SchedulerBase {
    /// Records `initial_lr` on groups that lack it (as PyTorch does with `last_epoch=-1`)
    /// and takes the base lrs from there; the caller then takes the initial step.
    pub fn attach(name: &'static str, optimizer: &mut dyn Optimizer) -> Self {
        let base_lrs = optimizer
            .param_groups_mut()
            .iter_mut()
            .map(|g| *g.initial_lr.get_or_insert(g.lr()))
            .collect();
        SchedulerBase {
            name,
            base_lrs,
            last_epoch: -1,
            step_count: 0,
            last_lr: Vec::new(),
        }
    }

    /// One epoch: `get_lr` sees the advanced counters and the current groups, its lrs are
    /// written into the groups.
    pub fn step(
        &mut self,
        optimizer: &mut dyn Optimizer,
        get_lr: impl FnOnce(&Self, &[ParamGroup]) -> Vec<f64>,
    ) -> Result<()> {
        let groups = optimizer.param_groups_mut();
        if groups.len() != self.base_lrs.len() {
            return Err(NnError::Invalid(format!(
                "{}: the optimizer has {} param groups, the scheduler was built for {}",
                self.name,
                groups.len(),
                self.base_lrs.len()
            )));
        }
        self.step_count += 1;
        self.last_epoch += 1;
        let lrs = get_lr(self, groups);
        for (group, lr) in groups.iter_mut().zip(lrs) {
            group.set_lr(lr);
        }
        self.last_lr = groups.iter().map(ParamGroup::lr).collect();
        Ok(())
    }

    /// The scheduler's state dict: its own settings, then the shared fields.
    pub fn state_dict<const N: usize>(&self, own: [(&str, Value); N]) -> Value {
        let mut d = Dict::new();
        for (key, value) in own {
            d.insert(key.into(), value);
        }
        self.write(&mut d);
        Value::Dict(d)
    }

    /// Loads the shared fields and a scheduler's two settings, a positive period
    /// (`step_size`, `T_max`) and a number (`gamma`, `eta_min`), each under its key;
    /// nothing changes when any value is invalid, and absent keys keep their values.
    pub fn load_period_and_number(
        &mut self,
        state_dict: &Value,
        (period_key, period): (&str, &mut usize),
        (number_key, number): (&str, &mut f64),
    ) -> Result<()> {
        let d = as_dict(self.name, state_dict)?;
        let new_period = d
            .get(&Key::from(period_key))
            .map(|v| self.positive(v, period_key))
            .transpose()?;
        let new_number = d
            .get(&Key::from(number_key))
            .map(|v| self.number(v, number_key))
            .transpose()?;
        self.read(d)?;
        *period = new_period.unwrap_or(*period);
        *number = new_number.unwrap_or(*number);
        Ok(())
    }

    fn write(&self, d: &mut Dict) {
        let floats = |v: &[f64]| Value::List(v.iter().map(|&x| Value::Float(x)).collect());
        d.insert("base_lrs".into(), floats(&self.base_lrs));
        d.insert("last_epoch".into(), Value::Int(self.last_epoch));
        d.insert("_step_count".into(), Value::Int(self.step_count));
        d.insert("_get_lr_called_within_step".into(), Value::Bool(false));
        d.insert("_last_lr".into(), floats(&self.last_lr));
    }

    /// Reads the shared fields, checking list lengths against this scheduler's groups.
    fn read(&mut self, d: &Dict) -> Result<()> {
        let mut next = self.clone();
        if let Some(v) = d.get(&Key::from("base_lrs")) {
            next.base_lrs = self.floats(v, "base_lrs")?;
        }
        if let Some(v) = d.get(&Key::from("_last_lr")) {
            next.last_lr = self.floats(v, "_last_lr")?;
        }
        if let Some(v) = d.get(&Key::from("last_epoch")) {
            next.last_epoch = self.int(v, "last_epoch")?;
        }
        if let Some(v) = d.get(&Key::from("_step_count")) {
            next.step_count = self.int(v, "_step_count")?;
        }
        *self = next;
        Ok(())
    }

    fn floats(&self, v: &Value, key: &str) -> Result<Vec<f64>> {
        let values = v
            .as_list()
            .and_then(|l| l.iter().map(Value::as_f64).collect::<Option<Vec<_>>>())
            .ok_or_else(|| {
                self.invalid(format!("\"{key}\" must be a list of numbers, got {v:?}"))
            })?;
        if values.len() != self.base_lrs.len() {
            return Err(self.invalid(format!(
                "\"{key}\" has {} entries but the scheduler has {} param groups",
                values.len(),
                self.base_lrs.len()
            )));
        }
        Ok(values)
    }

    pub fn int(&self, v: &Value, key: &str) -> Result<i64> {
        v.as_i64()
            .ok_or_else(|| self.invalid(format!("\"{key}\" must be an integer, got {v:?}")))
    }

    /// A positive integer setting (`step_size`, `T_max`).
    fn positive(&self, v: &Value, key: &str) -> Result<usize> {
        match self.int(v, key)? {
            n if n > 0 => Ok(n as usize),
            n => Err(self.invalid(format!("\"{key}\" must be positive, got {n}"))),
        }
    }

    fn number(&self, v: &Value, key: &str) -> Result<f64> {
        v.as_f64()
            .ok_or_else(|| self.invalid(format!("\"{key}\" must be a number, got {v:?}")))
    }

    /// An error from `load_state_dict`, naming the scheduler.
    pub fn invalid(&self, msg: String) -> NnError {
        NnError::Invalid(format!("{}.load_state_dict: {msg}", self.name))
    }
}

/// The dict a `load_state_dict` argument must be.
fn as_dict<'a>(name: &str, v: &'a Value) -> Result<&'a Dict> {
    v.as_dict().ok_or_else(|| {
        NnError::Invalid(format!(
            "{name}.load_state_dict: expected a dict, got {v:?}"
        ))
    })
}
