//! The layers quantization-aware training swaps in: `QatConv2d` and `QatLinear` (PyTorch's
//! `torch.ao.nn.qat.Conv2d` and `Linear`) compute as the float layer whose parameters they
//! share, with the weight passed through a fake quantizer (`weight_fake_quant`: a
//! `FakeQuantize` by default, or a `LearnableFakeQuantize`), so that an optimizer of the float
//! parameters trains them against int8 rounding. Their int8 weight for conversion is the
//! fake-quantized weight, rounded with that fake quantizer's parameters and range.

use super::{FakeQuantize, FakeQuantizeBase};
use crate::layers::{Conv2d, Conv2dOptions, Linear, LinearOptions};
use crate::{Forward, ModuleCore, Parameter, Result};
use tessera_tensor::op::quant::QuantizedWeight;
use tessera_tensor::op::{fake_quantize_per_channel_affine, fake_quantize_per_tensor_affine};
use tessera_tensor::{Tensor, functional, no_grad};

/// The int8 weight `fake_quant` stands for: the weight observed once more (when observation
/// is on, as PyTorch's convert does), rounded to `[quant_min, quant_max]` with the fake
/// quantizer's parameters (a 4-bit range stays 4-bit in the int8 weight).
fn quantized_weight(
    weight: &Parameter,
    fake_quant: &dyn FakeQuantizeBase,
) -> Result<QuantizedWeight> {
    let _guard = no_grad();
    fake_quant.forward(weight.detach())?;
    let (scales, zero_points) = fake_quant.calculate_qparams()?;
    let (qmin, qmax) = fake_quant.quant_range();
    let w = weight.detach();
    let on_grid = match fake_quant.ch_axis() {
        Some(axis) => {
            fake_quantize_per_channel_affine(&w, &scales, &zero_points, axis, qmin, qmax)?
        }
        None => fake_quantize_per_tensor_affine(&w, &scales, &zero_points, qmin, qmax)?,
    };
    Ok(QuantizedWeight::with_qparams(
        &on_grid,
        &scales,
        &zero_points,
    )?)
}

/// A 2-D convolution training against its int8-rounded weight.
#[derive(crate::Module)]
#[module(extra_repr = "repr_args")]
pub struct QatConv2d {
    core: ModuleCore,
    pub in_channels: usize,
    pub out_channels: usize,
    pub kernel_size: [usize; 2],
    #[module(skip)]
    pub options: Conv2dOptions,
    /// The float layer's weight (the same tensor).
    pub weight: Parameter,
    /// The float layer's bias (the same tensor).
    pub bias: Option<Parameter>,
    /// Per-output-channel symmetric fake quantization of the weight.
    pub weight_fake_quant: Box<dyn FakeQuantizeBase>,
}

impl QatConv2d {
    /// `conv` with its parameters shared and a fresh int8 `FakeQuantize` of its weight.
    pub fn from_float(conv: &Conv2d) -> Result<Self> {
        let fake_quant = FakeQuantize::weight_per_channel(0, (-128, 127))?;
        QatConv2d::with_weight_fake_quant(conv, Box::new(fake_quant))
    }

    /// `conv` with its parameters shared and its weight fake-quantized by `fake_quant`.
    pub fn with_weight_fake_quant(
        conv: &Conv2d,
        fake_quant: Box<dyn FakeQuantizeBase>,
    ) -> Result<Self> {
        Ok(QatConv2d {
            core: ModuleCore::default(),
            in_channels: conv.in_channels,
            out_channels: conv.out_channels,
            kernel_size: conv.kernel_size,
            options: conv.options.clone(),
            weight: conv.weight.clone(),
            bias: conv.bias.clone(),
            weight_fake_quant: fake_quant,
        })
    }

    /// A float `Conv2d` sharing this layer's parameters (no fake quantization).
    pub fn to_float(&self) -> Result<Conv2d> {
        let mut conv = Conv2d::with_options(
            self.in_channels,
            self.out_channels,
            self.kernel_size,
            self.options.clone(),
        )?;
        conv.weight = self.weight.clone();
        conv.bias = self.bias.clone();
        Ok(conv)
    }

    /// The int8 weight with the parameters the weight fake quantizer learned.
    pub fn quantized_weight(&self) -> Result<QuantizedWeight> {
        quantized_weight(&self.weight, &*self.weight_fake_quant)
    }

    fn repr_args(&self) -> String {
        float_repr_args(self.to_float())
    }
}

/// The float layer's repr arguments, or `?` when it cannot be rebuilt.
fn float_repr_args<M: crate::Module>(layer: Result<M>) -> String {
    layer.map_or_else(|_| "?".into(), |m| m.extra_repr())
}

impl Forward for QatConv2d {
    type Output = Tensor;
    fn forward(&self, input: Tensor) -> Result<Tensor> {
        let o = &self.options;
        let weight = self
            .weight_fake_quant
            .forward(self.weight.tensor().clone())?;
        Ok(functional::conv2d(
            &input,
            &weight,
            self.bias.as_deref(),
            o.stride.pair(),
            o.padding.pair(),
            o.dilation.pair(),
            o.groups,
        )?)
    }
}

/// A linear layer training against its int8-rounded weight.
#[derive(crate::Module)]
#[module(extra_repr = "repr_args")]
pub struct QatLinear {
    core: ModuleCore,
    pub in_features: usize,
    pub out_features: usize,
    /// The float layer's weight (the same tensor).
    pub weight: Parameter,
    /// The float layer's bias (the same tensor).
    pub bias: Option<Parameter>,
    /// Per-output-channel symmetric fake quantization of the weight.
    pub weight_fake_quant: Box<dyn FakeQuantizeBase>,
}

impl QatLinear {
    /// `linear` with its parameters shared and a fresh int8 `FakeQuantize` of its weight.
    pub fn from_float(linear: &Linear) -> Result<Self> {
        let fake_quant = FakeQuantize::weight_per_channel(0, (-128, 127))?;
        QatLinear::with_weight_fake_quant(linear, Box::new(fake_quant))
    }

    /// `linear` with its parameters shared and its weight fake-quantized by `fake_quant`.
    pub fn with_weight_fake_quant(
        linear: &Linear,
        fake_quant: Box<dyn FakeQuantizeBase>,
    ) -> Result<Self> {
        Ok(QatLinear {
            core: ModuleCore::default(),
            in_features: linear.in_features,
            out_features: linear.out_features,
            weight: linear.weight.clone(),
            bias: linear.bias.clone(),
            weight_fake_quant: fake_quant,
        })
    }

    /// A float `Linear` sharing this layer's parameters (no fake quantization).
    pub fn to_float(&self) -> Result<Linear> {
        let options = LinearOptions::default()
            .bias(self.bias.is_some())
            .dtype(self.weight.dtype());
        let mut linear = Linear::with_options(self.in_features, self.out_features, options)?;
        linear.weight = self.weight.clone();
        linear.bias = self.bias.clone();
        Ok(linear)
    }

    /// The int8 weight with the parameters the weight fake quantizer learned.
    pub fn quantized_weight(&self) -> Result<QuantizedWeight> {
        quantized_weight(&self.weight, &*self.weight_fake_quant)
    }

    fn repr_args(&self) -> String {
        float_repr_args(self.to_float())
    }
}

impl Forward for QatLinear {
    type Output = Tensor;
    fn forward(&self, input: Tensor) -> Result<Tensor> {
        let weight = self
            .weight_fake_quant
            .forward(self.weight.tensor().clone())?;
        Ok(input.linear(&weight, self.bias.as_deref())?)
    }
}
