//! Lowering of 2-D max pooling (values only, as inference calls it, or with the flat in-plane
//! index of each maximum, i64, for windows of at most [`UNROLLED_WINDOW`] taps) and average
//! pooling into one kernel each over the output's `[N, C, oH, oW]`, the input read at row
//! `oh * stride + kh * dilation - pad`. A window of at most [`UNROLLED_WINDOW`] taps is
//! unrolled into one load per tap, folded in the eager kernel's order (so results are
//! bit-identical); a larger one becomes reduction loops over `[kH, kW]`. Along an axis whose
//! windows all lie inside the input the taps are plain strided loads; along one with padding
//! or ceil mode's windows cut short they are guarded loads ([`crate::guard`]) that read -inf
//! (max), -0.0 (the identity of the average's sum) or 0 (a u8 tap) outside the input. An
//! average divides by eager's divisor of its window ([`super::avg_divisors`], picked by the
//! output coordinates: the window's size, or, without `count_include_pad`, the taps inside the
//! input, and for a ceil-mode window cut short its extent inside the padded input). A u8
//! average (`quantized_avg_pool2d`, or `avg_pool2d` of u8 values) sums its taps in i64 and
//! divides by the taps inside the input, as [`super::quant_pool`].

use super::Lowering;
use super::avg_divisors::Divisors;
use super::frame::{Frame, Local};
use super::quant_pool;
use crate::{
    BinaryFn, Bound, CompareFn, Expr, IndexExpr, KernelBuilder, LoopId, ReduceFn, Result,
    ScalarType, ValueId,
};
use std::collections::HashSet;
use tessera_fx::NodeId;
use tessera_tensor::Op;
use tessera_tensor::op::{BinaryOp, Pool2dParams, PoolOp};

/// Taps up to which a window is unrolled: a reduction loop of a few taps costs more in loop
/// overhead per output than its loads.
pub const UNROLLED_WINDOW: usize = 64;

/// What a window pooling computes per window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum WindowReduce {
    /// The maximum, and the flat in-plane index of the first maximum when `indices`.
    Max { indices: bool },
    /// The float mean, padding counted in the divisor when `count_include_pad`.
    Mean { count_include_pad: bool },
    /// The u8 mean of values whose zero point is `zero_point` ([`quant_pool`]).
    U8Mean { zero_point: i64 },
}

/// The window and what it computes, for the pooling ops this lowering generates (an
/// `avg_pool2d` of u8 values is a [`WindowReduce::U8Mean`] once its dtype is known).
pub(super) fn window_pool(op: &Op) -> Option<(Pool2dParams, WindowReduce)> {
    match op {
        Op::Pool(PoolOp::MaxPool2dValues(p)) => Some((*p, WindowReduce::Max { indices: false })),
        Op::Pool(PoolOp::MaxPool2d(p)) => Some((*p, WindowReduce::Max { indices: true })),
        Op::Pool(PoolOp::AvgPool2d {
            params,
            count_include_pad,
        }) => Some((
            *params,
            WindowReduce::Mean {
                count_include_pad: *count_include_pad,
            },
        )),
        _ => match quant_pool::u8_average(op, false)? {
            (PoolOp::AvgPool2d { params, .. }, zero_point) => {
                Some((*params, WindowReduce::U8Mean { zero_point }))
            }
            _ => None,
        },
    }
}

impl Lowering<'_> {
    /// Lowers pooling node `id` to a window reduction, or runs its eager kernel (reported as
    /// a fallback) when the kernel IR cannot express it.
    pub(super) fn pool(&mut self, id: &NodeId, op: &Op) -> Result<()> {
        if let Err(why) = self.pool_kernel(id, op)? {
            self.not_generated(id, op, &why)?;
        }
        Ok(())
    }

    fn pool_kernel(&mut self, id: &NodeId, op: &Op) -> Result<std::result::Result<(), String>> {
        let Some((p, mut reduce)) = window_pool(op) else {
            return Ok(Err("not a window pooling".into()));
        };
        let (Some(input), Some(out)) = (
            self.operands(id)?.first().copied(),
            self.meta(id)?.first().cloned(),
        ) else {
            return Ok(Err("the node has no input or no value".into()));
        };
        let x = self.value(&input)?;
        if out.dtype == tessera_tensor::DType::U8 && matches!(reduce, WindowReduce::Mean { .. }) {
            // The eager u8 average: padding never counts, the zero point is 0.
            reduce = WindowReduce::U8Mean { zero_point: 0 };
        }
        let ty = match (ScalarType::of_buffer(out.dtype), reduce) {
            (Some(ScalarType::U8), WindowReduce::U8Mean { .. }) if p.dilation == [1, 1] => {
                ScalarType::U8
            }
            (Some(ty), WindowReduce::Max { .. } | WindowReduce::Mean { .. })
                if ty.is_arithmetic() =>
            {
                ty
            }
            _ => {
                return Ok(Err(format!(
                    "{:?} pooling (dilation {:?}) is not lowered",
                    out.dtype, p.dilation
                )));
            }
        };
        let average = matches!(reduce, WindowReduce::Mean { .. });
        let with_indices = reduce == WindowReduce::Max { indices: true };
        if self.program.slot(x.slot).meta.dtype != out.dtype {
            return Ok(Err("the input's dtype differs from the output's".into()));
        }
        let (layout, shape) = (&x.layout, out.shape.clone());
        let nd = shape.len();
        if !(3..=4).contains(&nd) || layout.shape.len() != nd {
            return Ok(Err("pooling of other than 3-D or 4-D tensors".into()));
        }
        let mut axes = Vec::new();
        for a in 0..2 {
            match Axis::of(&p, a, shape[nd - 2 + a], layout.shape[nd - 2 + a]) {
                Some(axis) => axes.push(axis),
                None => return Ok(Err("an empty or overflowing window".into())),
            }
        }
        // Each average window's divisor, eager's (a u8 average never counts padding).
        let count_include_pad = match reduce {
            WindowReduce::Max { .. } => None,
            WindowReduce::Mean { count_include_pad } => Some(count_include_pad),
            WindowReduce::U8Mean { .. } => Some(false),
        };
        let divisors = match count_include_pad {
            None => None,
            Some(count_include_pad) => {
                let input = [axes[0].input, axes[1].input];
                let output = [axes[0].output, axes[1].output];
                match Divisors::of(&p, count_include_pad, input, output) {
                    Some(divisors) => Some(divisors),
                    None => return Ok(Err("dilated average windows".into())),
                }
            }
        };
        let plane = &layout.strides[nd - 2..];
        let mut outer: Vec<usize> = layout.strides[..nd - 2].to_vec();
        outer.extend([0, 0]);
        let name = format!("k{}_{}", self.kernel_count(), op.name());
        let unrolled = p.kernel[0] * p.kernel[1] <= UNROLLED_WINDOW;
        if with_indices && ty.is_half() {
            return Ok(Err(format!("{ty} max pooling with indices")));
        }
        if with_indices && !unrolled {
            return Ok(Err(format!(
                "indices of a window of more than {UNROLLED_WINDOW} taps"
            )));
        }
        let reduction = if unrolled { vec![] } else { p.kernel.to_vec() };
        let loops = nd + reduction.len();
        let mut frame = Frame::new(KernelBuilder::reduction(name, shape.clone(), reduction));
        let buffer = Self::input_buffer(&mut frame, x.slot, ty);
        let b = &mut frame.b;
        // The tap at window row `row` and column `col`, read as `fill` in the padding.
        let tap = |b: &mut KernelBuilder, (row, col): (At, At), fill| {
            let mut index = IndexExpr {
                offset: layout.offset,
                strides: outer.clone(),
            };
            index.strides.resize(loops, 0);
            let mut bounds = Vec::new();
            for (a, at) in [row, col].into_iter().enumerate() {
                let k = match at {
                    At::Tap(k) => Some(k),
                    At::Loop => None,
                };
                let axis = &axes[a];
                // The position in the padded input: `o * stride + k * dilation`.
                let mut coord = IndexExpr {
                    offset: k.unwrap_or(0) * axis.dilation,
                    strides: vec![0; loops],
                };
                coord.strides[nd - 2 + a] = axis.stride;
                if k.is_none() {
                    coord.strides[nd + a] = axis.dilation;
                }
                if axis.guarded() {
                    bounds.push(Bound {
                        coord,
                        pad: axis.pad,
                        len: axis.input,
                        stride: plane[a],
                    });
                } else {
                    index.offset += coord.offset * plane[a];
                    for (s, c) in index.strides.iter_mut().zip(&coord.strides) {
                        *s += c * plane[a];
                    }
                }
            }
            if bounds.is_empty() {
                b.push(ty, Expr::Load { buffer, index })
            } else {
                b.push(
                    ty,
                    Expr::LoadIf {
                        buffer,
                        index,
                        bounds,
                        fill,
                    },
                )
            }
        };
        // Padding taps: -inf never wins a maximum, -0.0 is the identity of addition.
        let fill = if average { -0.0 } else { f64::NEG_INFINITY };
        // The divisor, in `ty`, of the window at the output point (the plane's loop indices);
        // max pooling divides by nothing.
        let divisor = |b: &mut KernelBuilder, ty| {
            let q: Vec<ValueId> = (nd - 2..nd)
                .map(|l| b.push(ScalarType::I64, Expr::LoopIndex(LoopId::from_index(l))))
                .collect();
            match &divisors {
                Some(divisors) => divisors.at(b, ty, &q, &[0, 0]),
                None => b.push(ty, Expr::Const(1.0)),
            }
        };
        let mut indices = None;
        let value = if let WindowReduce::U8Mean { zero_point } = reduce {
            // Padding taps read 0 and the divisor counts the taps inside the input.
            let sum = if unrolled {
                let taps: Vec<ValueId> = (0..p.kernel[0])
                    .flat_map(|r| (0..p.kernel[1]).map(move |c| (At::Tap(r), At::Tap(c))))
                    .map(|at| tap(b, at, 0.0))
                    .collect();
                quant_pool::sum_u8(b, taps)
            } else {
                let element = tap(b, (At::Loop, At::Loop), 0.0);
                let wide = b.push(ScalarType::I64, Expr::Cast(element));
                b.push(ScalarType::I64, Expr::Reduce(ReduceFn::Sum, wide))
            };
            let n = divisor(b, ScalarType::I64);
            quant_pool::requantize_mean(b, sum, n, zero_point)
        } else if unrolled {
            let rows: Vec<Vec<ValueId>> = (0..p.kernel[0])
                .map(|r| {
                    (0..p.kernel[1])
                        .map(|c| tap(b, (At::Tap(r), At::Tap(c)), fill))
                        .collect()
                })
                .collect();
            if average {
                // Eager: each row's sum, then the sum of the rows, divided by the divisor.
                let sums: Vec<ValueId> = rows.iter().map(|row| fold_sum(b, ty, row)).collect();
                let sum = fold_sum(b, ty, &sums);
                let n = divisor(b, ty);
                b.push(ty, Expr::Binary(BinaryFn::Div, sum, n))
            } else if with_indices {
                let (value, at) = max_with_index(b, ty, &axes, nd, &rows);
                indices = Some(at);
                value
            } else {
                // Eager: a tap replaces the best so far when it is larger or NaN, which is
                // `maximum(tap, best)` of the lowering table.
                let maximum = Op::Binary(BinaryOp::Maximum);
                let mut taps = rows.into_iter().flatten();
                let Some(mut best) = taps.next() else {
                    return Ok(Err("an empty window".into()));
                };
                for x in taps {
                    match crate::lower_elementwise(&maximum, b, &[x, best], ty) {
                        Ok(v) => best = v,
                        Err(why) => return Ok(Err(why)),
                    }
                }
                best
            }
        } else {
            let element = tap(b, (At::Loop, At::Loop), fill);
            if average {
                let sum = b.push(ty, Expr::Reduce(ReduceFn::Sum, element));
                let n = divisor(b, ty);
                b.push(ty, Expr::Binary(BinaryFn::Div, sum, n))
            } else {
                b.push(ty, Expr::Reduce(ReduceFn::Max, element))
            }
        };
        let local = |value| Local {
            value,
            shape: shape.clone(),
            map: Some((0..nd).map(Some).collect()),
        };
        let locals = std::iter::once(value).chain(indices).map(local).collect();
        frame.locals.insert(*id, locals);
        self.emit_frame(frame, &[*id], &HashSet::from([*id]))
    }
}

/// The maximum of an unrolled window's taps (`rows`, padding read as -inf) and the flat
/// in-plane index (`row * W + col`, i64) of the first maximum, selected as the eager kernel
/// does: from -inf at the window's first tap inside the input, a tap replaces the best so far
/// when it is larger or NaN (so a padding tap never does, and the first of equal maxima
/// stays).
fn max_with_index(
    b: &mut KernelBuilder,
    ty: ScalarType,
    axes: &[Axis],
    nd: usize,
    rows: &[Vec<ValueId>],
) -> (ValueId, ValueId) {
    let i64c = |b: &mut KernelBuilder, v: i64| b.push(ScalarType::I64, Expr::Const(v as f64));
    // Per axis, the input coordinate of each tap, and the first tap inside the input.
    let mut coords: Vec<Vec<ValueId>> = Vec::new();
    let mut firsts = Vec::new();
    for (a, axis) in axes.iter().enumerate() {
        let o = b.push(
            ScalarType::I64,
            Expr::LoopIndex(LoopId::from_index(nd - 2 + a)),
        );
        let stride = i64c(b, axis.stride as i64);
        let start = b.push(ScalarType::I64, Expr::Binary(BinaryFn::Mul, o, stride));
        let at: Vec<ValueId> = (0..axis.kernel)
            .map(|k| {
                let shift = i64c(b, (k * axis.dilation) as i64 - axis.pad as i64);
                b.push(ScalarType::I64, Expr::Binary(BinaryFn::Add, start, shift))
            })
            .collect();
        // Scanning back from the last tap, the first inside wins (the last when none is).
        let (zero, len) = (i64c(b, 0), i64c(b, axis.input as i64));
        let mut first = at.last().copied().unwrap_or(zero);
        for &c in at.iter().rev() {
            let low = b.push(ScalarType::Bool, Expr::Compare(CompareFn::Ge, c, zero));
            let high = b.push(ScalarType::Bool, Expr::Compare(CompareFn::Lt, c, len));
            let past_high = b.push(
                ScalarType::I64,
                Expr::Select {
                    cond: high,
                    a: c,
                    b: first,
                },
            );
            first = b.push(
                ScalarType::I64,
                Expr::Select {
                    cond: low,
                    a: past_high,
                    b: first,
                },
            );
        }
        coords.push(at);
        firsts.push(first);
    }
    let width = i64c(b, axes[1].input as i64);
    let flat = |b: &mut KernelBuilder, row: ValueId, col: ValueId| {
        let scaled = b.push(ScalarType::I64, Expr::Binary(BinaryFn::Mul, row, width));
        b.push(ScalarType::I64, Expr::Binary(BinaryFn::Add, scaled, col))
    };
    let mut best = b.push(ty, Expr::Const(f64::NEG_INFINITY));
    let mut at = flat(b, firsts[0], firsts[1]);
    for (r, row) in rows.iter().enumerate() {
        for (c, &v) in row.iter().enumerate() {
            let here = flat(b, coords[0][r], coords[1][c]);
            (best, at) = max_step(b, ty, v, here, best, at);
        }
    }
    (best, at)
}

/// One step of the eager selection of a maximum and its index: tap `v` at index `here`
/// replaces `(best, at)` when it is larger or NaN (so the first of equal maxima stays, and
/// the last NaN wins).
pub(super) fn max_step(
    b: &mut KernelBuilder,
    ty: ScalarType,
    v: ValueId,
    here: ValueId,
    best: ValueId,
    at: ValueId,
) -> (ValueId, ValueId) {
    let nan = b.push(ScalarType::Bool, Expr::Compare(CompareFn::Ne, v, v));
    let larger = b.push(ScalarType::Bool, Expr::Compare(CompareFn::Gt, v, best));
    // Two selects per value: no select of predicates, which not every backend has.
    let pick = |b: &mut KernelBuilder, t: ScalarType, tap: ValueId, so_far| {
        let if_larger = b.push(
            t,
            Expr::Select {
                cond: larger,
                a: tap,
                b: so_far,
            },
        );
        b.push(
            t,
            Expr::Select {
                cond: nan,
                a: tap,
                b: if_larger,
            },
        )
    };
    (pick(b, ty, v, best), pick(b, ScalarType::I64, here, at))
}

/// Where a tap lies along one window axis.
#[derive(Debug, Clone, Copy)]
enum At {
    /// Tap `k` of the window.
    Tap(usize),
    /// The reduction loop's tap.
    Loop,
}

/// One axis of a window (of a pooling, or a convolution's kernel) over an input dim.
pub(super) struct Axis {
    pub(super) output: usize,
    pub(super) input: usize,
    pub(super) kernel: usize,
    pub(super) stride: usize,
    pub(super) pad: usize,
    pub(super) dilation: usize,
}

impl Axis {
    /// Axis `a` of `p` for `output` windows over `input` elements; `None` when a window is
    /// empty or its arithmetic overflows (a graph compiled without verification may carry any
    /// window).
    fn of(p: &Pool2dParams, a: usize, output: usize, input: usize) -> Option<Axis> {
        Axis {
            output,
            input,
            kernel: p.kernel[a],
            stride: p.stride[a],
            pad: p.padding[a],
            dilation: p.dilation[a],
        }
        .checked()
    }

    /// The axis, or `None` when its window is empty or its arithmetic overflows.
    pub(super) fn checked(self) -> Option<Axis> {
        self.last_tap()?;
        (self.kernel > 0).then_some(self)
    }

    /// The last window's last tap, in padded coordinates (`o * stride + k * dilation`).
    fn last_tap(&self) -> Option<usize> {
        self.output
            .saturating_sub(1)
            .checked_mul(self.stride)?
            .checked_add(self.kernel.checked_sub(1)?.checked_mul(self.dilation)?)
    }

    /// Whether some tap lies outside the input (in the padding, or past the end in ceil mode).
    pub(super) fn guarded(&self) -> bool {
        self.pad > 0 || self.last_tap().is_none_or(|t| t >= self.input)
    }
}

/// `(x0 + x1) + ...`, in the order an iterator's `sum` adds (it starts from -0.0, the
/// identity of addition, so the first addition is exact).
pub(super) fn fold_sum(b: &mut KernelBuilder, ty: ScalarType, xs: &[ValueId]) -> ValueId {
    let mut xs = xs.iter().copied();
    let Some(first) = xs.next() else {
        return b.push(ty, Expr::Const(0.0));
    };
    xs.fold(first, |acc, x| {
        b.push(ty, Expr::Binary(BinaryFn::Add, acc, x))
    })
}
