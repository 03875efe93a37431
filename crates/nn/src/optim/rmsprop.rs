//! RMSprop with weight decay, momentum and the centered variant, as `torch.optim.RMSprop`
//! (single-tensor path, `foreach=False`).

use super::state::{
    Dict, Groups, ParamState, buffer_or_zeros, check_non_negative, increment_step, load_step,
    load_tensor, read_bool, read_f64, require_tensor, wrong_options, zero_step, zeros_like,
};
use super::{GroupOptions, Optimizer, ParamGroup};
use crate::{Result, Value};
use tessera_tensor::{Tensor, no_grad};

/// RMSprop hyper-parameters; `Default` is PyTorch's (`lr` 1e-2, `alpha` 0.99, eps 1e-8).
#[derive(Debug, Clone, PartialEq)]
pub struct RmsPropOptions {
    pub lr: f64,
    pub alpha: f64,
    pub eps: f64,
    pub weight_decay: f64,
    pub momentum: f64,
    /// Normalise by the variance estimate `E[g^2] - E[g]^2` instead of `E[g^2]`.
    pub centered: bool,
    pub maximize: bool,
}

impl Default for RmsPropOptions {
    fn default() -> Self {
        RmsPropOptions {
            lr: 1e-2,
            alpha: 0.99,
            eps: 1e-8,
            weight_decay: 0.0,
            momentum: 0.0,
            centered: false,
            maximize: false,
        }
    }
}

impl RmsPropOptions {
    pub(crate) fn write(&self, d: &mut Dict) {
        d.insert("lr".into(), Value::Float(self.lr));
        d.insert("momentum".into(), Value::Float(self.momentum));
        d.insert("alpha".into(), Value::Float(self.alpha));
        d.insert("eps".into(), Value::Float(self.eps));
        d.insert("centered".into(), Value::Bool(self.centered));
        d.insert("weight_decay".into(), Value::Float(self.weight_decay));
        d.insert("capturable".into(), Value::Bool(false));
        d.insert("foreach".into(), Value::None);
        d.insert("maximize".into(), Value::Bool(self.maximize));
        d.insert("differentiable".into(), Value::Bool(false));
    }

    pub(crate) fn read(&mut self, d: &Dict, ctx: &str) -> Result<()> {
        read_f64(d, "lr", &mut self.lr, ctx)?;
        read_f64(d, "momentum", &mut self.momentum, ctx)?;
        read_f64(d, "alpha", &mut self.alpha, ctx)?;
        read_f64(d, "eps", &mut self.eps, ctx)?;
        read_bool(d, "centered", &mut self.centered, ctx)?;
        read_f64(d, "weight_decay", &mut self.weight_decay, ctx)?;
        read_bool(d, "maximize", &mut self.maximize, ctx)
    }

    pub(crate) fn validate(&self, ctx: &str) -> Result<()> {
        check_non_negative(ctx, "learning rate", self.lr)?;
        check_non_negative(ctx, "epsilon value", self.eps)?;
        check_non_negative(ctx, "momentum value", self.momentum)?;
        check_non_negative(ctx, "weight_decay value", self.weight_decay)?;
        check_non_negative(ctx, "alpha value", self.alpha)
    }
}

/// The step count and running averages of one parameter.
#[derive(Debug, Clone)]
struct RmsPropState {
    step: Tensor,
    square_avg: Tensor,
    momentum_buffer: Option<Tensor>,
    grad_avg: Option<Tensor>,
}

impl ParamState for RmsPropState {
    fn entries(&self) -> Dict {
        let mut d = Dict::new();
        d.insert("step".into(), Value::Tensor(self.step.clone()));
        d.insert("square_avg".into(), Value::Tensor(self.square_avg.clone()));
        if let Some(b) = &self.momentum_buffer {
            d.insert("momentum_buffer".into(), Value::Tensor(b.clone()));
        }
        if let Some(g) = &self.grad_avg {
            d.insert("grad_avg".into(), Value::Tensor(g.clone()));
        }
        d
    }

    fn load(entries: &Dict, param: &Tensor, ctx: &str) -> Result<Option<Self>> {
        if entries.is_empty() {
            return Ok(None);
        }
        Ok(Some(RmsPropState {
            step: load_step(entries, ctx)?,
            square_avg: require_tensor(entries, "square_avg", param, ctx)?,
            momentum_buffer: load_tensor(entries, "momentum_buffer", param, ctx)?,
            grad_avg: load_tensor(entries, "grad_avg", param, ctx)?,
        }))
    }
}

super::optimizer_over_groups!(
    /// `torch.optim.RMSprop`.
    RMSprop,
    RmsPropState,
    RmsPropOptions,
    RmsProp
);

impl Optimizer for RMSprop {
    fn step(&mut self) -> Result<()> {
        let _guard = no_grad();
        let Groups {
            name,
            groups,
            state,
        } = &mut self.inner;
        for (gi, group) in groups.iter().enumerate() {
            let GroupOptions::RmsProp(o) = &group.options else {
                return Err(wrong_options(name, gi, group));
            };
            for p in &group.params {
                let Some(grad) = p.grad() else { continue };
                let mut g = if o.maximize { grad.neg()? } else { grad };
                let s = match state.entry(p.id()) {
                    indexmap::map::Entry::Occupied(e) => e.into_mut(),
                    indexmap::map::Entry::Vacant(e) => e.insert(RmsPropState {
                        step: zero_step(),
                        square_avg: zeros_like(p)?,
                        momentum_buffer: None,
                        grad_avg: None,
                    }),
                };
                increment_step(&s.step)?;
                if o.weight_decay != 0.0 {
                    g = g.add(&p.mul_scalar(o.weight_decay)?)?;
                }
                // square_avg.mul_(alpha).addcmul_(g, g, value=1 - alpha).
                s.square_avg.mul_scalar_(o.alpha)?;
                s.square_avg.add_(&g.mul_scalar(1.0 - o.alpha)?.mul(&g)?)?;
                let avg = if o.centered {
                    let grad_avg = buffer_or_zeros(&mut s.grad_avg, p)?;
                    // grad_avg.lerp_(g, 1 - alpha), in lerp's form for weights below 0.5.
                    grad_avg.add_(&g.sub(&grad_avg)?.mul_scalar(1.0 - o.alpha)?)?;
                    s.square_avg
                        .add(&grad_avg.mul_scalar(-1.0)?.mul(&grad_avg)?)?
                        .sqrt()?
                } else {
                    s.square_avg.sqrt()?
                }
                .add_scalar(o.eps)?;
                if o.momentum > 0.0 {
                    let buf = buffer_or_zeros(&mut s.momentum_buffer, p)?;
                    // buf.mul_(momentum).addcdiv_(g, avg); param.add_(buf, alpha=-lr).
                    buf.mul_scalar_(o.momentum)?;
                    buf.add_(&g.div(&avg)?)?;
                    p.add_(&buf.mul_scalar(-o.lr)?)?;
                } else {
                    // param.addcdiv_(g, avg, value=-lr).
                    p.add_(&g.mul_scalar(-o.lr)?.div(&avg)?)?;
                }
            }
        }
        Ok(())
    }

    super::forward_to_groups!();
}
