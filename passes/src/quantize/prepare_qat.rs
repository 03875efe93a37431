//! `prepare_qat`: quantization-aware training's preparation, as PyTorch FX's `prepare_qat_fx`.
//! The layer of every conv(+ReLU) and linear(+ReLU) block becomes a `QatConv2d` or
//! `QatLinear` the graph module owns, sharing the float layer's parameters and fake-quantizing
//! its weight (per-channel symmetric int8); then a `FakeQuantize` (u8 `[0, 255]`) is called on
//! each block's input and output where `insert_observers` would put an observer. Training the
//! graph module then trains the float parameters against int8 rounding, and `convert_static`
//! turns it into the int8 graph with the fake quantizers' parameters. Convs with groups other
//! than 1 and layers of other dtypes than f32 stay float, unobserved on the weight; the traced
//! model's modules are left alone.

use super::blocks::{Block, find_blocks};
use super::observers::observe_blocks;
use super::{build_error, module_at};
use crate::{Changed, Pass, Result};
use tessera_fx::{GraphModule, NodeId};
use tessera_nn::layers::{Conv2d, Linear};
use tessera_nn::quantized::{FakeQuantize, QatConv2d, QatLinear};
use tessera_nn::{Module, ModuleExt};
use tessera_tensor::DType;

/// Prepares a graph module for quantization-aware training.
pub struct PrepareQat;

/// The QAT layer replacing `block`'s layer, or `None` for one that stays float.
fn qat_layer(gm: &GraphModule, block: &Block) -> Result<Option<Box<dyn Module>>> {
    let module = module_at(gm, &block.target)?;
    let any = module.as_any();
    let err = |e| build_error("prepare_qat", &block.target, e);
    if let Some(conv) = any.downcast_ref::<Conv2d>() {
        if conv.options.groups != 1 || conv.weight.dtype() != DType::F32 {
            return Ok(None);
        }
        return Ok(Some(Box::new(QatConv2d::from_float(conv).map_err(err)?)));
    }
    if let Some(linear) = any.downcast_ref::<Linear>()
        && linear.weight.dtype() == DType::F32
    {
        return Ok(Some(Box::new(QatLinear::from_float(linear).map_err(err)?)));
    }
    Ok(None)
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
            if let Some(layer) = qat_layer(gm, &block)? {
                swap(gm, &block, layer)?;
                changed = true;
            }
        }
        changed |= observe_blocks(gm, "fake_quant", &|| {
            Ok(Box::new(FakeQuantize::activation()?) as Box<dyn Module>)
        })?;
        Ok(Changed::from_bool(changed))
    }
}
