//! `FakeQuantizeBase`, as PyTorch's class of that name: what every fake quantizer
//! (`FakeQuantize` with observed parameters, `LearnableFakeQuantize` with trained ones) offers
//! the QAT layers and conversion, and the switches that act on every fake quantizer of a
//! module tree (`enable_observers`, `enable_fake_quant`).

use super::{FakeQuantize, LearnableFakeQuantize};
use crate::{Layer, Module, ModuleExt, Result};
use tessera_tensor::Tensor;

/// A module that fake-quantizes its input to `[quant_min, quant_max]` with parameters it
/// observes or learns.
pub trait FakeQuantizeBase: Layer {
    /// `(quant_min, quant_max)`.
    fn quant_range(&self) -> (i64, i64);
    /// Symmetric parameters (zero point 0) rather than affine ones.
    fn is_symmetric(&self) -> bool;
    /// The dimension with one scale per index, or `None` for one scale for the tensor.
    fn ch_axis(&self) -> Option<usize>;
    /// Whether its observer has seen a value (before that the parameters are placeholders).
    fn has_observed(&self) -> Result<bool>;
    /// PyTorch's `calculate_qparams`: the scales (f32) and integer zero points (i64), one per
    /// channel, that quantized ops use in place of this fake quantizer.
    fn calculate_qparams(&self) -> Result<(Tensor, Tensor)>;
    /// Turns the observer (and the parameter updates it drives) on or off.
    fn enable_observer(&self, on: bool) -> Result<()>;
    /// Turns fake quantization on or off (off: the forward returns its input).
    fn enable_fake_quant(&self, on: bool) -> Result<()>;
}

/// `module` as a fake quantizer, if it is one of Tessera's.
pub fn as_fake_quantize(module: &dyn Module) -> Option<&dyn FakeQuantizeBase> {
    let any = module.as_any();
    if let Some(fq) = any.downcast_ref::<FakeQuantize>() {
        return Some(fq);
    }
    any.downcast_ref::<LearnableFakeQuantize>()
        .map(|fq| fq as &dyn FakeQuantizeBase)
}

/// Turns observation on or off in every fake quantizer of `module` (PyTorch's
/// `module.apply(torch.ao.quantization.disable_observer)` and `enable_observer`).
pub fn enable_observers(module: &dyn Module, on: bool) -> Result<()> {
    each_fake_quantize(module, |fq| fq.enable_observer(on))
}

/// Turns fake quantization on or off in every fake quantizer of `module`.
pub fn enable_fake_quant(module: &dyn Module, on: bool) -> Result<()> {
    each_fake_quantize(module, |fq| fq.enable_fake_quant(on))
}

fn each_fake_quantize(
    module: &dyn Module,
    f: impl Fn(&dyn FakeQuantizeBase) -> Result<()>,
) -> Result<()> {
    let mut result = Ok(());
    module.apply(&mut |m| {
        if let Some(fq) = as_fake_quantize(m)
            && result.is_ok()
        {
            result = f(fq);
        }
    });
    result
}
