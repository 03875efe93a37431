//! Which max pool a convolution call absorbs ([`crate::ConvCall::stage`]): a `max_pool2d`
//! without indices whose windows tile the convolution's output (stride equal to the window,
//! no padding or dilation), reading the convolution or its ReLU and nothing else reading
//! either. The call then adds the bias, applies the ReLU and pools each band of rows while it
//! is in cache, and the kernel's domain is the pooled output: the full-size activation is
//! never written (the small CNN's first convolution, 4 MiB at batch 64, was written by the
//! convolution's epilogue and read back by the pool's kernel).

use super::Lowering;
use super::frame::{Frame, FrameMap, Local};
use crate::{ConvAlgorithm, Result, ValueId};
use std::collections::HashSet;
use tessera_fx::NodeId;
use tessera_tensor::Op;
use tessera_tensor::op::{ConvStage, PoolOp, UnaryOp};

/// A max pool a convolution call computes, and the stage that does it.
pub(super) struct AbsorbedPool {
    pub(super) pool: NodeId,
    pub(super) stage: ConvStage,
    /// The pooled output's shape.
    pub(super) shape: Vec<usize>,
}

impl Lowering<'_> {
    /// The max pool convolution `id` (with its `epilogue`, to be fused) absorbs when it runs
    /// `algorithm` into `shape`, if any.
    pub(super) fn absorbed_pool(
        &self,
        id: &NodeId,
        epilogue: &[NodeId],
        algorithm: ConvAlgorithm,
        shape: &[usize],
    ) -> Result<Option<AbsorbedPool>> {
        if self.options.plain_conv_calls || algorithm != ConvAlgorithm::Gemm || shape.len() != 4 {
            return Ok(None);
        }
        let relu = match epilogue {
            [] => false,
            [r] if self.op_of(r)? == Some(Op::Unary(UnaryOp::Relu))
                && self.operands(r)?.as_slice() == [*id] =>
            {
                true
            }
            _ => return Ok(None),
        };
        let last = epilogue.last().unwrap_or(id);
        let only_user = |n: &NodeId| -> Result<Option<NodeId>> {
            let users = self
                .graph
                .users(n)
                .map_err(|e| super::graph_error(self.graph, n, e))?;
            Ok(match users.as_slice() {
                [u] => Some(*u),
                _ => None,
            })
        };
        if relu && only_user(id)? != Some(*last) {
            return Ok(None);
        }
        let Some(pool) = only_user(last)? else {
            return Ok(None);
        };
        let Some(Op::Pool(PoolOp::MaxPool2dValues(p))) = self.op_of(&pool)? else {
            return Ok(None);
        };
        if p.kernel != p.stride || p.padding != [0, 0] || p.dilation != [1, 1] {
            return Ok(None);
        }
        let stage = ConvStage {
            relu,
            max_pool: Some(p.kernel),
        };
        let [ph, pw] = stage.plane([shape[2], shape[3]]);
        let pooled = vec![shape[0], shape[1], ph, pw];
        // Ceil mode keeps a last partial window, which the stage drops.
        let Some(out) = self.meta(&pool)?.first().cloned() else {
            return Ok(None);
        };
        if out.shape != pooled || stage.check().is_err() {
            return Ok(None);
        }
        Ok(Some(AbsorbedPool {
            pool,
            stage,
            shape: pooled,
        }))
    }
}

impl Lowering<'_> {
    /// Finishes the kernel `frame` of convolution `id` whose call applies `absorbed`'s stage,
    /// its result `value` at each pooled point: the pool's value, the convolution and its
    /// `epilogue` (the ReLU) computed inside the call. The pool is then lowered.
    pub(super) fn emit_absorbed(
        &mut self,
        mut frame: Frame,
        id: &NodeId,
        epilogue: &[NodeId],
        value: ValueId,
        absorbed: AbsorbedPool,
    ) -> Result<std::result::Result<(), String>> {
        let map: FrameMap = (0..absorbed.shape.len()).map(Some).collect();
        frame.locals.insert(
            absorbed.pool,
            vec![Local {
                value,
                shape: absorbed.shape,
                map: Some(map),
            }],
        );
        let members: Vec<NodeId> = std::iter::once(*id)
            .chain(epilogue.iter().copied())
            .chain([absorbed.pool])
            .collect();
        let fused: HashSet<NodeId> = members.iter().copied().collect();
        let emitted = self.emit_frame(frame, &members, &fused)?;
        if emitted.is_ok() {
            self.absorbed.insert(absorbed.pool);
        }
        Ok(emitted)
    }
}
