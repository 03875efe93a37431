//! Activation layers: `ReLU`, `LeakyReLU`, `GELU`, `SiLU`, `Sigmoid`, `Tanh`, `Softmax`
//! and `LogSoftmax`, each a thin module over the tensor method of the same name.

use super::python::py_float;
use crate::{Forward, ModuleCore, NnError, Result};
use tessera_tensor::{Tensor, is_grad_enabled, no_grad};

/// Applies `f` in place when `inplace` and autograd allows it (grad mode off, or an input
/// that does not require grad), returning the input; otherwise out of place. Autograd here
/// refuses in-place writes on tensors that require grad, so `inplace` falls back to a new
/// tensor there instead of failing as a PyTorch leaf would. A traced (meta) input has no data
/// to write, so tracing records the out-of-place op.
pub(super) fn maybe_inplace(
    inplace: bool,
    input: Tensor,
    f: impl Fn(&Tensor) -> tessera_tensor::Result<Tensor>,
) -> Result<Tensor> {
    let y = f(&input)?;
    if inplace && !input.is_meta() && !(is_grad_enabled() && input.requires_grad()) {
        let _guard = no_grad();
        input.copy_(&y)?;
        return Ok(input);
    }
    Ok(y)
}

pub(super) fn inplace_repr(inplace: bool, leading: &str) -> String {
    if inplace {
        format!("{leading}inplace=True")
    } else {
        String::new()
    }
}

/// `max(x, 0)`.
#[derive(crate::Module, Default)]
#[module(extra_repr = "repr_args")]
pub struct ReLU {
    core: ModuleCore,
    /// Write the result into the input (see [`ReLU::with_inplace`]).
    pub inplace: bool,
}

impl ReLU {
    pub fn new() -> Self {
        Self::default()
    }

    /// `inplace` writes the result into the input when autograd allows it (grad mode off or
    /// an input without grad), and computes a new tensor otherwise.
    pub fn with_inplace(inplace: bool) -> Self {
        ReLU {
            inplace,
            ..Self::default()
        }
    }

    fn repr_args(&self) -> String {
        inplace_repr(self.inplace, "")
    }
}

impl Forward for ReLU {
    type Output = Tensor;
    fn forward(&self, input: Tensor) -> Result<Tensor> {
        maybe_inplace(self.inplace, input, Tensor::relu)
    }
}

/// `x` where `x > 0`, `negative_slope * x` elsewhere.
#[derive(crate::Module)]
#[module(extra_repr = "repr_args")]
pub struct LeakyReLU {
    core: ModuleCore,
    pub negative_slope: f64,
    pub inplace: bool,
}

impl Default for LeakyReLU {
    fn default() -> Self {
        LeakyReLU::new(0.01)
    }
}

impl LeakyReLU {
    /// PyTorch's default slope is 0.01 (`LeakyReLU::default()`).
    pub fn new(negative_slope: f64) -> Self {
        LeakyReLU {
            core: ModuleCore::default(),
            negative_slope,
            inplace: false,
        }
    }

    pub fn with_inplace(negative_slope: f64, inplace: bool) -> Self {
        LeakyReLU {
            inplace,
            ..LeakyReLU::new(negative_slope)
        }
    }

    fn repr_args(&self) -> String {
        format!(
            "negative_slope={}{}",
            py_float(self.negative_slope),
            inplace_repr(self.inplace, ", ")
        )
    }
}

impl Forward for LeakyReLU {
    type Output = Tensor;
    fn forward(&self, input: Tensor) -> Result<Tensor> {
        let slope = self.negative_slope;
        maybe_inplace(self.inplace, input, |x| x.leaky_relu(slope))
    }
}

/// `x * Phi(x)`, exactly (`approximate='none'`) or with the tanh approximation.
#[derive(crate::Module, Default)]
#[module(name = "GELU", extra_repr = "repr_args")]
pub struct GELU {
    core: ModuleCore,
    /// Whether the tanh approximation is used (`approximate='tanh'`).
    pub tanh: bool,
}

impl GELU {
    pub fn new() -> Self {
        Self::default()
    }

    /// PyTorch's `approximate` argument: `"none"` or `"tanh"`.
    pub fn with_approximate(approximate: &str) -> Result<Self> {
        let tanh = match approximate {
            "none" => false,
            "tanh" => true,
            other => {
                return Err(NnError::Invalid(format!(
                    "GELU: approximate must be 'none' or 'tanh', got '{other}'"
                )));
            }
        };
        Ok(GELU {
            tanh,
            ..Self::default()
        })
    }

    fn repr_args(&self) -> String {
        format!("approximate='{}'", if self.tanh { "tanh" } else { "none" })
    }
}

impl Forward for GELU {
    type Output = Tensor;
    fn forward(&self, input: Tensor) -> Result<Tensor> {
        Ok(if self.tanh {
            input.gelu_tanh()?
        } else {
            input.gelu()?
        })
    }
}

/// Declares a parameter-free activation that applies one tensor method.
macro_rules! simple_activation {
    ($(#[$doc:meta])* $name:ident => $method:ident) => {
        $(#[$doc])*
        #[derive(crate::Module, Default)]
        pub struct $name {
            core: ModuleCore,
        }

        impl $name {
            pub fn new() -> Self {
                Self::default()
            }
        }

        impl Forward for $name {
            type Output = Tensor;
            fn forward(&self, input: Tensor) -> Result<Tensor> {
                Ok(input.$method()?)
            }
        }
    };
}
pub(super) use simple_activation;

simple_activation! {
    /// `x * sigmoid(x)`.
    SiLU => silu
}
simple_activation! {
    /// `1 / (1 + exp(-x))`.
    Sigmoid => sigmoid
}
simple_activation! {
    Tanh => tanh
}

/// Declares a softmax-like layer over one dimension.
macro_rules! dim_activation {
    ($(#[$doc:meta])* $name:ident => $method:ident) => {
        $(#[$doc])*
        #[derive(crate::Module)]
        #[module(extra_repr = "repr_args")]
        pub struct $name {
            core: ModuleCore,
            pub dim: isize,
        }

        impl $name {
            /// Over dimension `dim` (negative counts from the end).
            pub fn new(dim: isize) -> Self {
                $name {
                    core: ModuleCore::default(),
                    dim,
                }
            }

            fn repr_args(&self) -> String {
                format!("dim={}", self.dim)
            }
        }

        impl Forward for $name {
            type Output = Tensor;
            fn forward(&self, input: Tensor) -> Result<Tensor> {
                Ok(input.$method(self.dim)?)
            }
        }
    };
}

dim_activation! {
    /// `exp(x) / sum(exp(x))` along `dim`.
    Softmax => softmax
}
dim_activation! {
    /// `log(softmax(x))` along `dim`, computed stably.
    LogSoftmax => log_softmax
}
