//! `prepare_qat`: quantization-aware training's preparation, as PyTorch FX's `prepare_qat_fx`.
//! The layer of every conv(+ReLU) and linear(+ReLU) block becomes a `QatConv2d` or
//! `QatLinear` the graph module owns, sharing the float layer's parameters and fake-quantizing
//! its weight (per-channel symmetric, int8 `[-128, 127]` unless `weight_range` narrows it);
//! then a fake quantizer (u8 `[0, 255]`) is called on each block's input and output where
//! `insert_observers` would put an observer. The fake quantizers are `FakeQuantize` modules
//! (parameters from min/max observers, PyTorch's default QAT qconfig) or, with `learnable`,
//! `LearnableFakeQuantize` modules whose scales and zero points train with the weights (LSQ,
//! gradients scaled by `1 / sqrt(numel * quant_max)`): run calibration batches, then
//! `enable_param_learning`. Training the graph module then trains the float parameters against
//! the rounding, and `convert_static` turns it into the int8 graph with the fake quantizers'
//! parameters. Convs with groups other
//! than 1 and layers of other dtypes than f32 stay float, unobserved on the weight; the traced
//! model's modules are left alone.

use super::blocks::{Block, find_blocks};
use super::observers::observe_blocks;
use super::{build_error, module_at};
use crate::{Changed, Pass, Result};
use tessera_fx::{GraphModule, NodeId};
use tessera_nn::layers::{Conv2d, Linear};
use tessera_nn::quantized::{
    FakeQuantize, FakeQuantizeBase, LearnableFakeQuantize, QatConv2d, QatLinear,
};
use tessera_nn::{Module, ModuleExt};
use tessera_tensor::DType;

/// Prepares a graph module for quantization-aware training.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PrepareQat {
    /// `LearnableFakeQuantize` modules (trained scales and zero points) instead of
    /// `FakeQuantize` ones (observed).
    pub learnable: bool,
    /// The integer range of the weights: `(-128, 127)`, or a narrower one such as `(-8, 7)`
    /// for 4-bit weights that the converted int8 weight holds unchanged.
    pub weight_range: (i64, i64),
}

impl Default for PrepareQat {
    /// PyTorch's default QAT qconfig: observed fake quantizers, int8 weights.
    fn default() -> Self {
        PrepareQat {
            learnable: false,
            weight_range: (-128, 127),
        }
    }
}

impl PrepareQat {
    /// The fake quantizer of a weight with `channels` output channels.
    fn weight_fake_quant(&self, channels: usize) -> tessera_nn::Result<Box<dyn FakeQuantizeBase>> {
        Ok(if self.learnable {
            Box::new(
                LearnableFakeQuantize::weight_per_channel(0, channels, self.weight_range)?
                    .with_grad_scaling(true),
            )
        } else {
            Box::new(FakeQuantize::weight_per_channel(0, self.weight_range)?)
        })
    }

    /// The fake quantizer of a block's input or output.
    fn activation_fake_quant(&self) -> tessera_nn::Result<Box<dyn Module>> {
        Ok(if self.learnable {
            Box::new(LearnableFakeQuantize::activation()?.with_grad_scaling(true))
        } else {
            Box::new(FakeQuantize::activation()?)
        })
    }

    /// The QAT layer replacing `block`'s layer, or `None` for one that stays float.
    fn qat_layer(&self, gm: &GraphModule, block: &Block) -> Result<Option<Box<dyn Module>>> {
        let module = module_at(gm, &block.target)?;
        let any = module.as_any();
        let err = |e| build_error("prepare_qat", &block.target, e);
        if let Some(conv) = any.downcast_ref::<Conv2d>() {
            if conv.options.groups != 1 || conv.weight.dtype() != DType::F32 {
                return Ok(None);
            }
            let fake_quant = self.weight_fake_quant(conv.out_channels).map_err(err)?;
            let layer = QatConv2d::with_weight_fake_quant(conv, fake_quant).map_err(err)?;
            return Ok(Some(Box::new(layer)));
        }
        if let Some(linear) = any.downcast_ref::<Linear>()
            && linear.weight.dtype() == DType::F32
        {
            let fake_quant = self.weight_fake_quant(linear.out_features).map_err(err)?;
            let layer = QatLinear::with_weight_fake_quant(linear, fake_quant).map_err(err)?;
            return Ok(Some(Box::new(layer)));
        }
        Ok(None)
    }
}

/// Calls `layer` (owned, named after `block`'s target) in place of `block`'s layer.
fn swap(gm: &mut GraphModule, block: &Block, layer: Box<dyn Module>) -> Result<()> {
    let (kind, repr) = (layer.kind(), tessera_nn::one_line_repr(layer.as_module()));
    let name = gm.fresh_name(&format!("{}_qat", block.target));
    gm.add_owned_module(&name, layer)?;
    let operands = gm.graph.operands(&block.layer)?;
    let meta = gm.graph.node(&block.layer)?.meta.clone();
    let new = gm.graph.insert_before(&block.layer, |g| {
        let refs: Vec<&NodeId> = operands.iter().collect();
        g.call_module(&name, kind, &repr, &refs, meta)
    })?;
    gm.graph.replace_all_uses_with(&block.layer, &new)?;
    gm.graph.erase(&block.layer)?;
    Ok(())
}

impl Pass for PrepareQat {
    fn name(&self) -> &'static str {
        "prepare_qat"
    }

    fn run(&self, gm: &mut GraphModule) -> Result<Changed> {
        let mut changed = false;
        for block in find_blocks(gm)? {
            if let Some(layer) = self.qat_layer(gm, &block)? {
                swap(gm, &block, layer)?;
                changed = true;
            }
        }
        changed |= observe_blocks(gm, "fake_quant", &|| self.activation_fake_quant())?;
        Ok(Changed::from_bool(changed))
    }
}
