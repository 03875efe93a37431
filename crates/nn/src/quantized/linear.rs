//! The static int8 linears: `QuantizedLinear` and `QuantizedLinearReLU` (PyTorch's
//! `torch.ao.nn.quantized.Linear` and `intrinsic.quantized.LinearReLU`). Input and output
//! are u8 with the calibrated scale and zero point; the graph quantizes before and
//! dequantizes after.

use super::{f32_bias, qscheme, static_operands};
use crate::layers::Linear;
use crate::{Forward, ModuleCore, Result};
use tessera_tensor::op::QuantOp;
use tessera_tensor::op::quant::{QParams, QuantizedWeight};
use tessera_tensor::{Op, Tensor};

macro_rules! quantized_linear {
    ($(#[$doc:meta])* $name:ident, relu = $relu:expr) => {
        $(#[$doc])*
        #[derive(crate::Module)]
        #[module(extra_repr = "repr_args")]
        pub struct $name {
            core: ModuleCore,
            pub in_features: usize,
            pub out_features: usize,
            /// The int8 weight `[out_features, in_features]`.
            #[module(buffer)]
            pub weight: Tensor,
            /// The weight's scales (`[out_features]` or `[1]`).
            #[module(buffer)]
            pub weight_scale: Tensor,
            /// The weight's zero points (i64), shaped as `weight_scale`.
            #[module(buffer)]
            pub weight_zero_point: Tensor,
            /// The f32 bias.
            #[module(buffer)]
            pub bias: Option<Tensor>,
            /// The u8 input's parameters.
            #[module(skip)]
            pub input: QParams,
            /// The u8 output's parameters.
            #[module(skip)]
            pub output: QParams,
            #[module(skip)]
            per_channel: bool,
        }

        impl $name {
            /// `linear` with its weight quantized to int8 (symmetric, per channel or per
            /// tensor), reading u8 input with `input` and writing u8 output with `output`.
            pub fn from_float(
                linear: &Linear,
                input: QParams,
                output: QParams,
                per_channel: bool,
            ) -> Result<Self> {
                let q = QuantizedWeight::symmetric(&linear.weight, per_channel)?;
                Self::with_weight(linear, q, input, output)
            }

            /// `linear` with the int8 weight `q` (quantization-aware training chose its
            /// parameters) in place of its float one.
            pub fn with_weight(
                linear: &Linear,
                q: QuantizedWeight,
                input: QParams,
                output: QParams,
            ) -> Result<Self> {
                let bias = f32_bias(linear.bias.as_ref())?;
                Ok($name {
                    core: ModuleCore::default(),
                    in_features: linear.in_features,
                    out_features: linear.out_features,
                    weight: q.weight,
                    weight_scale: q.scales,
                    weight_zero_point: q.zero_points,
                    bias,
                    input,
                    output,
                    per_channel: q.per_channel,
                })
            }

            /// Whether the weight has a scale per output channel (else one for the tensor).
            pub fn per_channel(&self) -> bool {
                self.per_channel
            }

            fn repr_args(&self) -> String {
                format!(
                    "in_features={}, out_features={}, scale={}, zero_point={}, qscheme={}",
                    self.in_features,
                    self.out_features,
                    self.output.scale,
                    self.output.zero_point,
                    qscheme(self.per_channel)
                )
            }
        }

        impl Forward for $name {
            type Output = Tensor;
            fn forward(&self, input: Tensor) -> Result<Tensor> {
                let op = Op::Quant(QuantOp::Linear {
                    x_scale: f64::from(self.input.scale),
                    x_zero_point: self.input.zero_point,
                    out_scale: f64::from(self.output.scale),
                    out_zero_point: self.output.zero_point,
                    relu: $relu,
                    bias: self.bias.is_some(),
                });
                let weight = [&self.weight, &self.weight_scale, &self.weight_zero_point];
                Ok(op.apply1(&static_operands(&input, weight, self.bias.as_ref()))?)
            }
        }
    };
}

quantized_linear!(
    /// Static int8 `y = x W^T + b` on u8 tensors.
    QuantizedLinear,
    relu = false
);
quantized_linear!(
    /// Static int8 `y = relu(x W^T + b)` on u8 tensors, the ReLU fused into requantization.
    QuantizedLinearReLU,
    relu = true
);
