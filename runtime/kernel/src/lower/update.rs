//! Lowering of the multi-output elementwise ops, the optimizer updates ([`OptimOp`]): each
//! output (new parameter and state) is a value of the kernel over the parameter's shape, which
//! loads the parameter, gradient and state, reads the run-time scalars (learning rate, step
//! size) as zero-stride loads and stores every output; Adam's step scalars are a kernel over
//! no dimensions. Fusion grouping lets an update end a group, so its kernel may start with the
//! elementwise ops computing its gradient ([`Lowering::frame_partition`]) or with the GEMM
//! computing it (the GEMM's epilogue, [`super::gemm`]): the gradient is then never stored. The
//! formulas are the op table's ([`crate::lower_update`]); what the kernel IR cannot express
//! (half parameters) runs the eager kernel.

use super::Lowering;
use super::frame::{Frame, FrameMap};
use crate::{KernelBuilder, Result, ScalarType, ValueId, lower_elementwise, lower_update};
use std::collections::HashSet;
use tessera_fx::NodeId;
use tessera_tensor::op::OptimOp;
use tessera_tensor::{Op, TensorMeta};

/// The values of the elementwise `op` on `operands`, one per output of `outputs`: the one
/// value of a single-output op, each output of an optimizer update; or why the kernel IR
/// cannot express it.
pub(super) fn member_values(
    op: &Op,
    b: &mut KernelBuilder,
    operands: &[ValueId],
    outputs: &[TensorMeta],
) -> std::result::Result<Vec<ValueId>, String> {
    let Some(first) = outputs.first() else {
        return Err("the node has no value".into());
    };
    let values = match op {
        Op::Optim(update) => {
            // The type the parameter computes in (Adam's step scalars have no parameter).
            let ty = match update {
                OptimOp::AdamStepScalars { .. } => ScalarType::F64,
                _ => ScalarType::of_buffer(first.dtype)
                    .ok_or_else(|| format!("{:?} parameters are not lowered", first.dtype))?,
            };
            lower_update(update, b, operands, ty)?
        }
        _ => {
            let ty = ScalarType::of_value(first.dtype)
                .ok_or_else(|| format!("{:?} values are not lowered", first.dtype))?;
            vec![lower_elementwise(op, b, operands, ty)?]
        }
    };
    if values.len() != outputs.len() {
        return Err(format!(
            "{} values for {} outputs",
            values.len(),
            outputs.len()
        ));
    }
    Ok(values)
}

impl Lowering<'_> {
    /// The elementwise `members` of one partition, the last a multi-output node (an update,
    /// alone or after the ops computing its gradient), as one kernel over its shape; the inner
    /// error says why the kernel IR cannot express it (nothing was emitted then).
    pub(super) fn frame_partition(
        &mut self,
        members: &[NodeId],
    ) -> Result<std::result::Result<(), String>> {
        let Some(last) = members.last() else {
            return Ok(Ok(()));
        };
        let Some(domain) = self.meta(last)?.first().map(|m| m.shape.clone()) else {
            return Ok(Err("the node has no value".into()));
        };
        let name = self.kernel_name(members);
        let mut k = Frame::new(KernelBuilder::new(name, domain.clone()));
        let map: FrameMap = (0..domain.len()).map(Some).collect();
        for m in members {
            if let Err(why) = self.elementwise_member(&mut k, m, &domain, &map)? {
                return Ok(Err(why));
            }
        }
        let fused: HashSet<NodeId> = members.iter().copied().collect();
        self.emit_frame(k, members, &fused)
    }
}
