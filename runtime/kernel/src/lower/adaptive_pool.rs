//! Lowering of adaptive average and max pooling (with the max's i64 indices) and of adaptive
//! average pooling's backward into one kernel each, for any input and output sizes.
//!
//! PyTorch's bin `i` of `out` over `n` elements covers `floor(i*n/out) .. ceil((i+1)*n/out)`:
//! bins of different sizes that may overlap, whose bounds are not affine in `i`. They are
//! periodic though: with `g = gcd(n, out)`, the `out` bins are `g` blocks of `period = out/g`
//! bins, bin `rho + period*q` covering bin `rho`'s elements shifted by `q * span`
//! (`span = n/g`), and no bin leaves its block (bin `period - 1` ends at `span`). So one kernel
//! over the `[.., gH, gW]` block grid handles every residue pair `(rho_h, rho_w)` with loads
//! and stores whose indices are affine in the block loops: the forward reads each bin's
//! taps, unrolled, and stores its mean (row sums, then their sum, divided by the bin's size)
//! or its maximum and the flat in-plane index of the first maximum (NaN wins), folded in the
//! eager kernel's order; the backward gives each input element of a block `0 + g/n` of every
//! bin covering it, in the eager kernel's row-major order of the bins. Results equal the
//! eager kernels' bit for bit. The unrolled body reads `taps_h * taps_w` elements (`taps`: the
//! bins' sizes summed over one block, `span + period - 1` at most); above
//! [`MAX_UNROLLED_TAPS`] (large co-prime sizes) the eager kernel runs, except for an
//! average whose bins tile the input, which becomes an `avg_pool2d` window reduction
//! ([`super::pool`]) and a tiling backward ([`super::pool_backward`]). f32 and f64 values of
//! 3-D and 4-D tensors (any strided view; an empty result is a kernel over no points), and the
//! u8 average (`quantized_adaptive_avg_pool2d`, or the op on u8 values with zero point 0): each
//! bin's taps summed in i64 and requantized as [`super::quant_pool`]; other dtypes run the
//! eager kernel.

use super::Lowering;
use super::pool::{fold_sum, max_step};
use super::quant_pool;
use crate::schedule::schedule;
use crate::{
    BinaryFn, BufferRole, Expr, IndexExpr, KernelBuilder, LoopId, Result, ScalarType, SlotSource,
    Step, ValueId,
};
use tessera_fx::NodeId;
use tessera_tensor::layout::Layout;
use tessera_tensor::op::{Pool2dParams, PoolOp, QuantOp};
use tessera_tensor::{DType, Op, TensorMeta};

/// The most elements one kernel's unrolled body reads (per point of the block grid).
pub const MAX_UNROLLED_TAPS: usize = 1024;

/// PyTorch's adaptive bins along one axis, as `groups` blocks of `period` bins.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Bins {
    groups: usize,
    period: usize,
    /// Elements per block.
    span: usize,
    /// Bin `rho`'s elements in its block, `starts[rho] .. ends[rho]`, for `rho` in `0..period`.
    starts: Vec<usize>,
    ends: Vec<usize>,
}

impl Bins {
    /// The bins of `output` over `input` elements, or `None` when either is 0 or one block
    /// holds more than [`MAX_UNROLLED_TAPS`] bins (so no vector of a hostile size is built).
    fn of(input: usize, output: usize) -> Option<Bins> {
        if input == 0 || output == 0 {
            return None;
        }
        let g = gcd(input, output);
        let (period, span) = (output / g, input / g);
        if period > MAX_UNROLLED_TAPS {
            return None;
        }
        let (n, out) = (input as u128, output as u128);
        let starts = (0..period as u128)
            .map(|i| (i * n / out) as usize)
            .collect();
        let ends = (0..period as u128)
            .map(|i| ((i + 1) * n).div_ceil(out) as usize)
            .collect();
        Some(Bins {
            groups: g,
            period,
            span,
            starts,
            ends,
        })
    }

    fn size(&self, rho: usize) -> usize {
        self.ends[rho] - self.starts[rho]
    }

    /// The elements one block's bins read, overlaps counted twice (saturating).
    fn taps(&self) -> usize {
        (0..self.period).fold(0usize, |t, rho| t.saturating_add(self.size(rho)))
    }

    /// The bins of a block covering its element `r`, ascending.
    fn covering(&self, r: usize) -> impl Iterator<Item = usize> + '_ {
        (0..self.period).filter(move |&rho| self.starts[rho] <= r && r < self.ends[rho])
    }
}

fn gcd(mut a: usize, mut b: usize) -> usize {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// The bins along both plane axes, when their unrolled body fits.
fn plane_bins(input: [usize; 2], output: [usize; 2]) -> std::result::Result<[Bins; 2], String> {
    let (Some(rows), Some(cols)) = (Bins::of(input[0], output[0]), Bins::of(input[1], output[1]))
    else {
        return Err(format!(
            "adaptive bins {output:?} over {input:?} (empty, or more than \
             {MAX_UNROLLED_TAPS} bins per block)"
        ));
    };
    let taps = rows.taps().saturating_mul(cols.taps());
    if taps > MAX_UNROLLED_TAPS {
        return Err(format!(
            "adaptive bins {output:?} over {input:?} read {taps} taps per block \
             (more than {MAX_UNROLLED_TAPS})"
        ));
    }
    Ok([rows, cols])
}

/// The window of `avg_pool2d` equal to adaptive bins that tile the input, if they do.
fn tiling_window(input: [usize; 2], output: [usize; 2]) -> Option<Pool2dParams> {
    let tiles = (0..2).all(|a| output[a] > 0 && input[a].is_multiple_of(output[a]));
    let kernel = [input[0] / output[0].max(1), input[1] / output[1].max(1)];
    tiles.then_some(Pool2dParams {
        kernel,
        stride: kernel,
        padding: [0, 0],
        dilation: [1, 1],
        ceil_mode: false,
    })
}

/// f32 or f64, the dtypes these kernels compute in.
fn float_type(dtype: DType) -> std::result::Result<ScalarType, String> {
    match dtype {
        DType::F32 => Ok(ScalarType::F32),
        DType::F64 => Ok(ScalarType::F64),
        other => Err(format!("{other:?} adaptive pooling is not lowered")),
    }
}

/// `shape`'s lead dims followed by `[rows, cols]`.
fn with_plane(shape: &[usize], plane: [usize; 2]) -> Vec<usize> {
    let mut v = shape[..shape.len() - 2].to_vec();
    v.extend(plane);
    v
}

impl Lowering<'_> {
    /// Lowers adaptive pooling node `id` (forward) to a kernel, or runs its eager kernel
    /// (reported as a fallback).
    pub(super) fn adaptive_pool(&mut self, id: &NodeId, op: &Op) -> Result<()> {
        match self.adaptive_forward(id, op)? {
            Ok(()) => Ok(()),
            Err(why) => self.not_generated(id, op, &why),
        }
    }

    /// Lowers `adaptive_avg_pool2d_backward` node `id`: bins that tile the input write each
    /// once ([`super::pool_backward`]), others sum over their covering bins.
    pub(super) fn adaptive_pool_backward(&mut self, id: &NodeId, op: &Op) -> Result<()> {
        let grad = self.operands(id)?.first().copied();
        let (Some(grad), Some(out)) = (grad, self.meta(id)?.first().cloned()) else {
            return self.not_generated(id, op, "the node has no operand or no value");
        };
        let g = self.value(&grad)?.layout.shape;
        if (3..=4).contains(&out.shape.len())
            && g.len() == out.shape.len()
            && tiling_window(plane(&out.shape), plane(&g)).is_some()
        {
            return self.pool_backward(id, op);
        }
        match self.adaptive_backward(id, &grad, &out)? {
            Ok(()) => Ok(()),
            Err(why) => self.not_generated(id, op, &why),
        }
    }

    fn adaptive_forward(
        &mut self,
        id: &NodeId,
        op: &Op,
    ) -> Result<std::result::Result<(), String>> {
        let average = match op {
            Op::Pool(PoolOp::AdaptiveAvgPool2d { .. })
            | Op::Quant(QuantOp::AvgPool {
                pool: PoolOp::AdaptiveAvgPool2d { .. },
                ..
            }) => true,
            Op::Pool(PoolOp::AdaptiveMaxPool2d { .. }) => false,
            _ => return Ok(Err("not an adaptive pooling".into())),
        };
        let (Some(input), Some(out)) = (
            self.operands(id)?.first().copied(),
            self.meta(id)?.first().cloned(),
        ) else {
            return Ok(Err("the node has no input or no value".into()));
        };
        let x = self.value(&input)?;
        // The zero point of a u8 average, whose taps are summed in i64.
        let zero_point = quant_pool::u8_average(op, out.dtype == DType::U8).map(|(_, zp)| zp);
        let ty = match zero_point {
            Some(_) if out.dtype == DType::U8 => ScalarType::U8,
            Some(_) => {
                return Ok(Err(format!(
                    "a u8 average pool with a {:?} result",
                    out.dtype
                )));
            }
            None => match float_type(out.dtype) {
                Ok(ty) => ty,
                Err(why) => return Ok(Err(why)),
            },
        };
        let nd = out.shape.len();
        if self.program.slot(x.slot).meta.dtype != out.dtype
            || !(3..=4).contains(&nd)
            || x.layout.shape.len() != nd
            || x.layout.shape[..nd - 2] != out.shape[..nd - 2]
        {
            return Ok(Err(format!(
                "an input {:?} of another dtype or rank for a result of {:?}",
                x.layout.shape, out.shape
            )));
        }
        if out.shape.contains(&0) {
            let metas = self.meta(id)?;
            return self.empty_result(id, op, metas);
        }
        let (in_plane, out_plane) = (plane(&x.layout.shape), plane(&out.shape));
        let [rows, cols] = match plane_bins(in_plane, out_plane) {
            Ok(bins) => bins,
            // Large bins that tile the input: average pooling's window reduction.
            Err(_) if average && tiling_window(in_plane, out_plane).is_some() => {
                let params = tiling_window(in_plane, out_plane).expect("checked");
                let pool = PoolOp::AvgPool2d {
                    params,
                    count_include_pad: false,
                };
                let avg = match op {
                    Op::Quant(QuantOp::AvgPool { zero_point, .. }) => Op::Quant(QuantOp::AvgPool {
                        pool,
                        zero_point: *zero_point,
                    }),
                    _ => Op::Pool(pool),
                };
                return self.pool(id, &avg).map(Ok);
            }
            Err(why) => return Ok(Err(why)),
        };
        let name = format!("k{}_{}", self.kernel_count(), op.name());
        let mut b = KernelBuilder::new(name, with_plane(&out.shape, [rows.groups, cols.groups]));
        let xb = b.buffer(BufferRole::Input, ty, 0);
        let numel: usize = out.shape.iter().product();
        let vb = b.buffer(BufferRole::Output, ty, numel);
        let ib = (!average).then(|| b.buffer(BufferRole::Output, ScalarType::I64, numel));
        let (s, width) = (&x.layout.strides, in_plane[1]);
        let read_strides = with_plane(s, [rows.span * s[nd - 2], cols.span * s[nd - 1]]);
        let packed = Layout::contiguous(&out.shape).strides;
        let write_strides = with_plane(&packed, [rows.period * packed[nd - 2], cols.period]);
        let i64c = |b: &mut KernelBuilder, v: usize| b.push(ScalarType::I64, Expr::Const(v as f64));
        // The flat in-plane index of the block's first element: `qh*spanH*W + qw*spanW`.
        let corner = (!average).then(|| {
            let qh = b.push(ScalarType::I64, Expr::LoopIndex(LoopId::from_index(nd - 2)));
            let qw = b.push(ScalarType::I64, Expr::LoopIndex(LoopId::from_index(nd - 1)));
            let (row_step, col_step) = (i64c(&mut b, rows.span * width), i64c(&mut b, cols.span));
            let r = b.push(ScalarType::I64, Expr::Binary(BinaryFn::Mul, qh, row_step));
            let c = b.push(ScalarType::I64, Expr::Binary(BinaryFn::Mul, qw, col_step));
            b.push(ScalarType::I64, Expr::Binary(BinaryFn::Add, r, c))
        });
        for rh in 0..rows.period {
            for rw in 0..cols.period {
                let (ys, xs) = (
                    rows.starts[rh]..rows.ends[rh],
                    cols.starts[rw]..cols.ends[rw],
                );
                let taps: Vec<Vec<ValueId>> = ys
                    .clone()
                    .map(|y| {
                        xs.clone()
                            .map(|c| {
                                let index = IndexExpr {
                                    offset: x.layout.offset + y * s[nd - 2] + c * s[nd - 1],
                                    strides: read_strides.clone(),
                                };
                                b.push(ty, Expr::Load { buffer: xb, index })
                            })
                            .collect()
                    })
                    .collect();
                let store_at = IndexExpr {
                    offset: rh * packed[nd - 2] + rw,
                    strides: write_strides.clone(),
                };
                if let (Some(ib), Some(corner)) = (ib, corner) {
                    // Eager: from -inf at the bin's first element, a tap replaces the best so
                    // far when it is larger or NaN.
                    let mut best = b.push(ty, Expr::Const(f64::NEG_INFINITY));
                    let first = i64c(&mut b, ys.start * width + xs.start);
                    let mut index =
                        b.push(ScalarType::I64, Expr::Binary(BinaryFn::Add, corner, first));
                    for (y, row) in ys.clone().zip(&taps) {
                        for (c, &v) in xs.clone().zip(row) {
                            let shift = i64c(&mut b, y * width + c);
                            let here =
                                b.push(ScalarType::I64, Expr::Binary(BinaryFn::Add, corner, shift));
                            (best, index) = max_step(&mut b, ty, v, here, best, index);
                        }
                    }
                    b.store(vb, store_at.clone(), best);
                    b.store(ib, store_at, index);
                } else if let Some(zero_point) = zero_point {
                    let sum = quant_pool::sum_u8(&mut b, taps.iter().flatten().copied());
                    let n = rows.size(rh) * cols.size(rw);
                    let n = b.push(ScalarType::I64, Expr::Const(n as f64));
                    let mean = quant_pool::requantize_mean(&mut b, sum, n, zero_point);
                    b.store(vb, store_at, mean);
                } else {
                    // Eager: each row's sum, then the sum of the rows, over the bin's size.
                    let sums: Vec<ValueId> =
                        taps.iter().map(|row| fold_sum(&mut b, ty, row)).collect();
                    let sum = fold_sum(&mut b, ty, &sums);
                    let n = b.push(ty, Expr::Const((rows.size(rh) * cols.size(rw)) as f64));
                    let mean = b.push(ty, Expr::Binary(BinaryFn::Div, sum, n));
                    b.store(vb, store_at, mean);
                }
            }
        }
        let mut outputs = vec![(out.clone(), vb)];
        if let (Some(ib), Some(indices)) = (ib, self.meta(id)?.get(1).cloned()) {
            outputs.push((indices, ib));
        }
        self.push_block_kernel(id, b, Some((xb, x.slot)), outputs)?;
        Ok(Ok(()))
    }

    fn adaptive_backward(
        &mut self,
        id: &NodeId,
        grad: &NodeId,
        out: &TensorMeta,
    ) -> Result<std::result::Result<(), String>> {
        let g = self.value(grad)?;
        let ty = match float_type(out.dtype) {
            Ok(ty) => ty,
            Err(why) => return Ok(Err(why)),
        };
        let nd = out.shape.len();
        if self.program.slot(g.slot).meta.dtype != out.dtype
            || !(3..=4).contains(&nd)
            || g.layout.shape.len() != nd
            || g.layout.shape[..nd - 2] != out.shape[..nd - 2]
        {
            return Ok(Err(format!(
                "a gradient {:?} of another dtype or rank for a result of {:?}",
                g.layout.shape, out.shape
            )));
        }
        if out.shape.contains(&0) || g.layout.shape.contains(&0) {
            let op = Op::Pool(PoolOp::AdaptiveAvgPool2dBackward {
                input_size: plane(&out.shape),
            });
            return self.empty_result(id, &op, vec![out.clone()]);
        }
        let [rows, cols] = match plane_bins(plane(&out.shape), plane(&g.layout.shape)) {
            Ok(bins) => bins,
            Err(why) => return Ok(Err(why)),
        };
        let name = format!("k{}_adaptive_avg_pool2d_backward", self.kernel_count());
        let mut b = KernelBuilder::new(name, with_plane(&out.shape, [rows.groups, cols.groups]));
        let gb = b.buffer(BufferRole::Input, ty, 0);
        let numel: usize = out.shape.iter().product();
        let ob = b.buffer(BufferRole::Output, ty, numel);
        let s = &g.layout.strides;
        let read_strides = with_plane(s, [rows.period * s[nd - 2], cols.period * s[nd - 1]]);
        let packed = Layout::contiguous(&out.shape).strides;
        let write_strides = with_plane(&packed, [rows.span * packed[nd - 2], cols.span]);
        let zero = b.push(ty, Expr::Const(0.0));
        for rh in 0..rows.span {
            for rw in 0..cols.span {
                // Eager: `dx += g / n` for every bin in row-major order, from zeros.
                let mut sum = zero;
                for bin_h in rows.covering(rh) {
                    for bin_w in cols.covering(rw) {
                        let index = IndexExpr {
                            offset: g.layout.offset + bin_h * s[nd - 2] + bin_w * s[nd - 1],
                            strides: read_strides.clone(),
                        };
                        let grad = b.push(ty, Expr::Load { buffer: gb, index });
                        let n = rows.size(bin_h) * cols.size(bin_w);
                        let n = b.push(ty, Expr::Const(n as f64));
                        let share = b.push(ty, Expr::Binary(BinaryFn::Div, grad, n));
                        sum = b.push(ty, Expr::Binary(BinaryFn::Add, sum, share));
                    }
                }
                let index = IndexExpr {
                    offset: rh * packed[nd - 2] + rw,
                    strides: write_strides.clone(),
                };
                b.store(ob, index, sum);
            }
        }
        self.push_block_kernel(id, b, Some((gb, g.slot)), vec![(out.clone(), ob)])?;
        Ok(Ok(()))
    }

    /// The empty values `metas` of node `id` (an empty batch or output plane): a kernel over
    /// no points that reads nothing, so the device has a kernel for them too.
    fn empty_result(
        &mut self,
        id: &NodeId,
        op: &Op,
        metas: Vec<TensorMeta>,
    ) -> Result<std::result::Result<(), String>> {
        let Some(shape) = metas.first().map(|m| m.shape.clone()) else {
            return Ok(Err("the node has no value".into()));
        };
        let name = format!("k{}_{}", self.kernel_count(), op.name());
        let mut b = KernelBuilder::new(name, shape.clone());
        let mut outputs = Vec::new();
        for meta in metas {
            let Some(ty) = ScalarType::of_buffer(meta.dtype) else {
                return Ok(Err(format!("{:?} values", meta.dtype)));
            };
            if meta.shape != shape {
                return Ok(Err("outputs of different shapes".into()));
            }
            let buffer = b.buffer(BufferRole::Output, ty, 0);
            // A narrow integer (a half type) is computed in i64 (f32) and converted.
            let zero = b.push(ty.compute(), Expr::Const(0.0));
            let zero = if ty.compute() != ty {
                b.push(ty, Expr::Cast(zero))
            } else {
                zero
            };
            let index = IndexExpr {
                offset: 0,
                strides: Layout::contiguous(&meta.shape).strides,
            };
            b.store(buffer, index, zero);
            outputs.push((meta, buffer));
        }
        self.push_block_kernel(id, b, None, outputs)?;
        Ok(Ok(()))
    }

    /// Finishes a block-grid kernel reading `input` (its buffer and slot) and writing
    /// `outputs` (packed, one per value of node `id`), and makes them the node's values.
    fn push_block_kernel(
        &mut self,
        id: &NodeId,
        b: KernelBuilder,
        input: Option<(crate::BufferId, crate::SlotId)>,
        outputs: Vec<(TensorMeta, crate::BufferId)>,
    ) -> Result<()> {
        let mut kernel = b.finish();
        if let Some((ib, _)) = input {
            kernel.buffers[ib.index()].len = kernel.buffer_reach(ib);
        }
        schedule(&mut kernel);
        kernel.verify()?;
        let values: Vec<_> = outputs
            .into_iter()
            .map(|(meta, _)| {
                let layout = Layout::contiguous(&meta.shape);
                self.slot(id, meta, SlotSource::Step, layout)
            })
            .collect();
        let nodes = self.node_names(std::slice::from_ref(id))?;
        self.program.steps.push(Step::Kernel {
            kernel,
            inputs: input.map(|(_, slot)| slot).into_iter().collect(),
            outputs: values.iter().map(|v| v.slot).collect(),
            nodes,
        });
        self.values.insert(*id, values);
        Ok(())
    }
}

/// The `[H, W]` of a 3-D or 4-D shape (callers checked the rank).
fn plane(shape: &[usize]) -> [usize; 2] {
    [shape[shape.len() - 2], shape[shape.len() - 1]]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every bin's elements, as the eager kernel's `floor .. ceil` formula gives them.
    fn eager_bins(n: usize, out: usize) -> Vec<(usize, usize)> {
        (0..out)
            .map(|i| (i * n / out, ((i + 1) * n).div_ceil(out)))
            .collect()
    }

    #[test]
    fn blocks_repeat_the_first_period_of_bins() {
        for (n, out) in [
            (5, 3),
            (7, 4),
            (10, 3),
            (3, 5),
            (1, 1),
            (6, 4),
            (12, 8),
            (4, 12),
        ] {
            let bins = Bins::of(n, out).unwrap();
            let rebuilt: Vec<(usize, usize)> = (0..out)
                .map(|i| {
                    let (q, rho) = (i / bins.period, i % bins.period);
                    let shift = q * bins.span;
                    (bins.starts[rho] + shift, bins.ends[rho] + shift)
                })
                .collect();
            assert_eq!(rebuilt, eager_bins(n, out), "{n} -> {out}");
            assert_eq!(bins.groups * bins.span, n);
            assert!(bins.ends.iter().all(|&e| e <= bins.span), "{n} -> {out}");
        }
    }

    #[test]
    fn every_element_is_covered_and_large_coprime_sizes_are_refused() {
        let bins = Bins::of(7, 4).unwrap();
        let covers: Vec<Vec<usize>> = (0..7).map(|r| bins.covering(r).collect()).collect();
        assert_eq!(covers[1], vec![0, 1]);
        assert!(covers.iter().all(|c| !c.is_empty()));
        assert!(plane_bins([1000, 4], [999, 2]).is_err());
        assert!(Bins::of(5, 0).is_none());
    }
}
