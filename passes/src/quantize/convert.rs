//! `convert_static`: every observed conv(+ReLU) and linear(+ReLU) block becomes
//! `quantize_per_tensor -> quantized module -> dequantize`, with the scale and zero point
//! the block's input and output observers recorded and the weights quantized to int8
//! (symmetric, per output channel unless asked otherwise). A block's input observer may sit
//! behind ops that keep quantization parameters (pooling, flatten: see `InsertObservers`).
//! Then every observer is removed, dequantizes move below max pooling and views, residual
//! adds (and add + ReLU) of two dequantized u8 values whose result is quantized become
//! int8 adds, and each `dequantize -> pooling/flatten -> quantize` round trip with equal
//! parameters is folded, so that the graph stays in u8 between blocks.
//! Blocks without observers on both sides, and convs with groups other than 1, stay float.
//! An observer that never saw a value is an error naming it: calibrate first.
//! A graph prepared for quantization-aware training (`PrepareQat`) converts the same way:
//! its fake quantizers stand for the observers, with the parameters training left in them
//! (observed, or learned and rounded as PyTorch's `calculate_qparams`), and each QAT layer's
//! weight is rounded with its weight fake quantizer's parameters and range.

use super::blocks::{Block, find_blocks};
use super::hoist_dequantize::hoist_dequantize;
use super::observers::is_observer;
use super::quantized_adds::quantize_adds;
use super::round_trips::fold_round_trips;
use super::shared_qparams::through_shared_qparams;
use super::{build_error, module_at};
use crate::{Changed, Pass, PassError, Result};
use tessera_fx::{GraphModule, NodeId, NodeKind};
use tessera_nn::layers::{Conv2d, Linear};
use tessera_nn::quantized::{
    FakeQuantizeBase, MinMaxObserver, QatConv2d, QatLinear, QuantizedConv2d, QuantizedConvReLU2d,
    QuantizedLinear, QuantizedLinearReLU, as_fake_quantize,
};
use tessera_nn::{Module, ModuleExt};
use tessera_tensor::op::QuantOp;
use tessera_tensor::op::quant::QParams;
use tessera_tensor::{DType, Op};

/// Converts observed blocks to static int8 modules and removes the observers.
pub struct ConvertStatic {
    pub per_channel: bool,
}

/// A block with the parameters its observers recorded.
struct Plan {
    block: Block,
    input: QParams,
    output: QParams,
}

/// The observer node and owned module name of a `call_module` observer node.
fn observer_params(gm: &GraphModule, node: &NodeId) -> Result<QParams> {
    let NodeKind::CallModule { target, .. } = &gm.graph.node(node)?.kind else {
        return Err(PassError::Unsupported(format!(
            "{} is not an observer",
            gm.graph.display(node)
        )));
    };
    let module = gm.owned_modules().get(target).map(|m| &**m);
    let not_calibrated = || PassError::NotCalibrated {
        observer: target.clone(),
        node: gm.graph.display(node),
    };
    let read_error = |e| PassError::Unsupported(format!("observer `{target}`: {e}"));
    if let Some(fake_quant) = module.and_then(as_fake_quantize) {
        return fake_quantizer_params(fake_quant, target)?.ok_or_else(not_calibrated);
    }
    let observer = module
        .and_then(|m| m.as_any().downcast_ref::<MinMaxObserver>())
        .ok_or_else(|| {
            PassError::Unsupported(format!("{} is not an observer", gm.graph.display(node)))
        })?;
    if observer.range().map_err(read_error)?.is_none() {
        return Err(not_calibrated());
    }
    observer.qparams().map_err(read_error)
}

/// The per-tensor u8 parameters of an activation fake quantizer called `target`, or `None`
/// when it never observed a value.
fn fake_quantizer_params(
    fake_quant: &dyn FakeQuantizeBase,
    target: &str,
) -> Result<Option<QParams>> {
    let read_error =
        |e: &dyn std::fmt::Display| PassError::Unsupported(format!("observer `{target}`: {e}"));
    if !fake_quant.has_observed().map_err(|e| read_error(&e))? {
        return Ok(None);
    }
    let (quant_min, quant_max) = fake_quant.quant_range();
    if (quant_min, quant_max) != (0, 255) || fake_quant.is_symmetric() {
        let symmetric = if fake_quant.is_symmetric() {
            " symmetric"
        } else {
            ""
        };
        return Err(read_error(&format!(
            "the static int8 ops read and write u8 [0, 255] affine, got [{quant_min}, {quant_max}]{symmetric}"
        )));
    }
    let (scales, zero_points) = fake_quant.calculate_qparams().map_err(|e| read_error(&e))?;
    let scales = scales.to_vec::<f32>().map_err(|e| read_error(&e))?;
    let zero_points = zero_points.to_vec::<i64>().map_err(|e| read_error(&e))?;
    match (scales.as_slice(), zero_points.as_slice()) {
        ([scale], [zero_point]) => Ok(Some(QParams::new(*scale, *zero_point))),
        _ => Err(read_error(&format!(
            "{} scales where a block's input or output takes one",
            scales.len()
        ))),
    }
}

/// The quantized module replacing `block`, or `None` for a layer this pass leaves float.
fn quantized_module(
    gm: &GraphModule,
    plan: &Plan,
    per_channel: bool,
) -> Result<Option<Box<dyn Module>>> {
    let Plan {
        block,
        input,
        output,
    } = plan;
    let (input, output, relu) = (*input, *output, block.relu.is_some());
    let module = module_at(gm, &block.target)?;
    let any = module.as_any();
    let err = |e| build_error("convert_static", &block.target, e);
    if let Some(conv) = any.downcast_ref::<Conv2d>() {
        if conv.options.groups != 1 || conv.weight.dtype() != DType::F32 {
            return Ok(None);
        }
        return Ok(Some(if relu {
            Box::new(
                QuantizedConvReLU2d::from_float(conv, input, output, per_channel).map_err(err)?,
            )
        } else {
            Box::new(QuantizedConv2d::from_float(conv, input, output, per_channel).map_err(err)?)
        }));
    }
    if let Some(linear) = any.downcast_ref::<Linear>() {
        if linear.weight.dtype() != DType::F32 {
            return Ok(None);
        }
        return Ok(Some(if relu {
            Box::new(
                QuantizedLinearReLU::from_float(linear, input, output, per_channel).map_err(err)?,
            )
        } else {
            Box::new(QuantizedLinear::from_float(linear, input, output, per_channel).map_err(err)?)
        }));
    }
    if let Some(qat) = any.downcast_ref::<QatConv2d>() {
        let (conv, weight) = (
            qat.to_float().map_err(err)?,
            qat.quantized_weight().map_err(err)?,
        );
        return Ok(Some(if relu {
            Box::new(QuantizedConvReLU2d::with_weight(&conv, weight, input, output).map_err(err)?)
        } else {
            Box::new(QuantizedConv2d::with_weight(&conv, weight, input, output).map_err(err)?)
        }));
    }
    if let Some(qat) = any.downcast_ref::<QatLinear>() {
        let (linear, weight) = (
            qat.to_float().map_err(err)?,
            qat.quantized_weight().map_err(err)?,
        );
        return Ok(Some(if relu {
            Box::new(QuantizedLinearReLU::with_weight(&linear, weight, input, output).map_err(err)?)
        } else {
            Box::new(QuantizedLinear::with_weight(&linear, weight, input, output).map_err(err)?)
        }));
    }
    Ok(None)
}

impl ConvertStatic {
    /// Every block with an observer on its input (directly or through ops that keep
    /// quantization parameters) and one as the only user of its output.
    fn plans(&self, gm: &GraphModule) -> Result<Vec<Plan>> {
        let mut plans = Vec::new();
        for block in find_blocks(gm)? {
            let Some(input) = gm.graph.operands(&block.layer)?.into_iter().next() else {
                continue;
            };
            let input = through_shared_qparams(gm, &input)?;
            let users = gm.graph.users(block.last())?;
            let [output] = users.as_slice() else {
                continue;
            };
            if !is_observer(gm, &input)? || !is_observer(gm, output)? {
                continue;
            }
            plans.push(Plan {
                input: observer_params(gm, &input)?,
                output: observer_params(gm, output)?,
                block,
            });
        }
        Ok(plans)
    }

    /// `quantize -> module -> dequantize` in place of the block.
    fn convert(&self, gm: &mut GraphModule, plan: &Plan) -> Result<bool> {
        let Some(module) = quantized_module(gm, plan, self.per_channel)? else {
            return Ok(false);
        };
        let block = &plan.block;
        let (kind, repr) = (module.kind(), tessera_nn::repr(module.as_module()));
        let leaf = if block.relu.is_some() { "_relu" } else { "" };
        let name = gm.fresh_name(&format!("{}{leaf}_quantized", block.target));
        // As `convert_fx` swaps the (fused) conv at its path, torch.fx's layout files the
        // quantized module under the conv's path.
        gm.add_owned_module_replacing(&name, module, &block.target)?;
        let Some(x) = gm.graph.operands(&block.layer)?.into_iter().next() else {
            return Ok(false);
        };
        let mut meta = gm.graph.node(block.last())?.meta.clone();
        for m in &mut meta {
            m.dtype = DType::U8;
        }
        let (input, output) = (plan.input, plan.output);
        let dq = gm.graph.insert_before(&block.layer, |g| {
            let q = g.call_function(
                Op::Quant(QuantOp::QuantizePerTensor {
                    scale: f64::from(input.scale),
                    zero_point: input.zero_point,
                    dtype: DType::U8,
                }),
                &[&x],
            )?;
            let y = g.call_module(&name, kind, &repr, &[&q], meta)?;
            g.call_function(
                Op::Quant(QuantOp::DequantizePerTensor {
                    scale: f64::from(output.scale),
                    zero_point: output.zero_point,
                }),
                &[&y],
            )
        })?;
        gm.graph.replace_all_uses_with(block.last(), &dq)?;
        if let Some(relu) = &block.relu {
            gm.graph.erase(relu)?;
        }
        if gm.graph.users(&block.layer)?.is_empty() {
            gm.graph.erase(&block.layer)?;
        }
        Ok(true)
    }
}

/// Makes every user of each observer read the observer's input, erases the observer nodes
/// and their owned modules.
fn remove_observers(gm: &mut GraphModule) -> Result<bool> {
    let mut changed = false;
    let order: Vec<NodeId> = gm.graph.nodes().collect();
    for id in order {
        if !is_observer(gm, &id)? {
            continue;
        }
        let NodeKind::CallModule { target, .. } = gm.graph.node(&id)?.kind.clone() else {
            continue;
        };
        if let Some(input) = gm.graph.operands(&id)?.into_iter().next() {
            gm.graph.replace_all_uses_with(&id, &input)?;
        }
        gm.graph.erase(&id)?;
        gm.remove_owned_module(&target);
        changed = true;
    }
    Ok(changed)
}

impl Pass for ConvertStatic {
    fn name(&self) -> &'static str {
        "convert_static"
    }

    fn run(&self, gm: &mut GraphModule) -> Result<Changed> {
        // Every observer is read before the graph changes: converting one block rewires the
        // observer it shares with the next.
        let plans = self.plans(gm)?;
        let mut changed = false;
        for plan in &plans {
            changed |= self.convert(gm, plan)?;
        }
        changed |= remove_observers(gm)?;
        changed |= hoist_dequantize(gm)?;
        changed |= quantize_adds(gm)?;
        changed |= fold_round_trips(gm)?;
        Ok(Changed::from_bool(changed))
    }
}
