//! Optimizer updates as ops: one SGD, Adam or AdamW step of one parameter in functional form,
//! `(param, grad, state..., run-time scalars) -> (new param, new state...)`. Pure ops, so a
//! graph that holds them stays analysable; whoever runs them writes the outputs back into the
//! parameter and state buffers (the eager optimizers copy them in place, a compiled training
//! step aliases them). The learning rate and Adam's step counter are 0-d tensor inputs, not
//! attributes, so one graph serves every step and every learning-rate schedule.
//!
//! The update rules are written once ([`formula`]) and evaluated both by the eager kernel
//! ([`cpu`]) and by the kernel IR lowering, operation for operation in the order of PyTorch's
//! single-tensor optimizers, so eager, interpreted and compiled updates agree bit for bit.

mod cpu;
pub mod formula;

use super::{BackwardCtx, OpDef, OpKind};
use crate::cpu::tensor_from;
use crate::storage::StorageElement;
use crate::{DType, Float, Result, Tensor, TensorError, TensorMeta};
use cpu::{Block, Exact, LANES, Numbers, Rounding, ToHalf, elementwise, with_slices};
use formula::{
    AdamElem, AdamHyper, AdamScalars, SgdHyper, adam_step_scalars, adam_update, sgd_update,
};

/// One optimizer update op.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum OptimOp {
    /// `torch.optim.SGD`'s step. Inputs `param, grad, [momentum_buffer], lr`; outputs the new
    /// `param` and, when `momentum != 0`, the new `momentum_buffer`. Without a buffer input
    /// (PyTorch's first step with momentum) the new buffer is the (decayed) gradient.
    SgdUpdate {
        momentum: f64,
        dampening: f64,
        weight_decay: f64,
        nesterov: bool,
        maximize: bool,
    },
    /// Adam's per-step scalars. Inputs `step` (0-d f32, the count before this step) and `lr`;
    /// outputs `step + 1`, `step_size = lr / (1 - beta1^(step+1))` and
    /// `bias_correction2_sqrt = sqrt(1 - beta2^(step+1))` (0-d f64, computed in f64 as
    /// PyTorch does on the host).
    AdamStepScalars { beta1: f64, beta2: f64 },
    /// `torch.optim.Adam`'s (and, with `decoupled_weight_decay`, AdamW's) step. Inputs
    /// `param, grad, exp_avg, exp_avg_sq, [max_exp_avg_sq when amsgrad], lr, step_size,
    /// bias_correction2_sqrt`; outputs the new `param, exp_avg, exp_avg_sq,
    /// [max_exp_avg_sq]`.
    AdamUpdate {
        beta1: f64,
        beta2: f64,
        eps: f64,
        weight_decay: f64,
        amsgrad: bool,
        maximize: bool,
        decoupled_weight_decay: bool,
    },
}

variant_names!(OptimOp {
    SgdUpdate => "sgd_update",
    AdamStepScalars => "adam_step_scalars",
    AdamUpdate => "adam_update",
});

/// What an input of an update op is, for checking and for messages.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Role {
    /// Shaped and typed like the parameter.
    LikeParam,
    /// A 0-d f64 scalar.
    Scalar,
    /// The 0-d f32 step counter.
    Step,
}

impl OptimOp {
    /// SGD's attributes, if this is the SGD update.
    pub fn sgd_hyper(&self) -> Option<SgdHyper> {
        match *self {
            OptimOp::SgdUpdate {
                momentum,
                dampening,
                weight_decay,
                nesterov,
                maximize,
            } => Some(SgdHyper {
                momentum,
                dampening,
                weight_decay,
                nesterov,
                maximize,
            }),
            _ => None,
        }
    }

    /// Adam's attributes, if this is the Adam update.
    pub fn adam_hyper(&self) -> Option<AdamHyper> {
        match *self {
            OptimOp::AdamUpdate {
                beta1,
                beta2,
                eps,
                weight_decay,
                amsgrad,
                maximize,
                decoupled_weight_decay,
            } => Some(AdamHyper {
                beta1,
                beta2,
                eps,
                weight_decay,
                amsgrad,
                maximize,
                decoupled_weight_decay,
            }),
            _ => None,
        }
    }

    /// The names and roles of the inputs for `count` inputs, or an error saying what the op
    /// expects.
    fn inputs(&self, count: usize) -> Result<Vec<(&'static str, Role)>> {
        use Role::*;
        let expected: Vec<(&'static str, Role)> = match self {
            OptimOp::SgdUpdate { momentum, .. } => {
                let mut v = vec![("param", LikeParam), ("grad", LikeParam)];
                if count == 4 && *momentum != 0.0 {
                    v.push(("momentum_buffer", LikeParam));
                }
                v.push(("lr", Scalar));
                v
            }
            OptimOp::AdamStepScalars { .. } => vec![("step", Step), ("lr", Scalar)],
            OptimOp::AdamUpdate { amsgrad, .. } => {
                let mut v = vec![
                    ("param", LikeParam),
                    ("grad", LikeParam),
                    ("exp_avg", LikeParam),
                    ("exp_avg_sq", LikeParam),
                ];
                if *amsgrad {
                    v.push(("max_exp_avg_sq", LikeParam));
                }
                v.extend([
                    ("lr", Scalar),
                    ("step_size", Scalar),
                    ("bias_correction2_sqrt", Scalar),
                ]);
                v
            }
        };
        if expected.len() != count {
            let names: Vec<&str> = expected.iter().map(|(n, _)| *n).collect();
            let momentum_note = match self {
                OptimOp::SgdUpdate { momentum, .. } if *momentum == 0.0 => {
                    " (no momentum buffer: momentum is 0)"
                }
                OptimOp::SgdUpdate { .. } => " (the momentum buffer may be left out)",
                _ => "",
            };
            return Err(TensorError::invalid(
                self.op_name(),
                format!(
                    "expected the inputs ({}){momentum_note}, got {count} inputs",
                    names.join(", ")
                ),
            ));
        }
        Ok(expected)
    }

    /// How many outputs are shaped like the parameter.
    fn param_outputs(&self, has_max: bool) -> usize {
        match self {
            OptimOp::SgdUpdate { momentum, .. } => {
                if *momentum != 0.0 {
                    2
                } else {
                    1
                }
            }
            OptimOp::AdamStepScalars { .. } => 0,
            OptimOp::AdamUpdate { .. } => 3 + usize::from(has_max),
        }
    }

    /// The parameter update on inputs whose parameter-shaped tensors are of type `T` (the
    /// scalars f64), each operation's result rounded by `R`.
    fn run<T, R>(&self, inputs: &[&Tensor]) -> Result<Vec<Tensor>>
    where
        T: Float + StorageElement,
        R: Rounding<T>,
    {
        let name = self.op_name();
        let shape = inputs[0].shape();
        let scalar = |i: usize| inputs[i].item::<f64>();
        let wrap = |outs: Vec<Vec<T>>| outs.into_iter().map(|v| tensor_from(v, &shape)).collect();
        match self {
            OptimOp::SgdUpdate { .. } => {
                let h = self.sgd_hyper().ok_or_else(|| mismatch(name))?;
                let lr = scalar(inputs.len() - 1)?;
                let tensors = &inputs[..inputs.len() - 1];
                let new = |p, g, b| sgd_update(&mut Numbers::<T, R>::new(), &h, p, g, b, lr);
                with_slices::<T, _>(tensors, |s| -> Result<Vec<Tensor>> {
                    Ok(wrap(match (s, h.momentum != 0.0) {
                        (&[p, g], false) => {
                            Vec::from(elementwise(name, [p, g], |[p, g]| [new(p, g, None).0])?)
                        }
                        (&[p, g], true) => Vec::from(elementwise(name, [p, g], |[p, g]| {
                            let (p, b) = new(p, g, None);
                            [p, b.unwrap_or(p)]
                        })?),
                        (&[p, g, b], true) => {
                            Vec::from(elementwise(name, [p, g, b], |[p, g, b]| {
                                let (p, b) = new(p, g, Some(b));
                                [p, b.unwrap_or(p)]
                            })?)
                        }
                        _ => return Err(mismatch(name)),
                    }))
                })?
            }
            OptimOp::AdamStepScalars { .. } => Err(mismatch(name)),
            OptimOp::AdamUpdate { .. } => {
                let h = self.adam_hyper().ok_or_else(|| mismatch(name))?;
                let n = inputs.len();
                let s = AdamScalars {
                    lr: scalar(n - 3)?,
                    step_size: scalar(n - 2)?,
                    bias_correction2_sqrt: scalar(n - 1)?,
                };
                let new = |x: AdamElem<Block<T, LANES>>, g| {
                    adam_update(&mut Numbers::<T, R>::new(), &h, x, g, s)
                };
                with_slices::<T, _>(&inputs[..n - 3], |s| -> Result<Vec<Tensor>> {
                    Ok(wrap(match *s {
                        [p, g, m, v] => {
                            Vec::from(elementwise(name, [p, g, m, v], |[p, g, m, v]| {
                                let x = AdamElem {
                                    param: p,
                                    exp_avg: m,
                                    exp_avg_sq: v,
                                    max_exp_avg_sq: None,
                                };
                                let y = new(x, g);
                                [y.param, y.exp_avg, y.exp_avg_sq]
                            })?)
                        }
                        [p, g, m, v, mx] => {
                            Vec::from(elementwise(name, [p, g, m, v, mx], |[p, g, m, v, mx]| {
                                let x = AdamElem {
                                    param: p,
                                    exp_avg: m,
                                    exp_avg_sq: v,
                                    max_exp_avg_sq: Some(mx),
                                };
                                let y = new(x, g);
                                [
                                    y.param,
                                    y.exp_avg,
                                    y.exp_avg_sq,
                                    y.max_exp_avg_sq.unwrap_or(mx),
                                ]
                            })?)
                        }
                        _ => return Err(mismatch(name)),
                    }))
                })?
            }
        }
    }
}

/// The error for inputs that passed `meta` yet do not fit the kernel (unreachable through
/// `Op::apply`, kept as an error rather than a panic).
fn mismatch(op: &str) -> TensorError {
    TensorError::invalid(op, "the inputs do not match the op's attributes")
}

impl OpDef for OptimOp {
    op_identity!(name: op_name, attributes: variant, kind: ElementwiseUpdate);

    fn meta(&self, inputs: &[TensorMeta]) -> Result<Vec<TensorMeta>> {
        let name = self.op_name();
        let roles = self.inputs(inputs.len())?;
        let param = &inputs[0];
        for ((what, role), m) in roles.iter().zip(inputs) {
            match role {
                Role::LikeParam => {
                    if !m.dtype.is_float() {
                        return Err(TensorError::invalid(
                            name,
                            format!("{what} must be a float tensor, got {}", m.dtype),
                        ));
                    }
                    if m.shape != param.shape {
                        return Err(TensorError::shapes(
                            name,
                            &param.shape,
                            &m.shape,
                            format!("{what} must have the parameter's shape"),
                        ));
                    }
                    if m.dtype != param.dtype {
                        return Err(TensorError::invalid(
                            name,
                            format!(
                                "{what} has dtype {} but the parameter has {}",
                                m.dtype, param.dtype
                            ),
                        ));
                    }
                }
                Role::Scalar | Role::Step => {
                    let dtype = if *role == Role::Step {
                        DType::F32
                    } else {
                        DType::F64
                    };
                    if !m.shape.is_empty() || m.dtype != dtype {
                        return Err(TensorError::invalid(
                            name,
                            format!(
                                "{what} must be a 0-d {dtype} tensor, got shape {:?} of {}",
                                m.shape, m.dtype
                            ),
                        ));
                    }
                }
            }
        }
        if let OptimOp::AdamStepScalars { .. } = self {
            return Ok(vec![
                TensorMeta::new(Vec::new(), DType::F32),
                TensorMeta::new(Vec::new(), DType::F64),
                TensorMeta::new(Vec::new(), DType::F64),
            ]);
        }
        let has_max = roles.iter().any(|(n, _)| *n == "max_exp_avg_sq");
        Ok(vec![param.clone(); self.param_outputs(has_max)])
    }

    fn cpu(&self, inputs: &[&Tensor]) -> Result<Vec<Tensor>> {
        if let OptimOp::AdamStepScalars { beta1, beta2 } = *self {
            let step = inputs[0].item::<f32>()?;
            let lr = inputs[1].item::<f64>()?;
            let (step, step_size, bias_correction2_sqrt) = adam_step_scalars(
                &mut Numbers::<f64, Exact, 1>::new(),
                (beta1, beta2),
                step,
                lr,
            );
            return Ok(vec![
                Tensor::scalar(step),
                Tensor::scalar(step_size),
                Tensor::scalar(bias_correction2_sqrt),
            ]);
        }
        match inputs[0].dtype() {
            DType::F32 => self.run::<f32, Exact>(inputs),
            DType::F64 => self.run::<f64, Exact>(inputs),
            DType::F16 => self.run_half::<half::f16>(inputs),
            DType::BF16 => self.run_half::<half::bf16>(inputs),
            other => Err(TensorError::dtype(self.op_name(), other)),
        }
    }

    fn backward(&self, _cx: &BackwardCtx) -> Result<Vec<Option<Tensor>>> {
        Err(TensorError::invalid(
            self.op_name(),
            "optimizer updates have no backward: they run after the gradients are computed",
        ))
    }

    fn output_is_differentiable(&self, _index: usize) -> bool {
        false
    }

    /// Half parameters compute in f32 but round after every operation (as the eager ops
    /// they replace did), which the kernel does itself.
    fn computes_half_in_f32(&self) -> bool {
        false
    }
}

impl OptimOp {
    /// The update of half-precision (`H`) parameters: computed in f32, every result rounded
    /// to `H`.
    fn run_half<H>(&self, inputs: &[&Tensor]) -> Result<Vec<Tensor>>
    where
        ToHalf<H>: Rounding<f32>,
    {
        let half = inputs[0].dtype();
        let widened: Vec<Tensor> = inputs
            .iter()
            .map(|t| {
                if t.dtype() == half {
                    t.to_dtype(DType::F32)
                } else {
                    Ok((*t).clone())
                }
            })
            .collect::<Result<_>>()?;
        let refs: Vec<&Tensor> = widened.iter().collect();
        self.run::<f32, ToHalf<H>>(&refs)?
            .into_iter()
            .map(|t| t.to_dtype(half))
            .collect()
    }
}
