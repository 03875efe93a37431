//! Where an optimizer's update goes: applied to tensors now (the eager step), or recorded by a
//! compiled training step, which turns the same calls into graph nodes. Each optimizer writes
//! its step once, against [`UpdateSink`], so eager and compiled training apply the same ops to
//! the same state in the same order, and the state they leave is the same `state_dict`.

use crate::Result;
use tessera_tensor::{Op, Tensor};

/// The operations an optimizer step is made of. Values are tensors: real ones for the eager
/// step, stand-ins (meta tensors) when a compiled step records the update.
pub trait UpdateSink {
    /// The gradient of `param`, or `None` when it has none (the step skips it).
    fn grad(&mut self, param: &Tensor) -> Option<Tensor>;

    /// A hyper-parameter of param group `group` read at run time (the learning rate), as the
    /// 0-d f64 tensor the update ops take, on `param`'s device.
    fn scalar(&mut self, group: usize, value: f64, param: &Tensor) -> Result<Tensor>;

    /// Applies an update op to `inputs`.
    fn apply(&mut self, op: &Op, inputs: &[&Tensor]) -> Result<Vec<Tensor>>;

    /// `value` moved to `param`'s device (Adam's step scalars are computed on the host).
    fn to_device_of(&mut self, value: &Tensor, param: &Tensor) -> Result<Tensor>;

    /// Writes `value` into `target`, a parameter or a state tensor, in place (its handle stays
    /// valid). A recorded update writes all of them at the end of the step.
    fn assign(&mut self, target: &Tensor, value: &Tensor) -> Result<()>;

    /// A new state tensor of `param` (a momentum buffer made by the first step) holding
    /// `value`.
    fn keep(&mut self, value: &Tensor, param: &Tensor) -> Result<Tensor>;
}

/// Applies the update to the tensors now (what `Optimizer::step` does).
#[derive(Debug, Default, Clone, Copy)]
pub struct EagerUpdate;

impl UpdateSink for EagerUpdate {
    fn grad(&mut self, param: &Tensor) -> Option<Tensor> {
        param.grad()
    }

    fn scalar(&mut self, _group: usize, value: f64, param: &Tensor) -> Result<Tensor> {
        super::state::run_time_scalar(value, param)
    }

    fn apply(&mut self, op: &Op, inputs: &[&Tensor]) -> Result<Vec<Tensor>> {
        Ok(op.apply(inputs)?)
    }

    fn to_device_of(&mut self, value: &Tensor, param: &Tensor) -> Result<Tensor> {
        Ok(value.to_device(param.device())?)
    }

    fn assign(&mut self, target: &Tensor, value: &Tensor) -> Result<()> {
        target.copy_(value)?;
        Ok(())
    }

    fn keep(&mut self, value: &Tensor, _param: &Tensor) -> Result<Tensor> {
        Ok(value.clone())
    }
}
