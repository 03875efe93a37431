//! Batch norm folding for inference: eval-mode batch norm after a conv, linear or transposed
//! conv is folded into that layer's weight and bias (see [`formula`]), at module level
//! (`call_module` pairs, [`modules`]) and at op level (`conv2d`/`linear` then `batch_norm`,
//! [`ops`]). Unlike torch.fx's `fuse`, it never changes a module of the traced model: folded
//! layers are new modules or constants the graph module owns, and other uses of the conv (its
//! output read elsewhere, the conv module called again) keep the original. The graph module's
//! state dict keeps the traced model's keys; its torch.fx layout
//! (`GraphModule::fx_state_dict`) has `fuse`'s keys: the folded conv under the conv's path and
//! no batch norm keys. A graph with a training-mode batch norm is refused: its output depends
//! on the batch, not on constants.

pub mod formula;
mod modules;
mod ops;

use crate::lookup::module_at;
use crate::{Changed, Pass, PassError, Result};
use modules::BATCH_NORMS;
use tessera_fx::{GraphModule, NodeKind};
use tessera_nn::ModuleExt;
use tessera_tensor::op::NormOp;

/// Folds eval-mode batch norm into the preceding conv, linear or transposed conv.
pub struct FoldBatchNorm;

impl Pass for FoldBatchNorm {
    fn name(&self) -> &'static str {
        "fold_batch_norm"
    }

    fn run(&self, gm: &mut GraphModule) -> Result<Changed> {
        refuse_training(gm)?;
        let modules = modules::fold_module_pairs(gm)?;
        let ops = ops::fold_op_pairs(gm)?;
        Ok(Changed::from_bool(modules || ops))
    }
}

/// An error if any batch norm of the graph normalises with batch statistics.
fn refuse_training(gm: &GraphModule) -> Result<()> {
    for id in gm.graph.nodes() {
        let node = gm.graph.node(&id)?;
        let reason = match &node.kind {
            NodeKind::CallModule { target, kind, .. }
                if BATCH_NORMS.contains(kind) && module_at(gm, target)?.is_training() =>
            {
                format!(
                    "%{} = call_module[{target}] ({kind}) is in training mode; \
                     call eval() on the model first",
                    node.name
                )
            }
            NodeKind::CallFunction {
                op: tessera_tensor::Op::Norm(NormOp::BatchNorm { training: true, .. }),
            } => format!(
                "%{} = call_function[batch_norm] was traced in training mode; \
                 trace the model after eval()",
                node.name
            ),
            _ => continue,
        };
        return Err(PassError::TrainingMode {
            pass: "fold_batch_norm".into(),
            reason,
        });
    }
    Ok(())
}

/// `e`, prefixed with the module whose weights could not be folded.
fn attribute_error(target: &str, e: PassError) -> PassError {
    PassError::Unsupported(format!("folding batch norm into {target}: {e}"))
}
