//! Affine layers: `Identity`, `Linear` (`x W^T + b`, also as `NonDynamicallyQuantizableLinear`)
//! and `Bilinear` (`x1^T A x2 + b`).

use super::options::{initialized, optional_parameter, options, parameter};
use super::python::py_bool;
use crate::init::{self, FanMode};
use crate::{Forward, ModuleCore, NnError, Parameter, Result};
use tessera_tensor::{DType, Device, Tensor};

/// Returns its input unchanged (a placeholder, as PyTorch's `nn.Identity`).
#[derive(crate::Module, Default)]
pub struct Identity {
    core: ModuleCore,
}

impl Identity {
    pub fn new() -> Self {
        Self::default()
    }
}

impl Forward for Identity {
    type Output = Tensor;
    fn forward(&self, input: Tensor) -> Result<Tensor> {
        Ok(input)
    }
}

options! {
    /// Options of [`Linear`] and [`Bilinear`].
    LinearOptions {
        /// Whether the layer learns an additive bias.
        bias: bool = true,
        dtype: DType = DType::F32,
        device: Device = Device::Cpu,
    }
}

/// PyTorch's default init of Linear and the convolutions: `kaiming_uniform_(a = sqrt(5))` for
/// the weight, U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for the bias.
pub(crate) fn reset_weight_and_bias(weight: &Tensor, bias: Option<&Parameter>) -> Result<()> {
    init::kaiming_uniform_(weight, 5f64.sqrt(), FanMode::FanIn, "leaky_relu", None)?;
    if let Some(bias) = bias {
        let (fan_in, _) = init::calculate_fan_in_and_fan_out(weight)?;
        if fan_in != 0 {
            let bound = 1.0 / (fan_in as f64).sqrt();
            init::uniform_(bias, -bound, bound, None)?;
        }
    }
    Ok(())
}

/// Declares a `y = x W^T + b` layer named `$name`: `Linear`, and the
/// `NonDynamicallyQuantizableLinear` that `MultiheadAttention` keeps as `out_proj` (the same
/// layer under PyTorch's class name, so reprs and kinds match PyTorch's).
macro_rules! linear_layer {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(crate::Module)]
        #[module(extra_repr = "repr_args")]
        pub struct $name {
            core: ModuleCore,
            pub in_features: usize,
            pub out_features: usize,
            pub weight: Parameter,
            pub bias: Option<Parameter>,
        }

        impl $name {
            pub fn new(in_features: usize, out_features: usize) -> Result<Self> {
                Self::with_options(in_features, out_features, LinearOptions::default())
            }

            pub fn with_options(
                in_features: usize,
                out_features: usize,
                options: LinearOptions,
            ) -> Result<Self> {
                let (dtype, device) = (options.dtype, options.device);
                let layer = $name {
                    core: ModuleCore::default(),
                    in_features,
                    out_features,
                    weight: parameter(&[out_features, in_features], dtype, device)?,
                    bias: optional_parameter(options.bias, &[out_features], dtype, device)?,
                };
                initialized(layer, $name::reset_parameters)
            }

            /// Re-draws the weight and bias with PyTorch's default initialisation.
            pub fn reset_parameters(&self) -> Result<()> {
                reset_weight_and_bias(&self.weight, self.bias.as_ref())
            }

            fn repr_args(&self) -> String {
                format!(
                    "in_features={}, out_features={}, bias={}",
                    self.in_features,
                    self.out_features,
                    py_bool(self.bias.is_some())
                )
            }
        }

        impl Forward for $name {
            type Output = Tensor;
            fn forward(&self, input: Tensor) -> Result<Tensor> {
                Ok(input.linear(&self.weight, self.bias.as_deref())?)
            }
        }
    };
}

linear_layer! {
    /// `y = x W^T + b` over the last dimension; `weight` is `[out_features, in_features]`.
    Linear
}

linear_layer! {
    /// A [`Linear`] under PyTorch's class name for `MultiheadAttention.out_proj` (which
    /// PyTorch keeps out of dynamic quantization); same keys, init and computation.
    NonDynamicallyQuantizableLinear
}

/// `y[.., o] = sum_ij x1[.., i] A[o, i, j] x2[.., j] + b[o]`; `weight` is
/// `[out_features, in1_features, in2_features]`.
#[derive(crate::Module)]
#[module(extra_repr = "repr_args")]
pub struct Bilinear {
    core: ModuleCore,
    pub in1_features: usize,
    pub in2_features: usize,
    pub out_features: usize,
    pub weight: Parameter,
    pub bias: Option<Parameter>,
}

impl Bilinear {
    pub fn new(in1_features: usize, in2_features: usize, out_features: usize) -> Result<Self> {
        Self::with_options(
            in1_features,
            in2_features,
            out_features,
            LinearOptions::default(),
        )
    }

    pub fn with_options(
        in1_features: usize,
        in2_features: usize,
        out_features: usize,
        options: LinearOptions,
    ) -> Result<Self> {
        let (dtype, device) = (options.dtype, options.device);
        let layer = Bilinear {
            core: ModuleCore::default(),
            in1_features,
            in2_features,
            out_features,
            weight: parameter(&[out_features, in1_features, in2_features], dtype, device)?,
            bias: optional_parameter(options.bias, &[out_features], dtype, device)?,
        };
        initialized(layer, Bilinear::reset_parameters)
    }

    /// U(-1/sqrt(in1_features), 1/sqrt(in1_features)) for weight and bias, as PyTorch.
    pub fn reset_parameters(&self) -> Result<()> {
        let bound = 1.0 / (self.in1_features as f64).sqrt();
        init::uniform_(&self.weight, -bound, bound, None)?;
        if let Some(bias) = &self.bias {
            init::uniform_(bias, -bound, bound, None)?;
        }
        Ok(())
    }

    fn repr_args(&self) -> String {
        format!(
            "in1_features={}, in2_features={}, out_features={}, bias={}",
            self.in1_features,
            self.in2_features,
            self.out_features,
            py_bool(self.bias.is_some())
        )
    }
}

impl Forward<(Tensor, Tensor)> for Bilinear {
    type Output = Tensor;
    fn forward(&self, (x1, x2): (Tensor, Tensor)) -> Result<Tensor> {
        let (s1, s2) = (x1.shape(), x2.shape());
        let fits = s1.last() == Some(&self.in1_features)
            && s2.last() == Some(&self.in2_features)
            && s1[..s1.len() - 1] == s2[..s2.len() - 1];
        if !fits {
            return Err(NnError::Invalid(format!(
                "Bilinear: inputs of shapes {s1:?} and {s2:?} do not fit [*, {}] and [*, {}] with equal leading dimensions",
                self.in1_features, self.in2_features
            )));
        }
        let lead = &s1[..s1.len() - 1];
        let batch: usize = lead.iter().product();
        let (i1, i2, out) = (self.in1_features, self.in2_features, self.out_features);
        // A[o, i, j] as [i, o * j], so that x1 @ A gives every (o, j) at once.
        let a = self.weight.permute(&[1, 0, 2])?.reshape(&[i1, out * i2])?;
        let x1a = x1
            .reshape(&[batch, i1])?
            .matmul(&a)?
            .reshape(&[batch, out, i2])?;
        let y = x1a.mul(&x2.reshape(&[batch, 1, i2])?)?.sum(&[-1], false)?;
        let y = match &self.bias {
            Some(b) => y.add(b)?,
            None => y,
        };
        let mut shape = lead.to_vec();
        shape.push(out);
        Ok(y.reshape(&shape)?)
    }
}
