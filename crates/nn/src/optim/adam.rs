//! Adam with L2 or decoupled weight decay and AMSGrad, as `torch.optim.Adam` (single-tensor
//! path, `foreach=False`), computed by the `adam_step_scalars` and `adam_update` ops of the
//! op table; AdamW is this update with `decoupled_weight_decay`.

use super::state::{
    Dict, Groups, ParamState, buffer_or_zeros, check_non_negative, load_step, load_tensor,
    read_bool, read_f64, require_tensor, wrong_options, zero_step, zeros_like,
};
use super::{EagerUpdate, GroupOptions, Optimizer, ParamGroup, UpdateSink};
use crate::{Key, NnError, Result, Value};
use tessera_tensor::op::OptimOp;
use tessera_tensor::{Op, Tensor, no_grad};

/// Adam hyper-parameters; `Default` is PyTorch's (`lr` 1e-3, betas (0.9, 0.999), eps 1e-8).
#[derive(Debug, Clone, PartialEq)]
pub struct AdamOptions {
    pub lr: f64,
    pub betas: (f64, f64),
    pub eps: f64,
    pub weight_decay: f64,
    pub amsgrad: bool,
    pub maximize: bool,
    /// Decay the parameter itself (`p *= 1 - lr * weight_decay`) instead of the gradient.
    pub decoupled_weight_decay: bool,
}

impl Default for AdamOptions {
    fn default() -> Self {
        AdamOptions {
            lr: 1e-3,
            betas: (0.9, 0.999),
            eps: 1e-8,
            weight_decay: 0.0,
            amsgrad: false,
            maximize: false,
            decoupled_weight_decay: false,
        }
    }
}

impl AdamOptions {
    pub(crate) fn write(&self, d: &mut Dict) {
        d.insert("lr".into(), Value::Float(self.lr));
        d.insert(
            "betas".into(),
            Value::Tuple(vec![Value::Float(self.betas.0), Value::Float(self.betas.1)]),
        );
        d.insert("eps".into(), Value::Float(self.eps));
        d.insert("weight_decay".into(), Value::Float(self.weight_decay));
        d.insert("amsgrad".into(), Value::Bool(self.amsgrad));
        d.insert("maximize".into(), Value::Bool(self.maximize));
        d.insert("foreach".into(), Value::None);
        d.insert("capturable".into(), Value::Bool(false));
        d.insert("differentiable".into(), Value::Bool(false));
        d.insert("fused".into(), Value::None);
        d.insert(
            "decoupled_weight_decay".into(),
            Value::Bool(self.decoupled_weight_decay),
        );
    }

    pub(crate) fn read(&mut self, d: &Dict, ctx: &str) -> Result<()> {
        read_f64(d, "lr", &mut self.lr, ctx)?;
        if let Some(betas) = d.get(&Key::from("betas")) {
            match betas
                .as_list()
                .map(|b| b.iter().map(Value::as_f64).collect::<Vec<_>>())
            {
                Some(b) if matches!(b[..], [Some(_), Some(_)]) => {
                    self.betas = (b[0].unwrap_or_default(), b[1].unwrap_or_default());
                }
                _ => {
                    return Err(NnError::Invalid(format!(
                        "{ctx}: \"betas\" must be a pair of numbers, got {betas:?}"
                    )));
                }
            }
        }
        read_f64(d, "eps", &mut self.eps, ctx)?;
        read_f64(d, "weight_decay", &mut self.weight_decay, ctx)?;
        read_bool(d, "amsgrad", &mut self.amsgrad, ctx)?;
        read_bool(d, "maximize", &mut self.maximize, ctx)?;
        read_bool(
            d,
            "decoupled_weight_decay",
            &mut self.decoupled_weight_decay,
            ctx,
        )
    }

    pub(crate) fn validate(&self, ctx: &str) -> Result<()> {
        check_non_negative(ctx, "learning rate", self.lr)?;
        check_non_negative(ctx, "epsilon value", self.eps)?;
        for (i, beta) in [self.betas.0, self.betas.1].into_iter().enumerate() {
            if !(0.0..1.0).contains(&beta) {
                return Err(NnError::Invalid(format!(
                    "{ctx}: invalid beta parameter at index {i}: {beta}"
                )));
            }
        }
        check_non_negative(ctx, "weight_decay value", self.weight_decay)
    }
}

/// The step count and moment estimates of one parameter.
#[derive(Debug, Clone)]
pub(crate) struct AdamState {
    step: Tensor,
    exp_avg: Tensor,
    exp_avg_sq: Tensor,
    max_exp_avg_sq: Option<Tensor>,
}

impl ParamState for AdamState {
    fn entries(&self) -> Dict {
        let mut d = Dict::new();
        d.insert("step".into(), Value::Tensor(self.step.clone()));
        d.insert("exp_avg".into(), Value::Tensor(self.exp_avg.clone()));
        d.insert("exp_avg_sq".into(), Value::Tensor(self.exp_avg_sq.clone()));
        if let Some(m) = &self.max_exp_avg_sq {
            d.insert("max_exp_avg_sq".into(), Value::Tensor(m.clone()));
        }
        d
    }

    fn load(entries: &Dict, param: &Tensor, ctx: &str) -> Result<Option<Self>> {
        if entries.is_empty() {
            return Ok(None);
        }
        Ok(Some(AdamState {
            step: load_step(entries, ctx)?,
            exp_avg: require_tensor(entries, "exp_avg", param, ctx)?,
            exp_avg_sq: require_tensor(entries, "exp_avg_sq", param, ctx)?,
            max_exp_avg_sq: load_tensor(entries, "max_exp_avg_sq", param, ctx)?,
        }))
    }
}

super::optimizer_over_groups!(
    /// `torch.optim.Adam`.
    Adam,
    AdamState,
    AdamOptions,
    Adam
);

/// One Adam step over every group: for each parameter the `adam_step_scalars` op (step count
/// and bias corrections) and the `adam_update` op, whose results are copied into the
/// parameter and its state in place.
pub(crate) fn adam_step(inner: &mut Groups<AdamState>, sink: &mut dyn UpdateSink) -> Result<()> {
    let Groups {
        name,
        groups,
        state,
    } = inner;
    for (gi, group) in groups.iter().enumerate() {
        let GroupOptions::Adam(o) = &group.options else {
            return Err(wrong_options(name, gi, group));
        };
        let (beta1, beta2) = o.betas;
        let scalars = Op::Optim(OptimOp::AdamStepScalars { beta1, beta2 });
        let update = Op::Optim(OptimOp::AdamUpdate {
            beta1,
            beta2,
            eps: o.eps,
            weight_decay: o.weight_decay,
            amsgrad: o.amsgrad,
            maximize: o.maximize,
            decoupled_weight_decay: o.decoupled_weight_decay,
        });
        for p in &group.params {
            let Some(grad) = sink.grad(p) else { continue };
            let s = match state.entry(p.id()) {
                indexmap::map::Entry::Occupied(e) => e.into_mut(),
                indexmap::map::Entry::Vacant(e) => e.insert(AdamState {
                    step: zero_step(),
                    exp_avg: zeros_like(p)?,
                    exp_avg_sq: zeros_like(p)?,
                    max_exp_avg_sq: if o.amsgrad {
                        Some(zeros_like(p)?)
                    } else {
                        None
                    },
                }),
            };
            let lr = sink.scalar(gi, o.lr, p)?;
            let host_lr = sink.scalar(gi, o.lr, &s.step)?;
            let step = sink.apply(&scalars, &[&s.step, &host_lr])?;
            sink.assign(&s.step, &step[0])?;
            let (step_size, bias_correction2_sqrt) = (
                sink.to_device_of(&step[1], p)?,
                sink.to_device_of(&step[2], p)?,
            );
            let max = if o.amsgrad {
                Some(buffer_or_zeros(&mut s.max_exp_avg_sq, p)?)
            } else {
                None
            };
            let mut inputs = vec![p, &grad, &s.exp_avg, &s.exp_avg_sq];
            inputs.extend(&max);
            inputs.extend([&lr, &step_size, &bias_correction2_sqrt]);
            let new = sink.apply(&update, &inputs)?;
            let targets = [p, &s.exp_avg, &s.exp_avg_sq].into_iter().chain(&max);
            for (target, value) in targets.zip(&new) {
                sink.assign(target, value)?;
            }
        }
    }
    Ok(())
}

impl Optimizer for Adam {
    fn step(&mut self) -> Result<()> {
        let _guard = no_grad();
        adam_step(&mut self.inner, &mut EagerUpdate)
    }

    fn step_with(&mut self, sink: &mut dyn UpdateSink) -> Result<()> {
        adam_step(&mut self.inner, sink)
    }

    super::forward_to_groups!();
}
