//! Lowering of a 2-D convolution together with the elementwise partition that is its only
//! user: one kernel over the output's `[N, C, oH, oW]` that starts with the external
//! convolution call ([`crate::ConvCall`], the eager kernel or a Winograd convolution, without
//! its bias) into a scratch buffer, block of images by block, and adds the bias (per channel)
//! and the epilogue (activation, residual add) to each block. A max pool after the
//! convolution (or its ReLU) is absorbed by the call where it can be ([`super::conv_stage`]):
//! the call adds the bias, and the kernel is over the pooled output. A Winograd call reads its
//! weights transformed, from a derived slot of the program ([`crate::derived`]); the choice
//! and its reason are recorded in [`crate::Program::convolutions`]. A convolution without an epilogue runs its eager
//! kernel (there is nothing to fuse), or is a kernel of its own when the backend asks
//! ([`crate::LowerOptions`]); one the call cannot take (an input that is not packed,
//! a 1-D convolution) falls back.

use super::{Lowering, Val};
use crate::conv_choice::{ImageSizes, choose};
use crate::{
    BinaryFn, ConvAlgorithm, ConvCall, ConvChoice, Derivation, Expr, IndexExpr, Result, ScalarType,
    SlotId, SlotSource,
};
use tessera_fx::NodeId;
use tessera_tensor::Op;
use tessera_tensor::layout::Layout;
use tessera_tensor::op::ConvOp;

/// Whether `op` is a convolution this lowering can call.
pub(super) fn is_conv(op: &Op) -> bool {
    matches!(op, Op::Conv(ConvOp::Forward { params, .. }) if params.spatial_dims == 2)
}

/// Whether a convolution call can read the bias `b` as it is: a packed `[C]`.
fn call_reads_bias(b: &Val) -> bool {
    b.layout.strides == [1] && b.layout.offset == 0
}

impl Lowering<'_> {
    pub(super) fn conv_kernel(
        &mut self,
        id: &NodeId,
        epilogue: &[NodeId],
    ) -> Result<std::result::Result<(), String>> {
        let Some(Op::Conv(ConvOp::Forward { params, bias })) = self.op_of(id)? else {
            return Ok(Err("not a convolution".into()));
        };
        let operands = self.operands(id)?;
        let Some(out) = self.meta(id)?.first().cloned() else {
            return Ok(Err("the node has no value".into()));
        };
        let Some(ty) = ScalarType::of_buffer(out.dtype).filter(|t| t.is_arithmetic()) else {
            return Ok(Err(format!("{:?} convolutions are not lowered", out.dtype)));
        };
        let shape = out.shape.clone();
        let (Some(x), Some(w)) = (operands.first(), operands.get(1)) else {
            return Ok(Err("a convolution needs two operands".into()));
        };
        let (x, w) = (self.value(x)?, self.value(w)?);
        let packed4 = |l: &Layout| l.shape.len() == 4 && l.offset == 0 && l.is_contiguous();
        if !packed4(&x.layout) || !packed4(&w.layout) || shape.len() != 4 {
            return Ok(Err("the call takes packed 4-D inputs".into()));
        }
        for v in [&x, &w] {
            if self.program.slot(v.slot).meta.dtype != out.dtype {
                return Ok(Err("the operands' dtype differs from the output's".into()));
            }
        }
        // The bias is per channel (dim 1), as the eager kernel adds it after its GEMM.
        let bias = match operands.get(2).filter(|_| bias) {
            Some(b) => {
                let b = self.value(b)?;
                if b.layout.shape != [shape[1]] || self.program.slot(b.slot).meta.dtype != out.dtype
                {
                    return Ok(Err("the bias is not one value per output channel".into()));
                }
                Some(b)
            }
            None => None,
        };
        let as4 = |s: &[usize]| [s[0], s[1], s[2], s[3]];
        let node = self.graph.name(id).unwrap_or("?").to_string();
        let choice = self.conv_choice(&node, &params, &x, &w, &shape);
        let (weight_slot, derived) = match choice.algorithm {
            ConvAlgorithm::Winograd(tile) => {
                let slot = self.derived_weights(&w, tile, &node);
                (slot, Some(slot))
            }
            ConvAlgorithm::Gemm => (w.slot, None),
        };
        // The call adds the bias itself when it pools: a packed `[C]` it reads whole.
        let packed_bias = bias.as_ref().is_none_or(call_reads_bias);
        let absorbed = match packed_bias {
            true => self.absorbed_pool(id, epilogue, choice.algorithm, &shape)?,
            false => None,
        };
        let call_bias = absorbed.as_ref().and(bias.as_ref()).map(|b| b.slot);
        let (op, domain) = match &absorbed {
            Some(a) => ("conv2d_max_pool2d", a.shape.clone()),
            None => ("conv2d", shape.clone()),
        };
        let (mut frame, scratch, [input, weight]) =
            self.call_frame(op, &domain, ty, [x.slot, weight_slot]);
        let bias_buffer = call_bias.map(|slot| Self::input_buffer(&mut frame, slot, ty));
        frame.b.conv(ConvCall {
            input,
            weight,
            out: scratch,
            params,
            input_shape: as4(&x.layout.shape),
            weight_shape: as4(&w.layout.shape),
            algorithm: choice.algorithm,
            bias: bias_buffer,
            stage: absorbed.as_ref().map(|a| a.stage).unwrap_or_default(),
        });
        let mut value = super::gemm::scratch_value(&mut frame, scratch, &domain, ty);
        if let Some(a) = absorbed {
            let emitted = self.emit_absorbed(frame, id, epilogue, value, a)?;
            if emitted.is_ok() {
                self.program.convolutions.push(choice);
            }
            return Ok(emitted);
        }
        if let Some(b) = bias {
            let buffer = Self::input_buffer(&mut frame, b.slot, ty);
            let index = IndexExpr {
                offset: b.layout.offset,
                strides: vec![0, b.layout.strides[0], 0, 0],
            };
            let bv = frame.b.push(ty, Expr::Load { buffer, index });
            value = frame.b.push(ty, Expr::Binary(BinaryFn::Add, value, bv));
        }
        let emitted = self.emit_with_epilogue(frame, id, value, &shape, epilogue)?;
        match &emitted {
            Ok(()) => self.program.convolutions.push(choice),
            // Nothing was emitted: the derived slot, the last one made, has no reader.
            Err(_) => {
                if let Some(d) = derived
                    && d.index() + 1 == self.program.slots.len()
                {
                    self.program.slots.pop();
                }
            }
        }
        Ok(emitted)
    }

    /// Whether node `id` is a convolution the call can take that would run as a Winograd
    /// convolution or absorb the max pool after it (so that, with no epilogue, it still
    /// becomes a kernel).
    pub(super) fn lone_conv_is_kernel(&self, id: &NodeId) -> Result<bool> {
        let Some(Op::Conv(ConvOp::Forward { params, bias })) = self.op_of(id)? else {
            return Ok(false);
        };
        let operands = self.operands(id)?;
        let (Some(out), Some(x), Some(w)) = (
            self.meta(id)?.first().cloned(),
            operands.first(),
            operands.get(1),
        ) else {
            return Ok(false);
        };
        let (x, w) = (self.value(x)?, self.value(w)?);
        let packed4 = |l: &Layout| l.shape.len() == 4 && l.offset == 0 && l.is_contiguous();
        if !packed4(&x.layout) || !packed4(&w.layout) || out.shape.len() != 4 {
            return Ok(false);
        }
        let node = self.graph.name(id).unwrap_or("?").to_string();
        let choice = self.conv_choice(&node, &params, &x, &w, &out.shape);
        if matches!(choice.algorithm, ConvAlgorithm::Winograd(_)) {
            return Ok(true);
        }
        if let (true, Some(b)) = (bias, operands.get(2))
            && !call_reads_bias(&self.value(b)?)
        {
            return Ok(false);
        }
        Ok(self
            .absorbed_pool(id, &[], choice.algorithm, &out.shape)?
            .is_some())
    }

    /// The algorithm for the convolution `node` of `x` by `w` into `shape`: Winograd only
    /// where the weight is an input or attribute read as it is (so that its transform can be
    /// kept between runs), under the lowering's policy and cost rule.
    fn conv_choice(
        &self,
        node: &str,
        params: &tessera_tensor::op::ConvParams,
        x: &Val,
        w: &Val,
        shape: &[usize],
    ) -> ConvChoice {
        let sizes = ImageSizes {
            c_in: x.layout.shape[1],
            c_out: shape[1],
            oh: shape[2],
            ow: shape[3],
        };
        let choice = choose(node, self.options.winograd, params, &w.layout.shape, sizes);
        let source = &self.program.slot(w.slot).source;
        let constant =
            matches!(source, SlotSource::Input(_) | SlotSource::Attribute(_)) && w.views.is_empty();
        if matches!(choice.algorithm, ConvAlgorithm::Winograd(_)) && !constant {
            return ConvChoice {
                algorithm: ConvAlgorithm::Gemm,
                reason: "the weight is computed by the program, so its Winograd transform \
                         could not be kept"
                    .into(),
                ..choice
            };
        }
        choice
    }

    /// A derived slot holding the `tile` transform of the weight `w` of convolution `node`.
    fn derived_weights(
        &mut self,
        w: &Val,
        tile: tessera_tensor::op::WinogradTile,
        node: &str,
    ) -> SlotId {
        let shape = tessera_tensor::op::winograd_weight_shape(tile, &w.layout.shape).to_vec();
        let name = format!("{node}_winograd_weights");
        self.derived_slot(w.slot, Derivation::WinogradWeights(tile), name, shape)
    }
}
