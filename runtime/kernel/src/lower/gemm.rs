//! Lowering of a GEMM (`linear`, 2-D `matmul`) together with the elementwise partition that
//! is its only user: one kernel over the output's index space that starts with the external
//! GEMM call ([`crate::GemmCall`]) into a scratch buffer, block by block of its outermost
//! loop, and applies the bias and the epilogue to each block. A GEMM without an epilogue runs
//! its eager kernel (there is nothing to fuse), or is a kernel of its own when the backend asks
//! ([`crate::LowerOptions`]); one the kernel IR cannot express falls back.

use super::Lowering;
use super::frame::{Frame, FrameMap, Local, frame_index};
use crate::{
    BinaryFn, BufferRole, Expr, ExternalCall, GemmCall, KernelBuilder, MatrixIndex, Result,
    ScalarType,
};
use std::collections::HashSet;
use tessera_fx::NodeId;
use tessera_tensor::Op;
use tessera_tensor::layout::Layout;
use tessera_tensor::op::view_strides;

/// Whether `op` is a GEMM this lowering can call.
pub(super) fn is_gemm(op: &Op) -> bool {
    matches!(op, Op::Linear { .. } | Op::Matmul)
}

impl Lowering<'_> {
    /// The epilogue partition of GEMM node `id`: every user is in it, and it has the
    /// output's shape.
    pub(super) fn gemm_epilogue(
        &self,
        id: &NodeId,
        partition_of: &std::collections::HashMap<NodeId, usize>,
        partitions: &[Vec<NodeId>],
    ) -> Result<Option<usize>> {
        let out = self.meta(id)?.first().map(|m| m.shape.clone());
        Ok(self
            .users_partition(id, partition_of, partitions)?
            .filter(|(_, shape)| Some(shape) == out.as_ref())
            .map(|(p, _)| p))
    }

    /// GEMM (or convolution) node `id` with no epilogue to fuse: a kernel of its own when
    /// [`crate::LowerOptions::product_kernels`] asks for one, when it is a GEMM whose rows
    /// are shared out across threads ([`crate::gemm::gemm_splits`]: faster than the eager
    /// kernel's call, which the GEMM library splits itself) or when it is a convolution that
    /// runs as a Winograd convolution (which has no eager kernel) or absorbs the max pool
    /// after it ([`super::conv_stage`]), else its eager kernel (reported as a fallback).
    pub(super) fn lone_product(&mut self, id: &NodeId) -> Result<()> {
        if self.options.product_kernels
            || self.lone_gemm_splits(id)?
            || self.lone_conv_is_kernel(id)?
        {
            self.gemm(id, &[])
        } else {
            self.node(id)
        }
    }

    /// Whether node `id` is a `linear` or 2-D `matmul` whose rows a GEMM kernel would share
    /// out across threads.
    fn lone_gemm_splits(&self, id: &NodeId) -> Result<bool> {
        let (Some(op), Some(out)) = (self.op_of(id)?, self.meta(id)?.first().cloned()) else {
            return Ok(false);
        };
        let operands = self.operands(id)?;
        let Some(x) = operands.first() else {
            return Ok(false);
        };
        let x = self
            .meta(x)?
            .first()
            .map(|m| m.shape.clone())
            .unwrap_or_default();
        let k = match op {
            Op::Linear { .. } => x.last().copied(),
            Op::Matmul if x.len() == 2 && out.shape.len() == 2 => Some(x[1]),
            _ => None,
        };
        let Some((k, (&n, rows))) = k.zip(out.shape.split_last()) else {
            return Ok(false);
        };
        Ok(!rows.is_empty() && crate::gemm::gemm_splits(rows.iter().product(), n, k))
    }

    /// Lowers GEMM (or convolution) node `id` with its `epilogue` partition, or runs both
    /// apart (the GEMM through its eager kernel, reported as a fallback) when the kernel IR
    /// cannot express them together.
    pub(super) fn gemm(&mut self, id: &NodeId, epilogue: &[NodeId]) -> Result<()> {
        let convolution = self.op_of(id)?.is_some_and(|op| super::conv::is_conv(&op));
        let slots = self.program.slots.len();
        let attempt = if convolution {
            self.conv_kernel(id, epilogue)?
        } else {
            self.gemm_kernel(id, epilogue)?
        };
        if let Err(why) = attempt {
            // A derived weight the attempt made (a transpose, a Winograd transform) would be
            // computed for nothing: the eager kernel reads the weight as stored.
            while self.program.slots.len() > slots
                && self
                    .program
                    .slots
                    .last()
                    .is_some_and(|s| matches!(s.source, crate::SlotSource::Derived { .. }))
            {
                self.program.slots.pop();
            }
            let op = self
                .op_of(id)?
                .ok_or_else(|| crate::KernelError::Undefined {
                    node: self.graph.display(id),
                })?;
            self.external(
                id,
                ExternalCall::Op(op),
                Some(format!("not generated: {why}")),
            )?;
            self.partition(epilogue)?;
        }
        Ok(())
    }

    fn gemm_kernel(
        &mut self,
        id: &NodeId,
        epilogue: &[NodeId],
    ) -> Result<std::result::Result<(), String>> {
        let Some(op) = self.op_of(id)? else {
            return Ok(Err("not an op".into()));
        };
        let operands = self.operands(id)?;
        let Some(out) = self.meta(id)?.first().cloned() else {
            return Ok(Err("the node has no value".into()));
        };
        // f16/bf16 GEMMs run through the eager kernel (which computes them in f32).
        let Some(ty) = ScalarType::of_buffer(out.dtype).filter(|t| t.is_arithmetic()) else {
            return Ok(Err(format!("{:?} GEMMs are not lowered", out.dtype)));
        };
        let shape = out.shape.clone();
        let Some((_, row_dims)) = shape.split_last().filter(|(_, r)| !r.is_empty()) else {
            return Ok(Err("a GEMM output of fewer than 2 dims".into()));
        };
        let rows: usize = row_dims.iter().product();
        let (Some(x), Some(w)) = (operands.first(), operands.get(1)) else {
            return Ok(Err("a GEMM needs two operands".into()));
        };
        let (x, w) = (self.value(x)?, self.value(w)?);
        for v in [&x, &w] {
            if self.program.slot(v.slot).meta.dtype != out.dtype {
                return Ok(Err("the operands' dtype differs from the output's".into()));
            }
        }
        let (xl, wl) = (&x.layout, &w.layout);
        let (k, a_index, (b_slot, b_index), bias) = match op {
            Op::Linear { bias } if wl.shape.len() == 2 => {
                let k = wl.shape[1];
                let Some(st) = view_strides(xl, &[rows, k]) else {
                    return Ok(Err("the input's rows are not one strided matrix".into()));
                };
                (
                    k,
                    MatrixIndex {
                        offset: xl.offset,
                        row_stride: st[0],
                        col_stride: st[1],
                    },
                    match self.transposed_weight(&operands[1], &w)? {
                        // The packed `[k, n]` transpose.
                        Some(slot) => (
                            slot,
                            MatrixIndex {
                                offset: 0,
                                row_stride: wl.shape[0],
                                col_stride: 1,
                            },
                        ),
                        // `w^T`: element `(k, n)` is `w[n, k]`.
                        None => (
                            w.slot,
                            MatrixIndex {
                                offset: wl.offset,
                                row_stride: wl.strides[1],
                                col_stride: wl.strides[0],
                            },
                        ),
                    },
                    operands.get(2).copied().filter(|_| bias),
                )
            }
            Op::Matmul if xl.shape.len() == 2 && wl.shape.len() == 2 => (
                xl.shape[1],
                MatrixIndex {
                    offset: xl.offset,
                    row_stride: xl.strides[0],
                    col_stride: xl.strides[1],
                },
                (
                    w.slot,
                    MatrixIndex {
                        offset: wl.offset,
                        row_stride: wl.strides[0],
                        col_stride: wl.strides[1],
                    },
                ),
                None,
            ),
            _ => return Ok(Err("only linear and 2-D matmul call the GEMM".into())),
        };
        let (mut frame, scratch, [a, b]) =
            self.call_frame(&op.name(), &shape, ty, [x.slot, b_slot]);
        frame.b.gemm(GemmCall {
            a,
            a_index,
            b,
            b_index,
            out: scratch,
            k,
        });
        let map: FrameMap = (0..shape.len()).map(Some).collect();
        let mut value = scratch_value(&mut frame, scratch, &shape, ty);
        if let Some(bias) = bias {
            match self.operand(&mut frame, &bias, &shape, &map)? {
                Ok(bv) if frame.b.ty(bv) == ty => {
                    value = frame.b.push(ty, Expr::Binary(BinaryFn::Add, value, bv));
                }
                Ok(_) => return Ok(Err("the bias's dtype differs".into())),
                Err(why) => return Ok(Err(why)),
            }
        }
        self.emit_with_epilogue(frame, id, value, &shape, epilogue)
    }

    /// A kernel named after `op` over the output `shape`, with a scratch buffer for the
    /// external call's whole result and the two operand slots as input buffers.
    pub(super) fn call_frame(
        &self,
        op: &str,
        shape: &[usize],
        ty: ScalarType,
        operands: [crate::SlotId; 2],
    ) -> (Frame, crate::BufferId, [crate::BufferId; 2]) {
        let name = format!("k{}_{op}_epilogue", self.kernel_count());
        let mut kb = KernelBuilder::new(name, shape.to_vec());
        let scratch = kb.buffer(BufferRole::Scratch, ty, shape.iter().product());
        let mut frame = Frame::new(kb);
        let buffers = operands.map(|slot| Self::input_buffer(&mut frame, slot, ty));
        (frame, scratch, buffers)
    }

    /// Finishes a kernel whose external call's result (plus bias) is `value` for node `id`
    /// over the output frame `shape`: the `epilogue` members follow it, then the kernel is
    /// emitted (GEMM and convolution kernels end alike).
    pub(super) fn emit_with_epilogue(
        &mut self,
        mut frame: Frame,
        id: &NodeId,
        value: crate::ValueId,
        shape: &[usize],
        epilogue: &[NodeId],
    ) -> Result<std::result::Result<(), String>> {
        let map: FrameMap = (0..shape.len()).map(Some).collect();
        frame.locals.insert(
            *id,
            vec![Local {
                value,
                shape: shape.to_vec(),
                map: Some(map.clone()),
            }],
        );
        for e in epilogue {
            if let Err(why) = self.elementwise_member(&mut frame, e, shape, &map)? {
                return Ok(Err(why));
            }
        }
        let members: Vec<NodeId> = std::iter::once(*id)
            .chain(epilogue.iter().copied())
            .collect();
        let fused: HashSet<NodeId> = members.iter().copied().collect();
        self.emit_frame(frame, &members, &fused)
    }
}

/// The external call's result at the output point: the packed scratch element.
pub(super) fn scratch_value(
    frame: &mut Frame,
    scratch: crate::BufferId,
    shape: &[usize],
    ty: ScalarType,
) -> crate::ValueId {
    let map: FrameMap = (0..shape.len()).map(Some).collect();
    let index = frame_index(&Layout::contiguous(shape), &map, shape.len());
    frame.b.push(
        ty,
        Expr::Load {
            buffer: scratch,
            index,
        },
    )
}
