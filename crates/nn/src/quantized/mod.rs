//! Quantized modules, as PyTorch's `torch.ao.nn.quantized`: the dynamic int8 linear, the
//! static int8 linear and conv (with fused ReLU variants) and the min/max observer that
//! calibration runs through. They wrap the `quant` ops of `tessera-tensor` and are built from
//! float layers with `from_float`; none of them has a backward.

mod conv;
mod dynamic_linear;
mod linear;
mod observer;

pub use conv::{QuantizedConv2d, QuantizedConvReLU2d};
pub use dynamic_linear::DynamicQuantizedLinear;
pub use linear::{QuantizedLinear, QuantizedLinearReLU};
pub use observer::MinMaxObserver;

/// The quantization scheme of int8 weights, as PyTorch prints it.
pub(crate) fn qscheme(per_channel: bool) -> &'static str {
    if per_channel {
        "torch.per_channel_affine"
    } else {
        "torch.per_tensor_affine"
    }
}
