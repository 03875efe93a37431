//! Quantized modules, as PyTorch's `torch.ao.nn.quantized`: the dynamic int8 linear, the
//! static int8 linear and conv (with fused ReLU variants) and the min/max observer that
//! calibration runs through. They wrap the `quant` ops of `tessera-tensor` and are built from
//! float layers with `from_float`; none of them has a backward. Quantization-aware training
//! adds the fake quantizers (`FakeQuantize` with observed parameters, `LearnableFakeQuantize`
//! with trained ones, both `FakeQuantizeBase`) and the layers that train through them
//! (`QatConv2d`, `QatLinear`, as `torch.ao.nn.qat`), which do.

mod conv;
mod dynamic_linear;
mod fake_quantize;
mod fake_quantize_base;
mod learnable_fake_quantize;
mod linear;
mod observer;
mod qat_layers;

pub use conv::{QuantizedConv2d, QuantizedConvReLU2d};
pub use dynamic_linear::DynamicQuantizedLinear;
pub use fake_quantize::FakeQuantize;
pub use fake_quantize_base::{
    FakeQuantizeBase, as_fake_quantize, enable_fake_quant, enable_observers,
};
pub use learnable_fake_quantize::{LearnableFakeQuantize, enable_param_learning};
pub use linear::{QuantizedLinear, QuantizedLinearReLU};
pub use observer::MinMaxObserver;
pub use qat_layers::{QatConv2d, QatLinear};

use tessera_tensor::{DType, Tensor};

/// The quantization scheme of int8 weights, as PyTorch prints it.
pub(crate) fn qscheme(per_channel: bool) -> &'static str {
    if per_channel {
        "torch.per_channel_affine"
    } else {
        "torch.per_tensor_affine"
    }
}

/// The f32 bias static int8 ops add to their dequantized accumulators, copied from a float
/// layer's bias.
pub(crate) fn f32_bias(bias: Option<&crate::Parameter>) -> crate::Result<Option<Tensor>> {
    Ok(match bias {
        Some(b) => Some(b.detach().to_dtype(DType::F32)?),
        None => None,
    })
}

/// The operands of a static int8 op, in its order: the u8 input, the int8 weight, its scales
/// and zero points, then the bias if there is one.
pub(crate) fn static_operands<'a>(
    input: &'a Tensor,
    weight: [&'a Tensor; 3],
    bias: Option<&'a Tensor>,
) -> Vec<&'a Tensor> {
    let mut operands = vec![input];
    operands.extend(weight);
    operands.extend(bias);
    operands
}
