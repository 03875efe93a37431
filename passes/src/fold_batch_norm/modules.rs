//! Module-level folding: `call_module[bn](call_module[conv](x))` becomes one call of a new
//! conv the graph module owns, whose weight and bias have the batch norm folded in. The traced
//! model's modules are never changed, so a conv also called elsewhere, or whose output has
//! other users, keeps working there: those uses still call the original. The new conv is
//! recorded as replacing the conv, so [`GraphModule::fx_state_dict`] keys it as `fuse` does.

use super::attribute_error;
use super::formula::{BatchNormStats, WeightLayout, fold};
use crate::lookup::module_at;
use crate::{PassError, Result};
use tessera_fx::{GraphModule, NodeId, NodeKind};
use tessera_nn::init::skip_init;
use tessera_nn::layers::{
    BatchNorm1d, BatchNorm2d, Conv1d, Conv2d, ConvTranspose2d, Linear, LinearOptions,
};
use tessera_nn::{Module, ModuleExt, ModuleKind, Parameter};
use tessera_tensor::Tensor;

/// The module kinds folding understands as batch norms.
pub(super) const BATCH_NORMS: [ModuleKind; 2] = [ModuleKind::BatchNorm1d, ModuleKind::BatchNorm2d];

/// The eval-mode statistics of a batch norm module; `None` for one without running
/// statistics (`track_running_stats=False` normalises with batch statistics even in eval).
fn batch_norm_stats(module: &dyn Module) -> Result<Option<BatchNormStats>> {
    macro_rules! stats_of {
        ($bn:expr) => {{
            let bn = $bn;
            let (Some(mean), Some(var)) = (&bn.running_mean, &bn.running_var) else {
                return Ok(None);
            };
            let gamma = bn.weight.as_ref().map(|p| p.tensor());
            let beta = bn.bias.as_ref().map(|p| p.tensor());
            BatchNormStats::from_tensors(mean, var, gamma, beta, bn.options.eps).map(Some)
        }};
    }
    let any = module.as_any();
    if let Some(bn) = any.downcast_ref::<BatchNorm2d>() {
        return stats_of!(bn);
    }
    if let Some(bn) = any.downcast_ref::<BatchNorm1d>() {
        return stats_of!(bn);
    }
    Ok(None)
}

fn parameter(t: Tensor) -> Parameter {
    Parameter::new(t)
}

fn build_error(e: tessera_nn::NnError) -> PassError {
    PassError::Unsupported(format!("building the folded module: {e}"))
}

/// A copy of the conv `$conv` (of layer type `$layer`, with `in_channels`, `out_channels`,
/// `kernel_size` and `options`) with `$stats` folded into its weight laid out as `$layout`,
/// built without drawing a default initialisation that the folded weights replace.
macro_rules! folded_conv {
    ($conv:expr, $layer:ty, $layout:expr, $stats:expr) => {{
        let c = $conv;
        let (w, b) = fold(&c.weight, c.bias.as_deref(), $stats, $layout)?;
        let options = c.options.clone().bias(true).dtype(w.dtype());
        let mut f = skip_init(|| {
            <$layer>::with_options(c.in_channels, c.out_channels, c.kernel_size, options)
        })
        .map_err(build_error)?;
        (f.weight, f.bias) = (parameter(w), Some(parameter(b)));
        Box::new(f) as Box<dyn Module>
    }};
}

/// A copy of `conv` with `stats` folded in, when the pair folds: Conv1d and Linear (with a
/// 2-D output) before BatchNorm1d, Conv2d and ConvTranspose2d before BatchNorm2d.
fn fused_module(
    conv: &dyn Module,
    bn_kind: &ModuleKind,
    output_rank: usize,
    stats: &BatchNormStats,
) -> Result<Option<Box<dyn Module>>> {
    let any = conv.as_any();
    let fused: Box<dyn Module> = match bn_kind {
        ModuleKind::BatchNorm2d => {
            if let Some(c) = any.downcast_ref::<Conv2d>() {
                folded_conv!(c, Conv2d, WeightLayout::OutputFirst, stats)
            } else if let Some(c) = any.downcast_ref::<ConvTranspose2d>() {
                let layout = WeightLayout::Transposed {
                    groups: c.options.groups,
                };
                folded_conv!(c, ConvTranspose2d, layout, stats)
            } else {
                return Ok(None);
            }
        }
        ModuleKind::BatchNorm1d => {
            if let Some(c) = any.downcast_ref::<Conv1d>() {
                folded_conv!(c, Conv1d, WeightLayout::OutputFirst, stats)
            } else if let Some(l) = any.downcast_ref::<Linear>() {
                // BatchNorm1d normalises dim 1, which is the linear's features only for 2-D output.
                if output_rank != 2 {
                    return Ok(None);
                }
                let (w, b) = fold(
                    &l.weight,
                    l.bias.as_deref(),
                    stats,
                    WeightLayout::OutputFirst,
                )?;
                let options = LinearOptions::default().dtype(w.dtype());
                let mut f =
                    skip_init(|| Linear::with_options(l.in_features, l.out_features, options))
                        .map_err(build_error)?;
                (f.weight, f.bias) = (parameter(w), Some(parameter(b)));
                Box::new(f)
            } else {
                return Ok(None);
            }
        }
        _ => return Ok(None),
    };
    tessera_nn::ModuleExt::eval(fused.as_module());
    Ok(Some(fused))
}

/// Folds every `call_module` batch norm whose operand is a foldable `call_module`; returns
/// whether anything changed.
pub(super) fn fold_module_pairs(gm: &mut GraphModule) -> Result<bool> {
    let order: Vec<NodeId> = gm.graph.nodes().collect();
    let mut changed = false;
    for bn_id in order {
        let NodeKind::CallModule {
            target: bn_target,
            kind: bn_kind,
            ..
        } = gm.graph.node(&bn_id)?.kind.clone()
        else {
            continue;
        };
        if !BATCH_NORMS.contains(&bn_kind) {
            continue;
        }
        let Ok([conv_id]) = <[NodeId; 1]>::try_from(gm.graph.operands(&bn_id)?) else {
            continue;
        };
        let conv_node = gm.graph.node(&conv_id)?;
        let NodeKind::CallModule {
            target: conv_target,
            ..
        } = conv_node.kind.clone()
        else {
            continue;
        };
        let output_rank = conv_node.meta.first().map_or(0, |m| m.shape.len());
        let Ok([input]) = <[NodeId; 1]>::try_from(gm.graph.operands(&conv_id)?) else {
            continue;
        };
        let Some(stats) = batch_norm_stats(module_at(gm, &bn_target)?)? else {
            continue;
        };
        let conv = module_at(gm, &conv_target)?;
        let Some(fused) = fused_module(conv, &bn_kind, output_rank, &stats)
            .map_err(|e| attribute_error(&conv_target, e))?
        else {
            continue;
        };
        let leaf = bn_target.rsplit('.').next().unwrap_or(&bn_target);
        let name = gm.fresh_name(&format!("{conv_target}_{leaf}"));
        let (fused_kind, repr) = (fused.kind(), tessera_nn::repr(fused.as_module()));
        // torch.fx's `fuse` puts the folded conv in the conv's place: its layout does too,
        // once no node calls the conv any more.
        gm.add_owned_module_replacing(&name, fused, &conv_target)?;
        let meta = gm.graph.node(&bn_id)?.meta.clone();
        let folded = gm.graph.insert_before(&bn_id, |g| {
            g.call_module(&name, fused_kind, &repr, &[&input], meta)
        })?;
        gm.graph.replace_all_uses_with(&bn_id, &folded)?;
        gm.graph.erase(&bn_id)?;
        if gm.graph.users(&conv_id)?.is_empty() {
            gm.graph.erase(&conv_id)?;
        }
        changed = true;
    }
    Ok(changed)
}
