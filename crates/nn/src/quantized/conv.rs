//! The static int8 convolutions: `QuantizedConv2d` and `QuantizedConvReLU2d` (PyTorch's
//! `torch.ao.nn.quantized.Conv2d` and `intrinsic.quantized.ConvReLU2d`), im2col plus the
//! int8 GEMM, on u8 tensors with calibrated parameters. Groups other than 1 are refused.

use super::{f32_bias, qscheme, static_operands};
use crate::layers::{Conv2d, py_tuple};
use crate::{Forward, ModuleCore, NnError, Result};
use tessera_tensor::op::quant::{QParams, QuantizedWeight};
use tessera_tensor::op::{ConvParams, QuantOp};
use tessera_tensor::{Op, Tensor};

macro_rules! quantized_conv {
    ($(#[$doc:meta])* $name:ident, relu = $relu:expr) => {
        $(#[$doc])*
        #[derive(crate::Module)]
        #[module(extra_repr = "repr_args")]
        pub struct $name {
            core: ModuleCore,
            pub in_channels: usize,
            pub out_channels: usize,
            pub kernel_size: [usize; 2],
            #[module(skip)]
            pub params: ConvParams,
            /// The int8 weight `[C_out, C_in, kH, kW]`.
            #[module(buffer)]
            pub weight: Tensor,
            /// The weight's scales (`[C_out]` or `[1]`).
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
            /// `conv` with its weight quantized to int8 (symmetric, per output channel or
            /// per tensor), reading u8 input with `input` and writing u8 with `output`.
            pub fn from_float(
                conv: &Conv2d,
                input: QParams,
                output: QParams,
                per_channel: bool,
            ) -> Result<Self> {
                let q = QuantizedWeight::symmetric(&conv.weight, per_channel)?;
                Self::with_weight(conv, q, input, output)
            }

            /// `conv` with the int8 weight `q` (quantization-aware training chose its
            /// parameters) in place of its float one.
            pub fn with_weight(
                conv: &Conv2d,
                q: QuantizedWeight,
                input: QParams,
                output: QParams,
            ) -> Result<Self> {
                let o = &conv.options;
                if o.groups != 1 {
                    return Err(NnError::Invalid(format!(
                        "{}: only groups=1 is supported, got groups={}",
                        stringify!($name),
                        o.groups
                    )));
                }
                let params = ConvParams::conv2d(o.stride.pair(), o.padding.pair(), o.dilation.pair(), 1);
                let bias = f32_bias(conv.bias.as_ref())?;
                Ok($name {
                    core: ModuleCore::default(),
                    in_channels: conv.in_channels,
                    out_channels: conv.out_channels,
                    kernel_size: conv.kernel_size,
                    params,
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

            /// PyTorch's order: sizes, stride, scale, zero point, then non-default padding
            /// and dilation.
            fn repr_args(&self) -> String {
                let p = &self.params;
                let mut s = format!(
                    "{}, {}, kernel_size={}, stride={}, scale={}, zero_point={}",
                    self.in_channels,
                    self.out_channels,
                    py_tuple(&self.kernel_size),
                    py_tuple(&p.stride),
                    self.output.scale,
                    self.output.zero_point
                );
                if p.padding != [0, 0] {
                    s.push_str(&format!(", padding={}", py_tuple(&p.padding)));
                }
                if p.dilation != [1, 1] {
                    s.push_str(&format!(", dilation={}", py_tuple(&p.dilation)));
                }
                s.push_str(&format!(", qscheme={}", qscheme(self.per_channel)));
                s
            }
        }

        impl Forward for $name {
            type Output = Tensor;
            fn forward(&self, input: Tensor) -> Result<Tensor> {
                let op = Op::Quant(QuantOp::Conv2d {
                    params: self.params,
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

quantized_conv!(
    /// Static int8 2-D convolution on u8 tensors.
    QuantizedConv2d,
    relu = false
);
quantized_conv!(
    /// Static int8 2-D convolution with ReLU fused into requantization, on u8 tensors.
    QuantizedConvReLU2d,
    relu = true
);
