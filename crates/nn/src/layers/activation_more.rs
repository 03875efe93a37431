//! More activation layers: `ReLU6`, `Hardswish`, `Hardsigmoid`, `ELU`, `Softplus` (each one
//! unary op of the op table), `Mish` (composed as `x * tanh(softplus(x))`) and `PReLU` (a
//! learned slope per channel, composed from `where`).

use super::activation::{inplace_repr, maybe_inplace, simple_activation};
use super::options::{initialized, options, parameter};
use super::python::py_float;
use crate::{Forward, ModuleCore, NnError, Parameter, Result};
use tessera_tensor::{DType, Device, Tensor};

/// `min(max(x, 0), 6)`; the gradient is 1 strictly between 0 and 6.
#[derive(crate::Module, Default)]
#[module(name = "ReLU6", extra_repr = "repr_args")]
pub struct ReLU6 {
    core: ModuleCore,
    /// Write the result into the input when autograd allows it (as `ReLU::with_inplace`).
    pub inplace: bool,
}

impl ReLU6 {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn with_inplace(inplace: bool) -> Self {
        ReLU6 {
            inplace,
            ..Self::default()
        }
    }

    fn repr_args(&self) -> String {
        inplace_repr(self.inplace, "")
    }
}

impl Forward for ReLU6 {
    type Output = Tensor;
    fn forward(&self, input: Tensor) -> Result<Tensor> {
        maybe_inplace(self.inplace, input, Tensor::relu6)
    }
}

simple_activation! {
    /// `x * relu6(x + 3) / 6`; the gradient is 0 at -3 and 1 at 3, as PyTorch's.
    Hardswish => hardswish
}
simple_activation! {
    /// `relu6(x + 3) / 6`; the gradient is 1/6 strictly between -3 and 3.
    Hardsigmoid => hardsigmoid
}
simple_activation! {
    /// `x * tanh(softplus(x))`.
    Mish => mish
}

/// `x` where `x > 0`, `alpha * (exp(x) - 1)` elsewhere (the gradient at 0 is `alpha`).
#[derive(crate::Module)]
#[module(name = "ELU", extra_repr = "repr_args")]
pub struct ELU {
    core: ModuleCore,
    pub alpha: f64,
    pub inplace: bool,
}

impl Default for ELU {
    /// PyTorch's `ELU()`: `alpha = 1.0`.
    fn default() -> Self {
        ELU::new(1.0)
    }
}

impl ELU {
    pub fn new(alpha: f64) -> Self {
        ELU {
            core: ModuleCore::default(),
            alpha,
            inplace: false,
        }
    }

    pub fn with_inplace(alpha: f64, inplace: bool) -> Self {
        ELU {
            inplace,
            ..ELU::new(alpha)
        }
    }

    fn repr_args(&self) -> String {
        format!(
            "alpha={}{}",
            py_float(self.alpha),
            inplace_repr(self.inplace, ", ")
        )
    }
}

impl Forward for ELU {
    type Output = Tensor;
    fn forward(&self, input: Tensor) -> Result<Tensor> {
        let alpha = self.alpha;
        maybe_inplace(self.inplace, input, |x| x.elu(alpha))
    }
}

/// `log(1 + exp(beta * x)) / beta`, and `x` where `beta * x > threshold` (strictly).
#[derive(crate::Module)]
#[module(extra_repr = "repr_args")]
pub struct Softplus {
    core: ModuleCore,
    pub beta: f64,
    pub threshold: f64,
}

impl Default for Softplus {
    /// PyTorch's `Softplus()`: `beta = 1.0, threshold = 20.0`.
    fn default() -> Self {
        Softplus::new(1.0, 20.0)
    }
}

impl Softplus {
    pub fn new(beta: f64, threshold: f64) -> Self {
        Softplus {
            core: ModuleCore::default(),
            beta,
            threshold,
        }
    }

    fn repr_args(&self) -> String {
        format!(
            "beta={}, threshold={}",
            py_float(self.beta),
            py_float(self.threshold)
        )
    }
}

impl Forward for Softplus {
    type Output = Tensor;
    fn forward(&self, input: Tensor) -> Result<Tensor> {
        Ok(input.softplus(self.beta, self.threshold)?)
    }
}

options! {
    /// Options of [`PReLU`]: the initial slope and the parameter's dtype and device.
    PReLUOptions {
        init: f64 = 0.25,
        dtype: DType = DType::F32,
        device: Device = Device::Cpu,
    }
}

/// `x` where `x > 0`, `a * x` elsewhere, with a learned slope `weight` shared by all
/// channels (`num_parameters = 1`) or one per channel (dim 1 of the input; the gradient at
/// 0 is the slope).
#[derive(crate::Module)]
#[module(name = "PReLU", extra_repr = "repr_args")]
pub struct PReLU {
    core: ModuleCore,
    pub num_parameters: usize,
    #[module(skip)]
    pub options: PReLUOptions,
    pub weight: Parameter,
}

impl PReLU {
    /// `num_parameters` slopes (PyTorch's default is 1), each starting at 0.25.
    pub fn new(num_parameters: usize) -> Result<Self> {
        Self::with_options(num_parameters, PReLUOptions::default())
    }

    pub fn with_options(num_parameters: usize, options: PReLUOptions) -> Result<Self> {
        if num_parameters == 0 {
            return Err(NnError::Invalid(
                "PReLU: num_parameters must be positive".into(),
            ));
        }
        let layer = PReLU {
            core: ModuleCore::default(),
            num_parameters,
            weight: parameter(&[num_parameters], options.dtype, options.device)?,
            options,
        };
        initialized(layer, PReLU::reset_parameters)
    }

    /// Sets every slope to `options.init`.
    pub fn reset_parameters(&self) -> Result<()> {
        crate::init::constant_(&self.weight, self.options.init)
    }

    fn repr_args(&self) -> String {
        format!("num_parameters={}", self.num_parameters)
    }

    /// The slopes shaped to broadcast against `input` (along dim 1, or dim 0 of a 1-D input).
    fn slopes_for(&self, input: &Tensor) -> Result<Tensor> {
        let shape = input.shape();
        if self.num_parameters == 1 {
            return Ok(self.weight.reshape(&[])?);
        }
        let channel_dim = usize::from(shape.len() >= 2);
        match shape.get(channel_dim) {
            Some(&c) if c == self.num_parameters => {
                let mut view = vec![1; shape.len()];
                view[channel_dim] = c;
                Ok(self.weight.reshape(&view)?)
            }
            _ => Err(NnError::Invalid(format!(
                "PReLU: expected {} channels at dim {channel_dim}, but got input of size {shape:?}",
                self.num_parameters
            ))),
        }
    }
}

impl Forward for PReLU {
    type Output = Tensor;
    fn forward(&self, input: Tensor) -> Result<Tensor> {
        let slopes = self.slopes_for(&input)?;
        let positive = input.gt_scalar(0.0)?;
        Ok(Tensor::where_(&positive, &input, &input.mul(&slopes)?)?)
    }
}
