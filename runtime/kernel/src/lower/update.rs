//! Lowering of the optimizer update ops ([`OptimOp`]): one kernel over the parameter's shape
//! that loads the parameter, gradient and state, reads the run-time scalars (learning rate,
//! step size) as zero-stride loads, and stores every output (new parameter and state), or,
//! for Adam's step scalars, one kernel over no dimensions. The formulas are the op table's
//! ([`crate::lower_update`]); what the kernel IR cannot express (half parameters) runs the
//! eager kernel.

use super::Lowering;
use super::frame::{Frame, FrameMap, Local};
use crate::{ExternalCall, KernelBuilder, Result, ScalarType, lower_update};
use std::collections::HashSet;
use tessera_fx::NodeId;
use tessera_tensor::Op;
use tessera_tensor::op::OptimOp;

impl Lowering<'_> {
    /// Lowers the update node `id` to one kernel, or runs its eager kernel (reported as a
    /// fallback) when the kernel IR cannot express it.
    pub(super) fn update(&mut self, id: &NodeId, op: &OptimOp) -> Result<()> {
        if let Err(why) = self.update_kernel(id, op)? {
            self.external(
                id,
                ExternalCall::Op(Op::Optim(op.clone())),
                Some(format!("not generated: {why}")),
            )?;
        }
        Ok(())
    }

    fn update_kernel(
        &mut self,
        id: &NodeId,
        op: &OptimOp,
    ) -> Result<std::result::Result<(), String>> {
        let metas = self.meta(id)?;
        let Some(first) = metas.first() else {
            return Ok(Err("the node has no value".into()));
        };
        let domain = first.shape.clone();
        // The type the parameter computes in (Adam's step scalars have no parameter).
        let ty = match op {
            OptimOp::AdamStepScalars { .. } => ScalarType::F64,
            _ => match ScalarType::of_buffer(first.dtype) {
                Some(ty) => ty,
                None => return Ok(Err(format!("{:?} parameters are not lowered", first.dtype))),
            },
        };
        let name = format!("k{}_{}", self.kernel_count(), Op::Optim(op.clone()).name());
        let mut k = Frame::new(KernelBuilder::new(name, domain.clone()));
        let map: FrameMap = (0..domain.len()).map(Some).collect();
        let mut operands = Vec::new();
        for o in self.operands(id)? {
            match self.operand(&mut k, &o, &domain, &map)? {
                Ok(v) => operands.push(v),
                Err(why) => return Ok(Err(why)),
            }
        }
        let values = match lower_update(op, &mut k.b, &operands, ty) {
            Ok(values) => values,
            Err(why) => return Ok(Err(why)),
        };
        if values.len() != metas.len() {
            return Ok(Err(format!(
                "{} values for {} outputs",
                values.len(),
                metas.len()
            )));
        }
        let locals = values
            .into_iter()
            .map(|value| Local {
                value,
                shape: domain.clone(),
                map: Some(map.clone()),
            })
            .collect();
        k.locals.insert(*id, locals);
        self.emit_frame(k, std::slice::from_ref(id), &HashSet::new())
    }
}
