//! Stochastic gradient descent with momentum, dampening, Nesterov momentum and weight decay,
//! as `torch.optim.SGD` (single-tensor path, `foreach=False`): each parameter's step is the
//! `sgd_update` op of the op table, its results copied into the parameter and the momentum
//! buffer in place.

use super::state::{
    Dict, Groups, ParamState, check_non_negative, load_tensor, read_bool, read_f64, wrong_options,
};
use super::{EagerUpdate, GroupOptions, Optimizer, ParamGroup, UpdateSink};
use crate::{NnError, Result, Value};
use tessera_tensor::op::OptimOp;
use tessera_tensor::{Op, Tensor, no_grad};

/// SGD hyper-parameters; `Default` is PyTorch's (`lr` 1e-3, everything else off).
#[derive(Debug, Clone, PartialEq)]
pub struct SgdOptions {
    pub lr: f64,
    pub momentum: f64,
    pub dampening: f64,
    pub weight_decay: f64,
    pub nesterov: bool,
    pub maximize: bool,
}

impl Default for SgdOptions {
    fn default() -> Self {
        SgdOptions {
            lr: 1e-3,
            momentum: 0.0,
            dampening: 0.0,
            weight_decay: 0.0,
            nesterov: false,
            maximize: false,
        }
    }
}

impl SgdOptions {
    pub(crate) fn write(&self, d: &mut Dict) {
        d.insert("lr".into(), Value::Float(self.lr));
        d.insert("momentum".into(), Value::Float(self.momentum));
        d.insert("dampening".into(), Value::Float(self.dampening));
        d.insert("weight_decay".into(), Value::Float(self.weight_decay));
        d.insert("nesterov".into(), Value::Bool(self.nesterov));
        d.insert("maximize".into(), Value::Bool(self.maximize));
        d.insert("foreach".into(), Value::None);
        d.insert("differentiable".into(), Value::Bool(false));
        d.insert("fused".into(), Value::None);
    }

    pub(crate) fn read(&mut self, d: &Dict, ctx: &str) -> Result<()> {
        read_f64(d, "lr", &mut self.lr, ctx)?;
        read_f64(d, "momentum", &mut self.momentum, ctx)?;
        read_f64(d, "dampening", &mut self.dampening, ctx)?;
        read_f64(d, "weight_decay", &mut self.weight_decay, ctx)?;
        read_bool(d, "nesterov", &mut self.nesterov, ctx)?;
        read_bool(d, "maximize", &mut self.maximize, ctx)
    }

    pub(crate) fn validate(&self, ctx: &str) -> Result<()> {
        check_non_negative(ctx, "learning rate", self.lr)?;
        check_non_negative(ctx, "momentum value", self.momentum)?;
        check_non_negative(ctx, "weight_decay value", self.weight_decay)?;
        if self.nesterov && (self.momentum <= 0.0 || self.dampening != 0.0) {
            return Err(NnError::Invalid(format!(
                "{ctx}: Nesterov momentum requires a momentum and zero dampening"
            )));
        }
        Ok(())
    }
}

/// The momentum buffer of one parameter (only kept when `momentum != 0`).
#[derive(Debug, Clone)]
struct SgdState {
    momentum_buffer: Tensor,
}

impl ParamState for SgdState {
    fn entries(&self) -> Dict {
        let mut d = Dict::new();
        d.insert(
            "momentum_buffer".into(),
            Value::Tensor(self.momentum_buffer.clone()),
        );
        d
    }

    fn load(entries: &Dict, param: &Tensor, ctx: &str) -> Result<Option<Self>> {
        Ok(load_tensor(entries, "momentum_buffer", param, ctx)?
            .map(|momentum_buffer| SgdState { momentum_buffer }))
    }
}

super::optimizer_over_groups!(
    /// `torch.optim.SGD`.
    SGD,
    SgdState,
    SgdOptions,
    Sgd
);

impl Optimizer for SGD {
    fn step(&mut self) -> Result<()> {
        let _guard = no_grad();
        self.step_with(&mut EagerUpdate)
    }

    fn step_with(&mut self, sink: &mut dyn UpdateSink) -> Result<()> {
        let Groups { groups, state, .. } = &mut self.inner;
        for (gi, group) in groups.iter().enumerate() {
            let GroupOptions::Sgd(o) = &group.options else {
                return Err(wrong_options("SGD", gi, group));
            };
            let update = Op::Optim(OptimOp::SgdUpdate {
                momentum: o.momentum,
                dampening: o.dampening,
                weight_decay: o.weight_decay,
                nesterov: o.nesterov,
                maximize: o.maximize,
            });
            for p in &group.params {
                let Some(grad) = sink.grad(p) else { continue };
                let lr = sink.scalar(gi, o.lr, p)?;
                let buffer = match state.get(&p.id()) {
                    Some(s) if o.momentum != 0.0 => Some(s.momentum_buffer.clone()),
                    _ => None,
                };
                let mut inputs = vec![p, &grad];
                inputs.extend(&buffer);
                inputs.push(&lr);
                let new = sink.apply(&update, &inputs)?;
                sink.assign(p, &new[0])?;
                match (buffer, new.get(1)) {
                    (Some(buffer), Some(new_buffer)) => sink.assign(&buffer, new_buffer)?,
                    (None, Some(new_buffer)) => {
                        let momentum_buffer = sink.keep(new_buffer, p)?;
                        state.insert(p.id(), SgdState { momentum_buffer });
                    }
                    _ => {}
                }
            }
        }
        Ok(())
    }

    super::forward_to_groups!();
}
