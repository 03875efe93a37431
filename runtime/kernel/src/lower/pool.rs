//! Lowering of 2-D max pooling (values only, as inference calls it) and average pooling with
//! no padding into one kernel each over the output's `[N, C, oH, oW]`, the input read at row
//! `oh * stride + kh * dilation` through strides alone. A window of at most
//! [`UNROLLED_WINDOW`] taps is unrolled into one load per tap, folded in the eager kernel's
//! order (so results are bit-identical); a larger one becomes reduction loops over `[kH, kW]`.
//! Padded windows, which need bounds checks, and ceil mode's partial windows run their eager
//! kernel.

use super::Lowering;
use super::frame::{Frame, Local};
use crate::{
    BinaryFn, Expr, ExternalCall, IndexExpr, KernelBuilder, ReduceFn, Result, ScalarType, ValueId,
};
use std::collections::HashSet;
use tessera_fx::NodeId;
use tessera_tensor::Op;
use tessera_tensor::op::{BinaryOp, Pool2dParams, PoolOp};

/// Taps up to which a window is unrolled: a reduction loop of a few taps costs more in loop
/// overhead per output than its loads.
pub const UNROLLED_WINDOW: usize = 64;

/// The window and whether it averages, for the pooling ops this lowering generates.
pub(super) fn window_pool(op: &Op) -> Option<(Pool2dParams, bool)> {
    match op {
        Op::Pool(PoolOp::MaxPool2dValues(p)) => Some((*p, false)),
        Op::Pool(PoolOp::AvgPool2d { params, .. }) => Some((*params, true)),
        _ => None,
    }
}

impl Lowering<'_> {
    /// Lowers pooling node `id` to a window reduction, or runs its eager kernel (reported as
    /// a fallback) when the kernel IR cannot express it.
    pub(super) fn pool(&mut self, id: &NodeId, op: &Op) -> Result<()> {
        if let Err(why) = self.pool_kernel(id, op)? {
            self.external(
                id,
                ExternalCall::Op(op.clone()),
                Some(format!("not generated: {why}")),
            )?;
        }
        Ok(())
    }

    fn pool_kernel(&mut self, id: &NodeId, op: &Op) -> Result<std::result::Result<(), String>> {
        let Some((p, average)) = window_pool(op) else {
            return Ok(Err("not a window pooling".into()));
        };
        if p.padding != [0, 0] {
            return Ok(Err("padded windows need bounds checks".into()));
        }
        let (Some(input), Some(out)) = (
            self.operands(id)?.first().copied(),
            self.meta(id)?.first().cloned(),
        ) else {
            return Ok(Err("the node has no input or no value".into()));
        };
        let x = self.value(&input)?;
        let Some(ty) = ScalarType::of_buffer(out.dtype).filter(|t| t.is_float()) else {
            return Ok(Err(format!("{:?} pooling is not lowered", out.dtype)));
        };
        if self.program.slot(x.slot).meta.dtype != out.dtype {
            return Ok(Err("the input's dtype differs from the output's".into()));
        }
        let (layout, shape) = (&x.layout, out.shape.clone());
        let nd = shape.len();
        if !(3..=4).contains(&nd) || layout.shape.len() != nd {
            return Ok(Err("pooling of other than 3-D or 4-D tensors".into()));
        }
        // Every window lies inside the input: no padding, and the last window's end (ceil
        // mode's may pass it) within the plane.
        for a in 0..2 {
            let (o, i) = (shape[nd - 2 + a], layout.shape[nd - 2 + a]);
            // Checked: a graph compiled without verification may carry any window.
            let last = o.saturating_sub(1).checked_mul(p.stride[a]).and_then(|s| {
                p.kernel[a]
                    .checked_sub(1)?
                    .checked_mul(p.dilation[a])?
                    .checked_add(s)
            });
            match last {
                None => return Ok(Err("an empty or overflowing window".into())),
                Some(last) if o > 0 && last >= i => {
                    return Ok(Err("a window past the input's end (ceil mode)".into()));
                }
                Some(_) => {}
            }
        }
        let plane = &layout.strides[nd - 2..];
        let mut outer: Vec<usize> = layout.strides[..nd - 2].to_vec();
        outer.extend((0..2).map(|a| p.stride[a] * plane[a]));
        let taps = [p.dilation[0] * plane[0], p.dilation[1] * plane[1]];
        let name = format!("k{}_{}", self.kernel_count(), op.name());
        let unrolled = p.kernel[0] * p.kernel[1] <= UNROLLED_WINDOW;
        let reduce = if unrolled { vec![] } else { p.kernel.to_vec() };
        let mut frame = Frame::new(KernelBuilder::reduction(name, shape.clone(), reduce));
        let buffer = Self::input_buffer(&mut frame, x.slot, ty);
        let b = &mut frame.b;
        let count = b.push(ty, Expr::Const((p.kernel[0] * p.kernel[1]) as f64));
        let value = if unrolled {
            let mut load = |row: usize, col: usize| {
                let index = IndexExpr {
                    offset: layout.offset + row * taps[0] + col * taps[1],
                    strides: outer.clone(),
                };
                b.push(ty, Expr::Load { buffer, index })
            };
            let rows: Vec<Vec<ValueId>> = (0..p.kernel[0])
                .map(|r| (0..p.kernel[1]).map(|c| load(r, c)).collect())
                .collect();
            if average {
                // Eager: each row's sum, then the sum of the rows, divided by the taps.
                let sums: Vec<ValueId> = rows.iter().map(|row| fold_sum(b, ty, row)).collect();
                let sum = fold_sum(b, ty, &sums);
                b.push(ty, Expr::Binary(BinaryFn::Div, sum, count))
            } else {
                // Eager: a tap replaces the best so far when it is larger or NaN, which is
                // `maximum(tap, best)` of the lowering table.
                let maximum = Op::Binary(BinaryOp::Maximum);
                let mut taps = rows.into_iter().flatten();
                let first = taps.next().unwrap_or(count);
                let mut best = first;
                for x in taps {
                    match crate::lower_elementwise(&maximum, b, &[x, best], ty) {
                        Ok(v) => best = v,
                        Err(why) => return Ok(Err(why)),
                    }
                }
                best
            }
        } else {
            let mut strides = outer.clone();
            strides.extend(taps);
            let index = IndexExpr {
                offset: layout.offset,
                strides,
            };
            let element = b.push(ty, Expr::Load { buffer, index });
            if average {
                let sum = b.push(ty, Expr::Reduce(ReduceFn::Sum, element));
                b.push(ty, Expr::Binary(BinaryFn::Div, sum, count))
            } else {
                b.push(ty, Expr::Reduce(ReduceFn::Max, element))
            }
        };
        frame.locals.insert(
            *id,
            vec![Local {
                value,
                shape: shape.clone(),
                map: Some((0..nd).map(Some).collect()),
            }],
        );
        self.emit_frame(frame, &[*id], &HashSet::from([*id]))
    }
}

/// `(x0 + x1) + ...`, in the order an iterator's `sum` adds (it starts from -0.0, the
/// identity of addition, so the first addition is exact).
fn fold_sum(b: &mut KernelBuilder, ty: ScalarType, xs: &[ValueId]) -> ValueId {
    let mut xs = xs.iter().copied();
    let Some(first) = xs.next() else {
        return b.push(ty, Expr::Const(0.0));
    };
    xs.fold(first, |acc, x| {
        b.push(ty, Expr::Binary(BinaryFn::Add, acc, x))
    })
}
