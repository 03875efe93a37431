//! The optimizer update rules, written once over [`UpdateArith`]: the eager kernel evaluates
//! them on numbers and the kernel IR lowering emits them as expressions, so both perform the
//! same operations in the same order (each one the eager op's own, [`BinaryOp`] and
//! [`UnaryOp`]) and round alike. The order is that of the eager optimizers before these ops
//! existed (PyTorch's single-tensor `foreach=False` path), operation for operation.

use super::super::{BinaryOp, UnaryOp};

/// The arithmetic an update rule is written in.
///
/// `Elem` is one element of a parameter (or of its gradient or state) in the type the
/// parameter computes in; `Scalar` is a run-time f64 scalar (learning rate, step size);
/// `Step` is the f32 step counter of Adam.
pub trait UpdateArith {
    type Elem: Copy;
    type Scalar: Copy;
    type Step: Copy;
    /// An attribute as an element constant, rounded to the compute type as a scalar
    /// operand of an eager op is (`T::from_f64`).
    fn constant(&mut self, value: f64) -> Self::Elem;
    /// `BinaryOp::eval` on two elements.
    fn binary(&mut self, op: BinaryOp, a: Self::Elem, b: Self::Elem) -> Self::Elem;
    /// `UnaryOp::eval` on an element.
    fn unary(&mut self, op: UnaryOp, x: Self::Elem) -> Self::Elem;
    /// A run-time scalar rounded to the element compute type (`T::from_f64`).
    fn scalar_elem(&mut self, s: Self::Scalar) -> Self::Elem;
    /// An f64 constant.
    fn scalar_constant(&mut self, value: f64) -> Self::Scalar;
    /// `BinaryOp::eval` in f64.
    fn scalar_binary(&mut self, op: BinaryOp, a: Self::Scalar, b: Self::Scalar) -> Self::Scalar;
    /// `UnaryOp::eval` in f64.
    fn scalar_unary(&mut self, op: UnaryOp, x: Self::Scalar) -> Self::Scalar;
    /// `step + 1` in f32.
    fn step_increment(&mut self, step: Self::Step) -> Self::Step;
    /// The f32 step widened to f64.
    fn step_scalar(&mut self, step: Self::Step) -> Self::Scalar;
}

/// SGD's hyper-parameters that are attributes of the op (the learning rate is an input).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SgdHyper {
    pub momentum: f64,
    pub dampening: f64,
    pub weight_decay: f64,
    pub nesterov: bool,
    pub maximize: bool,
}

/// One SGD step of one element: the new parameter and, with momentum, the new momentum
/// buffer (the gradient itself when there is no buffer yet, PyTorch's first step).
#[inline(always)]
pub fn sgd_update<A: UpdateArith>(
    a: &mut A,
    h: &SgdHyper,
    param: A::Elem,
    grad: A::Elem,
    momentum_buffer: Option<A::Elem>,
    lr: A::Scalar,
) -> (A::Elem, Option<A::Elem>) {
    let mut g = if h.maximize {
        a.unary(UnaryOp::Neg, grad)
    } else {
        grad
    };
    if h.weight_decay != 0.0 {
        let wd = a.constant(h.weight_decay);
        let decay = a.binary(BinaryOp::Mul, param, wd);
        g = a.binary(BinaryOp::Add, g, decay);
    }
    let mut new_buffer = None;
    if h.momentum != 0.0 {
        let buffer = match momentum_buffer {
            Some(buf) => {
                let m = a.constant(h.momentum);
                let kept = a.binary(BinaryOp::Mul, buf, m);
                let k = a.constant(1.0 - h.dampening);
                let added = a.binary(BinaryOp::Mul, g, k);
                a.binary(BinaryOp::Add, kept, added)
            }
            None => g,
        };
        new_buffer = Some(buffer);
        g = if h.nesterov {
            let m = a.constant(h.momentum);
            let look_ahead = a.binary(BinaryOp::Mul, buffer, m);
            a.binary(BinaryOp::Add, g, look_ahead)
        } else {
            buffer
        };
    }
    let minus_one = a.scalar_constant(-1.0);
    let neg_lr = a.scalar_binary(BinaryOp::Mul, lr, minus_one);
    let neg_lr = a.scalar_elem(neg_lr);
    let delta = a.binary(BinaryOp::Mul, g, neg_lr);
    (a.binary(BinaryOp::Add, param, delta), new_buffer)
}

/// Adam's hyper-parameters that are attributes of the op (the learning rate and the step's
/// bias corrections are inputs).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdamHyper {
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    pub weight_decay: f64,
    pub amsgrad: bool,
    pub maximize: bool,
    pub decoupled_weight_decay: bool,
}

/// The state of one Adam element: parameter, first and second moments, and the running
/// maximum of the second moment (AMSGrad only).
#[derive(Debug, Clone, Copy)]
pub struct AdamElem<E> {
    pub param: E,
    pub exp_avg: E,
    pub exp_avg_sq: E,
    pub max_exp_avg_sq: Option<E>,
}

/// The run-time scalars of one Adam step.
#[derive(Debug, Clone, Copy)]
pub struct AdamScalars<S> {
    pub lr: S,
    /// `lr / (1 - beta1^step)`.
    pub step_size: S,
    /// `sqrt(1 - beta2^step)`.
    pub bias_correction2_sqrt: S,
}

/// The step counter after this step, `lr / (1 - beta1^step)` and `sqrt(1 - beta2^step)`,
/// in f64 as PyTorch computes them on the host.
#[inline(always)]
pub fn adam_step_scalars<A: UpdateArith>(
    a: &mut A,
    betas: (f64, f64),
    step: A::Step,
    lr: A::Scalar,
) -> (A::Step, A::Scalar, A::Scalar) {
    let step = a.step_increment(step);
    let t = a.step_scalar(step);
    let one = a.scalar_constant(1.0);
    let beta1 = a.scalar_constant(betas.0);
    let beta1_t = a.scalar_binary(BinaryOp::Pow, beta1, t);
    let bias_correction1 = a.scalar_binary(BinaryOp::Sub, one, beta1_t);
    let beta2 = a.scalar_constant(betas.1);
    let beta2_t = a.scalar_binary(BinaryOp::Pow, beta2, t);
    let bias_correction2 = a.scalar_binary(BinaryOp::Sub, one, beta2_t);
    let step_size = a.scalar_binary(BinaryOp::Div, lr, bias_correction1);
    let bias_correction2_sqrt = a.scalar_unary(UnaryOp::Sqrt, bias_correction2);
    (step, step_size, bias_correction2_sqrt)
}

/// One Adam (or AdamW) step of one element.
#[inline(always)]
pub fn adam_update<A: UpdateArith>(
    a: &mut A,
    h: &AdamHyper,
    x: AdamElem<A::Elem>,
    grad: A::Elem,
    s: AdamScalars<A::Scalar>,
) -> AdamElem<A::Elem> {
    let mut g = if h.maximize {
        a.unary(UnaryOp::Neg, grad)
    } else {
        grad
    };
    let mut param = x.param;
    if h.weight_decay != 0.0 {
        if h.decoupled_weight_decay {
            // p *= 1 - lr * weight_decay, the factor in f64.
            let one = a.scalar_constant(1.0);
            let wd = a.scalar_constant(h.weight_decay);
            let lr_wd = a.scalar_binary(BinaryOp::Mul, s.lr, wd);
            let factor = a.scalar_binary(BinaryOp::Sub, one, lr_wd);
            let factor = a.scalar_elem(factor);
            param = a.binary(BinaryOp::Mul, param, factor);
        } else {
            let wd = a.constant(h.weight_decay);
            let decay = a.binary(BinaryOp::Mul, param, wd);
            g = a.binary(BinaryOp::Add, g, decay);
        }
    }
    // exp_avg.lerp_(g, 1 - beta1), in lerp's form for weights below 0.5.
    let diff = a.binary(BinaryOp::Sub, g, x.exp_avg);
    let w1 = a.constant(1.0 - h.beta1);
    let step1 = a.binary(BinaryOp::Mul, diff, w1);
    let exp_avg = a.binary(BinaryOp::Add, x.exp_avg, step1);
    // exp_avg_sq.mul_(beta2).addcmul_(g, g, value=1 - beta2).
    let b2 = a.constant(h.beta2);
    let kept = a.binary(BinaryOp::Mul, x.exp_avg_sq, b2);
    let w2 = a.constant(1.0 - h.beta2);
    let gw = a.binary(BinaryOp::Mul, g, w2);
    let gg = a.binary(BinaryOp::Mul, gw, g);
    let exp_avg_sq = a.binary(BinaryOp::Add, kept, gg);
    let (second_moment, max_exp_avg_sq) = match (h.amsgrad, x.max_exp_avg_sq) {
        (true, Some(max)) => {
            let max = a.binary(BinaryOp::Maximum, max, exp_avg_sq);
            (max, Some(max))
        }
        _ => (exp_avg_sq, None),
    };
    let root = a.unary(UnaryOp::Sqrt, second_moment);
    let bc2 = a.scalar_elem(s.bias_correction2_sqrt);
    let scaled = a.binary(BinaryOp::Div, root, bc2);
    let eps = a.constant(h.eps);
    let denom = a.binary(BinaryOp::Add, scaled, eps);
    // param.addcdiv_(exp_avg, denom, value=-step_size).
    let minus_one = a.scalar_constant(-1.0);
    let neg_step = a.scalar_binary(BinaryOp::Mul, s.step_size, minus_one);
    let neg_step = a.scalar_elem(neg_step);
    let num = a.binary(BinaryOp::Mul, exp_avg, neg_step);
    let delta = a.binary(BinaryOp::Div, num, denom);
    AdamElem {
        param: a.binary(BinaryOp::Add, param, delta),
        exp_avg,
        exp_avg_sq,
        max_exp_avg_sq,
    }
}
