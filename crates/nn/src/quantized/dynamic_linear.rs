//! `DynamicQuantizedLinear`: a linear with int8 weights (per tensor or per output channel)
//! whose input is quantized to u8 on every call from its own min and max, as PyTorch's
//! `torch.ao.nn.quantized.dynamic.Linear` on fbgemm. Input and output are f32.

use super::qscheme;
use crate::layers::Linear;
use crate::{Forward, ModuleCore, Result};
use tessera_tensor::Tensor;
use tessera_tensor::op::quant::{QuantizedWeight, linear_dynamic_int8};

/// `y = dequant(quant(x) @ w_int8^T) + b` with `x` quantized per call.
#[derive(crate::Module)]
#[module(extra_repr = "repr_args")]
pub struct DynamicQuantizedLinear {
    core: ModuleCore,
    pub in_features: usize,
    pub out_features: usize,
    /// The int8 weight `[out_features, in_features]`.
    #[module(buffer)]
    pub weight: Tensor,
    /// The weight's scales, `[out_features]` per channel or `[1]` per tensor.
    #[module(buffer)]
    pub scale: Tensor,
    /// The weight's zero points (i64), shaped as `scale`.
    #[module(buffer)]
    pub zero_point: Tensor,
    /// The f32 bias, kept in float as PyTorch does.
    #[module(buffer)]
    pub bias: Option<Tensor>,
    /// Whether activations use `[0, 127]` instead of `[0, 255]`: on by default, as PyTorch's
    /// x86 (fbgemm) dynamic linear always quantizes them (`reduce_range=True`).
    #[module(skip)]
    pub reduce_range: bool,
    #[module(skip)]
    per_channel: bool,
}

impl DynamicQuantizedLinear {
    /// Quantizes `linear`'s weight symmetrically to int8, per output channel or per tensor;
    /// activations will use PyTorch's x86 range `[0, 127]` (`reduce_range`).
    pub fn from_float(linear: &Linear, per_channel: bool) -> Result<Self> {
        let q = QuantizedWeight::symmetric(&linear.weight, per_channel)?;
        let bias = match &linear.bias {
            Some(b) => Some(b.detach().to_dtype(tessera_tensor::DType::F32)?),
            None => None,
        };
        Ok(DynamicQuantizedLinear {
            core: ModuleCore::default(),
            in_features: linear.in_features,
            out_features: linear.out_features,
            weight: q.weight,
            scale: q.scales,
            zero_point: q.zero_points,
            bias,
            reduce_range: true,
            per_channel,
        })
    }

    /// The int8 weight with its parameters.
    pub fn quantized_weight(&self) -> QuantizedWeight {
        QuantizedWeight {
            weight: self.weight.clone(),
            scales: self.scale.clone(),
            zero_points: self.zero_point.clone(),
            per_channel: self.per_channel,
        }
    }

    fn repr_args(&self) -> String {
        format!(
            "in_features={}, out_features={}, dtype=torch.qint8, qscheme={}",
            self.in_features,
            self.out_features,
            qscheme(self.per_channel)
        )
    }
}

impl Forward for DynamicQuantizedLinear {
    type Output = Tensor;
    fn forward(&self, input: Tensor) -> Result<Tensor> {
        let x = input.detach();
        Ok(linear_dynamic_int8(
            &x,
            &self.quantized_weight(),
            self.bias.as_ref(),
            self.reduce_range,
        )?)
    }
}
