//! Lowering of a 2-D convolution together with the elementwise partition that is its only
//! user: one kernel over the output's `[N, C, oH, oW]` that starts with the external
//! convolution call ([`crate::ConvCall`], the eager im2col + GEMM without its bias) into a
//! scratch buffer, block of images by block, and adds the bias (per channel) and the epilogue
//! (activation, residual add) to each block. A convolution without an epilogue runs its eager
//! kernel (there is nothing to fuse), or is a kernel of its own when the backend asks
//! ([`crate::LowerOptions`]); one the call cannot take (an input that is not packed,
//! a 1-D convolution) falls back.

use super::Lowering;
use crate::{BinaryFn, ConvCall, Expr, IndexExpr, Result, ScalarType};
use tessera_fx::NodeId;
use tessera_tensor::Op;
use tessera_tensor::layout::Layout;
use tessera_tensor::op::ConvOp;

/// Whether `op` is a convolution this lowering can call.
pub(super) fn is_conv(op: &Op) -> bool {
    matches!(op, Op::Conv(ConvOp::Forward { params, .. }) if params.spatial_dims == 2)
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
        let as4 = |s: &[usize]| [s[0], s[1], s[2], s[3]];
        let (mut frame, scratch, [input, weight]) =
            self.call_frame("conv2d", &shape, ty, [x.slot, w.slot]);
        frame.b.conv(ConvCall {
            input,
            weight,
            out: scratch,
            params,
            input_shape: as4(&x.layout.shape),
            weight_shape: as4(&w.layout.shape),
        });
        let mut value = super::gemm::scratch_value(&mut frame, scratch, &shape, ty);
        if let Some(b) = operands.get(2).filter(|_| bias) {
            // The bias is per channel (dim 1), as the eager kernel adds it after its GEMM.
            let b = self.value(b)?;
            if b.layout.shape != [shape[1]] || self.program.slot(b.slot).meta.dtype != out.dtype {
                return Ok(Err("the bias is not one value per output channel".into()));
            }
            let buffer = Self::input_buffer(&mut frame, b.slot, ty);
            let index = IndexExpr {
                offset: b.layout.offset,
                strides: vec![0, b.layout.strides[0], 0, 0],
            };
            let bv = frame.b.push(ty, Expr::Load { buffer, index });
            value = frame.b.push(ty, Expr::Binary(BinaryFn::Add, value, bv));
        }
        self.emit_with_epilogue(frame, id, value, &shape, epilogue)
    }
}
