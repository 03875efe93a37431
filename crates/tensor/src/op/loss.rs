//! Loss functions: elementwise losses (mse, l1, binary_cross_entropy and its with_logits form) and the
//! negative log-likelihood over class indices that cross_entropy composes with log_softmax.

use super::binary::reduce_grad;
use super::{BackwardCtx, OpDef, OpKind, expect_float};
use crate::cpu::{float_dispatch, tensor_from};
use crate::{DType, Float, Result, Tensor, TensorError, TensorMeta};

/// How per-element losses are combined, as in PyTorch's `reduction=`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub enum Reduction {
    /// Keep one loss per element (or per sample for nll).
    None,
    /// Average (over non-ignored samples for nll).
    #[default]
    Mean,
    Sum,
}

/// A loss. Inputs: `input, target` (and `pos_weight` for bce when `pos_weight` is set).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum LossOp {
    /// `(input - target)^2`.
    Mse { reduction: Reduction },
    /// `|input - target|`.
    L1 { reduction: Reduction },
    /// `-(1-s) * input[target] - s/C * sum_c input[c]` over log-probabilities `[N, C, d...]`
    /// (or `[C]`) and i64 class targets `[N, d...]`; samples whose target is `ignore_index`
    /// contribute nothing and are not counted by the mean. `s` is the label smoothing.
    Nll {
        reduction: Reduction,
        ignore_index: i64,
        label_smoothing: f64,
    },
    /// `(1 - y) * x + (1 + (pw - 1) * y) * softplus(-x)`, computed stably.
    BceWithLogits {
        reduction: Reduction,
        pos_weight: bool,
    },
    /// `-(y * max(log x, -100) + (1 - y) * max(log(1 - x), -100))` over probabilities `x`;
    /// the gradient divides by `max(x * (1 - x), 1e-12)`, as PyTorch's.
    Bce { reduction: Reduction },
    /// The gradient of `Nll` with these attributes with respect to its log-probabilities;
    /// inputs `grad, input, target` (the forward's input gives only the shape).
    NllBackward {
        reduction: Reduction,
        ignore_index: i64,
        label_smoothing: f64,
    },
}

/// PyTorch's floor on each log term of `binary_cross_entropy`.
const BCE_LOG_FLOOR: f64 = -100.0;
/// PyTorch's floor on `x * (1 - x)` in the gradient of `binary_cross_entropy`.
const BCE_GRAD_EPS: f64 = 1e-12;

/// Input `[N, C, d...]` (or `[C]`) as `(N, C, D)` with `D` the product of the extra dims.
fn class_layout(shape: &[usize]) -> (usize, usize, usize) {
    match shape {
        [c] => (1, *c, 1),
        [n, c, rest @ ..] => (*n, *c, rest.iter().product()),
        _ => (0, 0, 0),
    }
}

/// Class targets as i64.
fn targets(t: &Tensor) -> Result<Vec<i64>> {
    match t.dtype() {
        DType::I64 => t.to_vec::<i64>(),
        DType::I32 => Ok(t.to_vec::<i32>()?.into_iter().map(i64::from).collect()),
        other => Err(TensorError::dtype("nll_loss", other)),
    }
}

/// The shared start of nll's forward and backward.
struct NllTerms {
    label_smoothing: f64,
    classes: usize,
    inner: usize,
    /// Each element's target class, `None` where ignored.
    picked: Vec<Option<usize>>,
    /// How many elements count (for the mean).
    counted: usize,
}

impl LossOp {
    fn reduction(&self) -> Reduction {
        match *self {
            LossOp::Mse { reduction }
            | LossOp::L1 { reduction }
            | LossOp::Nll { reduction, .. }
            | LossOp::BceWithLogits { reduction, .. }
            | LossOp::Bce { reduction }
            | LossOp::NllBackward { reduction, .. } => reduction,
        }
    }

    /// The forward nll of an `NllBackward` (and nll itself).
    fn nll_forward(&self) -> LossOp {
        match *self {
            LossOp::NllBackward {
                reduction,
                ignore_index,
                label_smoothing,
            } => LossOp::Nll {
                reduction,
                ignore_index,
                label_smoothing,
            },
            ref other => other.clone(),
        }
    }

    /// Combines per-element losses; `count` is the divisor of the mean.
    fn reduce<T: Float>(&self, losses: Vec<T>, shape: &[usize], count: usize) -> Tensor {
        let total = || losses.iter().map(|v| v.as_f64()).sum::<f64>();
        match self.reduction() {
            Reduction::None => tensor_from(losses, shape),
            Reduction::Sum => tensor_from(vec![T::from_f64(total())], &[]),
            Reduction::Mean => tensor_from(vec![T::from_f64(total() / count as f64)], &[]),
        }
    }

    fn elementwise<T: Float>(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        let _guard = crate::no_grad();
        let shape = inputs[0].shape();
        let x = inputs[0].to_vec::<T>()?;
        let y = inputs[1].to_vec::<T>()?;
        let losses: Vec<T> = match self {
            LossOp::Mse { .. } => x.iter().zip(&y).map(|(&a, &b)| (a - b) * (a - b)).collect(),
            LossOp::L1 { .. } => x.iter().zip(&y).map(|(&a, &b)| (a - b).abs()).collect(),
            LossOp::BceWithLogits { pos_weight, .. } => {
                let pw = match pos_weight {
                    true => inputs[2].expand(&shape)?.to_vec::<T>()?,
                    false => vec![T::one(); x.len()],
                };
                x.iter()
                    .zip(&y)
                    .zip(&pw)
                    .map(|((&a, &b), &w)| {
                        let l = T::one() + (w - T::one()) * b;
                        (T::one() - b) * a + l * softplus(-a)
                    })
                    .collect()
            }
            LossOp::Bce { .. } => {
                let floor = T::from_f64(BCE_LOG_FLOOR);
                x.iter()
                    .zip(&y)
                    .map(|(&p, &t)| {
                        let log_p = p.ln().max(floor);
                        let log_q = (T::one() - p).ln().max(floor);
                        -(t * log_p + (T::one() - t) * log_q)
                    })
                    .collect()
            }
            LossOp::Nll { .. } | LossOp::NllBackward { .. } => {
                unreachable!("nll has its own kernels")
            }
        };
        let n = losses.len();
        Ok(self.reduce(losses, &shape, n))
    }

    /// Each sample's class (`None` where ignored), checked against the class count, and how
    /// many samples are not ignored.
    fn nll_terms(&self, input: &Tensor, target: &Tensor) -> Result<(Vec<Option<usize>>, usize)> {
        let LossOp::Nll { ignore_index, .. } = self.nll_forward() else {
            unreachable!("nll only")
        };
        let (_, classes, _) = class_layout(&input.shape());
        let mut counted = 0;
        let picked = targets(target)?
            .into_iter()
            .map(|t| {
                if t == ignore_index {
                    return Ok(None);
                }
                counted += 1;
                usize::try_from(t)
                    .ok()
                    .filter(|&c| c < classes)
                    .map(Some)
                    .ok_or_else(|| {
                        TensorError::invalid(
                            "nll_loss",
                            format!("target {t} is out of bounds for {classes} classes"),
                        )
                    })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok((picked, counted))
    }

    /// What both directions of nll start from: the smoothing, the class layout and each
    /// element's target class.
    fn nll_setup(&self, input: &Tensor, target: &Tensor) -> Result<NllTerms> {
        let LossOp::Nll {
            label_smoothing, ..
        } = self.nll_forward()
        else {
            unreachable!("nll only")
        };
        let (_, classes, inner) = class_layout(&input.shape());
        let (picked, counted) = self.nll_terms(input, target)?;
        Ok(NllTerms {
            label_smoothing,
            classes,
            inner,
            picked,
            counted,
        })
    }

    fn nll<T: Float>(&self, input: &Tensor, target: &Tensor) -> Result<Tensor> {
        let terms = self.nll_setup(input, target)?;
        let lp = input.to_vec::<T>()?;
        let smooth = terms.label_smoothing / terms.classes.max(1) as f64;
        let losses: Vec<T> = terms
            .picked
            .iter()
            .enumerate()
            .map(|(i, &t)| {
                let Some(t) = t else { return T::zero() };
                let (n, d) = (i / terms.inner, i % terms.inner);
                let at = |c: usize| lp[(n * terms.classes + c) * terms.inner + d].as_f64();
                let mut loss = -(1.0 - terms.label_smoothing) * at(t);
                if smooth != 0.0 {
                    loss -= smooth * (0..terms.classes).map(at).sum::<f64>();
                }
                T::from_f64(loss)
            })
            .collect();
        Ok(self.reduce(losses, &target.shape(), terms.counted))
    }

    fn nll_backward<T: Float>(
        &self,
        input: &Tensor,
        target: &Tensor,
        g: &Tensor,
    ) -> Result<Tensor> {
        let terms = self.nll_setup(input, target)?;
        let g = g.to_vec_f64()?;
        let upstream = |i: usize| match self.reduction() {
            Reduction::None => g[i],
            Reduction::Sum => g[0],
            Reduction::Mean => g[0] / terms.counted as f64,
        };
        let smooth = terms.label_smoothing / terms.classes.max(1) as f64;
        let mut out = vec![T::zero(); input.numel()];
        for (i, &t) in terms.picked.iter().enumerate() {
            let Some(t) = t else { continue };
            let (n, d, up) = (i / terms.inner, i % terms.inner, upstream(i));
            for c in 0..terms.classes {
                let mut coeff = -smooth;
                if c == t {
                    coeff -= 1.0 - terms.label_smoothing;
                }
                out[(n * terms.classes + c) * terms.inner + d] = T::from_f64(coeff * up);
            }
        }
        Ok(tensor_from(out, &input.shape()))
    }

    /// The upstream gradient spread over the elements (a scalar for sum and mean).
    fn spread(&self, g: &Tensor, numel: usize) -> Result<Tensor> {
        match self.reduction() {
            Reduction::Mean => g.div_scalar(numel as f64),
            _ => Ok(g.clone()),
        }
    }

    fn check_nll(&self, input: &TensorMeta, target: &TensorMeta) -> Result<TensorMeta> {
        if !matches!(target.dtype, DType::I64 | DType::I32) {
            return Err(TensorError::invalid(
                "nll_loss",
                format!("expected i64 class-index targets, got {}", target.dtype),
            ));
        }
        let expected: Vec<usize> = match input.shape.as_slice() {
            [_] => vec![],
            [n, _, rest @ ..] => std::iter::once(*n).chain(rest.iter().copied()).collect(),
            _ => {
                return Err(TensorError::invalid(
                    "nll_loss",
                    format!(
                        "expected input of shape [N, C, ...] or [C], got {:?}",
                        input.shape
                    ),
                ));
            }
        };
        if target.shape != expected {
            return Err(TensorError::shapes(
                "nll_loss",
                &input.shape,
                &target.shape,
                format!("target must have shape {expected:?}"),
            ));
        }
        let LossOp::Nll {
            label_smoothing, ..
        } = *self
        else {
            unreachable!("nll only")
        };
        if !(0.0..=1.0).contains(&label_smoothing) {
            return Err(TensorError::invalid(
                "nll_loss",
                format!("label_smoothing must be in [0, 1], got {label_smoothing}"),
            ));
        }
        Ok(TensorMeta::new(target.shape.clone(), input.dtype))
    }

    /// Checks `grad, input, target` of `NllBackward`: the grad has the forward's output shape.
    fn check_nll_backward(&self, inputs: &[TensorMeta]) -> Result<TensorMeta> {
        let name = self.name();
        if inputs.len() != 3 {
            return Err(TensorError::invalid(
                &name,
                format!(
                    "expected 3 inputs (grad, input, target), got {}",
                    inputs.len()
                ),
            ));
        }
        let (grad, input, target) = (&inputs[0], &inputs[1], &inputs[2]);
        expect_float(&name, grad)?;
        expect_float(&name, input)?;
        let forward = self.nll_forward();
        let per_sample = forward.check_nll(input, target)?;
        let expected = match self.reduction() {
            Reduction::None => per_sample.shape,
            _ => vec![],
        };
        if grad.shape != expected {
            return Err(TensorError::shapes(
                &name,
                &grad.shape,
                &expected,
                "grad must have the shape of nll_loss's output",
            ));
        }
        if grad.dtype != input.dtype {
            return Err(TensorError::DTypeMismatch {
                op: name,
                expected: input.dtype,
                got: grad.dtype,
            });
        }
        Ok(input.clone())
    }
}

/// `log(1 + exp(v))` without overflow.
#[inline]
fn softplus<T: Float>(v: T) -> T {
    v.max(T::zero()) + (-v.abs()).exp().ln_1p()
}

variant_names!(LossOp {
    Mse => "mse_loss",
    L1 => "l1_loss",
    Nll => "nll_loss",
    BceWithLogits => "binary_cross_entropy_with_logits",
    Bce => "binary_cross_entropy",
    NllBackward => "nll_loss_backward",
});

impl OpDef for LossOp {
    op_identity!(name: op_name, attributes: variant, kind: Loss);

    fn meta(&self, inputs: &[TensorMeta]) -> Result<Vec<TensorMeta>> {
        if let LossOp::NllBackward { .. } = self {
            return Ok(vec![self.check_nll_backward(inputs)?]);
        }
        let name = self.name();
        let arity = 2 + matches!(
            self,
            LossOp::BceWithLogits {
                pos_weight: true,
                ..
            }
        ) as usize;
        if inputs.len() != arity {
            return Err(TensorError::invalid(
                &name,
                format!("expected {arity} inputs, got {}", inputs.len()),
            ));
        }
        let (input, target) = (&inputs[0], &inputs[1]);
        expect_float(&name, input)?;
        let per_element = match self {
            LossOp::Nll { .. } => self.check_nll(input, target)?,
            _ => {
                if target.dtype != input.dtype {
                    return Err(TensorError::DTypeMismatch {
                        op: name,
                        expected: input.dtype,
                        got: target.dtype,
                    });
                }
                if target.shape != input.shape {
                    return Err(TensorError::shapes(
                        &name,
                        &input.shape,
                        &target.shape,
                        "input and target must have the same shape",
                    ));
                }
                if let Some(pw) = inputs.get(2) {
                    expect_float(&name, pw)?;
                    let fits = pw.shape.len() <= input.shape.len()
                        && pw
                            .shape
                            .iter()
                            .rev()
                            .zip(input.shape.iter().rev())
                            .all(|(&p, &x)| p == x || p == 1);
                    if !fits || pw.dtype != input.dtype {
                        return Err(TensorError::shapes(
                            &name,
                            &input.shape,
                            &pw.shape,
                            format!(
                                "pos_weight must broadcast to the input and have dtype {}",
                                input.dtype
                            ),
                        ));
                    }
                }
                input.clone()
            }
        };
        Ok(vec![match self.reduction() {
            Reduction::None => per_element,
            _ => TensorMeta::new(vec![], input.dtype),
        }])
    }

    fn cpu(&self, inputs: &[&Tensor]) -> Result<Vec<Tensor>> {
        let name = self.name();
        Ok(vec![
            float_dispatch!(inputs[0].dtype(), name, T => match self {
                LossOp::Nll { .. } => self.nll::<T>(inputs[0], inputs[1])?,
                LossOp::NllBackward { .. } => {
                    let grad = inputs[0].to_dtype(inputs[1].dtype())?;
                    self.nll_backward::<T>(inputs[1], inputs[2], &grad)?
                }
                _ => self.elementwise::<T>(inputs)?,
            }),
        ])
    }

    fn backward(&self, cx: &BackwardCtx) -> Result<Vec<Option<Tensor>>> {
        let (x, y) = (&cx.inputs[0], &cx.inputs[1]);
        let g = cx.grad(0)?;
        let mut grads = vec![None; cx.inputs.len()];
        let up = || self.spread(&g, x.numel());
        match self {
            LossOp::Nll {
                reduction,
                ignore_index,
                label_smoothing,
            } => {
                if cx.needs[0] {
                    let backward = LossOp::NllBackward {
                        reduction: *reduction,
                        ignore_index: *ignore_index,
                        label_smoothing: *label_smoothing,
                    };
                    grads[0] = Some(super::Op::Loss(backward).apply1(&[&g, x, y])?);
                }
            }
            // Linear in the grad: its adjoint is the forward nll of the upstream gradient.
            LossOp::NllBackward { .. } => {
                let target = &cx.inputs[2];
                if cx.needs[0] {
                    let forward = super::Op::Loss(self.nll_forward());
                    grads[0] = Some(forward.apply1(&[&g, target])?);
                }
            }
            LossOp::Mse { .. } | LossOp::L1 { .. } => {
                let diff = x.sub(y)?;
                let local = match self {
                    LossOp::Mse { .. } => diff.mul_scalar(2.0)?,
                    _ => diff.sign()?,
                };
                let dx = local.mul(&up()?)?;
                if cx.needs[1] {
                    grads[1] = reduce_grad(Some(dx.neg()?), y)?;
                }
                grads[0] = reduce_grad(Some(dx), x)?;
            }
            LossOp::Bce { .. } => {
                let up = up()?;
                if cx.needs[0] {
                    // dL/dx = (x - y) / max(x * (1 - x), eps).
                    let denom = x
                        .mul(&x.rsub_scalar(1.0)?)?
                        .clamp(Some(BCE_GRAD_EPS), None)?;
                    let dx = x.sub(y)?.div(&denom)?;
                    grads[0] = reduce_grad(Some(dx.mul(&up)?), x)?;
                }
                if cx.needs[1] {
                    // dL/dy = max(log(1 - x), -100) - max(log x, -100).
                    let log_p = x.log()?.clamp(Some(BCE_LOG_FLOOR), None)?;
                    let log_q = x
                        .rsub_scalar(1.0)?
                        .log()?
                        .clamp(Some(BCE_LOG_FLOOR), None)?;
                    grads[1] = reduce_grad(Some(log_q.sub(&log_p)?.mul(&up)?), y)?;
                }
            }
            LossOp::BceWithLogits { pos_weight, .. } => {
                let up = up()?;
                let pw = pos_weight.then(|| cx.inputs[2].clone());
                // l = 1 + (pw - 1) * y; dL/dx = (1 - y) - l * sigmoid(-x).
                let l = match &pw {
                    Some(pw) => pw.sub_scalar(1.0)?.mul(y)?.add_scalar(1.0)?,
                    None => Tensor::ones(&[], y.dtype())?,
                };
                let sig_neg = x.neg()?.sigmoid()?;
                if cx.needs[0] {
                    let dx = y.rsub_scalar(1.0)?.sub(&l.mul(&sig_neg)?)?;
                    grads[0] = reduce_grad(Some(dx.mul(&up)?), x)?;
                }
                let needs_softplus = cx.needs[1] || (pw.is_some() && cx.needs[2]);
                if needs_softplus {
                    // softplus(-x) = -log(sigmoid(x)), stable as relu(-x) + log(1 + exp(-|x|)).
                    let sp = x
                        .neg()?
                        .relu()?
                        .add(&x.abs()?.neg()?.exp()?.add_scalar(1.0)?.log()?)?;
                    if cx.needs[1] {
                        // dL/dy = -x + (pw - 1) * softplus(-x).
                        let pw_minus_one = match &pw {
                            Some(pw) => pw.sub_scalar(1.0)?,
                            None => Tensor::zeros(&[], x.dtype())?,
                        };
                        let dy = pw_minus_one.mul(&sp)?.sub(x)?;
                        grads[1] = reduce_grad(Some(dy.mul(&up)?), y)?;
                    }
                    if let Some(pw) = pw.as_ref().filter(|_| cx.needs[2]) {
                        // dL/dpw = y * softplus(-x).
                        grads[2] = reduce_grad(Some(y.mul(&sp)?.mul(&up)?), pw)?;
                    }
                }
            }
        }
        Ok(grads)
    }
}
