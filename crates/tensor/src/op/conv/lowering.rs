//! Convolution kernels as im2col + GEMM: each image and group becomes one matrix product
//! (`W[C_out/g, C_in/g*kH*kW] @ cols[C_in/g*kH*kW, oH*oW]`); batches run in parallel with
//! single-threaded GEMMs, a single image uses a parallel GEMM.

use super::Geometry;
use crate::Float;
use crate::op::matmul::{MatrixRef, gemm_into};
use rayon::prelude::*;

/// A packed row-major matrix with `cols` columns starting at `offset`.
fn row_major(offset: usize, cols: usize) -> MatrixRef {
    MatrixRef {
        offset,
        row_stride: cols,
        col_stride: 1,
    }
}

/// The transpose of a packed row-major matrix with `cols` columns starting at `offset`.
fn transposed(offset: usize, cols: usize) -> MatrixRef {
    MatrixRef {
        offset,
        row_stride: 1,
        col_stride: cols,
    }
}

/// Output positions `o` in `lo..hi` whose input position `o*stride + offset - pad` lies in
/// `0..in_len`.
fn valid_outputs(
    out_len: usize,
    in_len: usize,
    stride: usize,
    pad: usize,
    offset: usize,
) -> (usize, usize) {
    if in_len == 0 || pad + in_len <= offset {
        return (0, 0);
    }
    let lo = if offset >= pad {
        0
    } else {
        (pad - offset).div_ceil(stride)
    };
    let hi = ((pad + in_len - 1 - offset) / stride + 1).min(out_len);
    (lo.min(hi), hi)
}

/// Calls `visit(row, oy, ox_range, ix_start, input_row_offset)` for every im2col row (one per
/// channel and kernel tap) and output row whose input row lies inside the image; `ox_range`
/// holds the output columns that read inside the image, starting at input column `ix_start`.
fn for_each_patch_row(
    g: &Geometry,
    mut visit: impl FnMut(usize, usize, (usize, usize), usize, usize),
) {
    for c in 0..g.cin_g() {
        for_each_channel_patch_row(g, c, |row, oy, range, ix0, src_row| {
            visit(c * g.kh * g.kw + row, oy, range, ix0, src_row)
        });
    }
}

/// [`for_each_patch_row`] for the rows of input channel `c` alone, `row` counted from that
/// channel's first (`kH * kW` rows).
fn for_each_channel_patch_row(
    g: &Geometry,
    c: usize,
    mut visit: impl FnMut(usize, usize, (usize, usize), usize, usize),
) {
    let p = &g.params;
    for i in 0..g.kh {
        for j in 0..g.kw {
            let row = i * g.kw + j;
            let (x_lo, x_hi) =
                valid_outputs(g.ow, g.w, p.stride[1], p.padding[1], j * p.dilation[1]);
            if x_lo == x_hi {
                continue;
            }
            let (y_lo, y_hi) =
                valid_outputs(g.oh, g.h, p.stride[0], p.padding[0], i * p.dilation[0]);
            for oy in y_lo..y_hi {
                let iy = oy * p.stride[0] + i * p.dilation[0] - p.padding[0];
                let ix0 = (x_lo * p.stride[1] + j * p.dilation[1]) - p.padding[1];
                visit(row, oy, (x_lo, x_hi), ix0, (c * g.h + iy) * g.w);
            }
        }
    }
}

/// Fills `cols[C_in/g*kH*kW, oH*oW]` with the patches of one image group `x[C_in/g, H, W]`,
/// its channels shared out across the thread pool when `parallel` (a single image, whose
/// GEMM is parallel too).
fn im2col<T: Float>(g: &Geometry, x: &[T], cols: &mut [T], parallel: bool) {
    let (ow, s) = (g.ow, g.params.stride[1]);
    let plane = g.oh * ow;
    let per_channel = g.kh * g.kw * plane;
    if per_channel == 0 {
        return;
    }
    let channel = |(c, rows): (usize, &mut [T])| {
        rows.fill(T::zero());
        for_each_channel_patch_row(g, c, |row, oy, (lo, hi), ix0, src_row| {
            let dst = &mut rows[row * plane + oy * ow..][lo..hi];
            let src = &x[src_row + ix0..];
            if s == 1 {
                dst.copy_from_slice(&src[..hi - lo]);
            } else {
                for (d, &v) in dst.iter_mut().zip(src.iter().step_by(s)) {
                    *d = v;
                }
            }
        });
    };
    if parallel {
        cols.par_chunks_mut(per_channel)
            .enumerate()
            .for_each(channel);
    } else {
        cols.chunks_mut(per_channel).enumerate().for_each(channel);
    }
}

/// Adds every patch entry of `cols` back to its input position in `dx[C_in/g, H, W]`.
fn col2im<T: Float>(g: &Geometry, cols: &[T], dx: &mut [T]) {
    let (ow, s) = (g.ow, g.params.stride[1]);
    let plane = g.oh * ow;
    for_each_patch_row(g, |row, oy, (lo, hi), ix0, dst_row| {
        let src = &cols[row * plane + oy * ow..][lo..hi];
        let dst = &mut dx[dst_row + ix0..];
        if s == 1 {
            for (d, &v) in dst.iter_mut().zip(src) {
                *d = *d + v;
            }
        } else {
            for (d, &v) in dst.iter_mut().step_by(s).zip(src) {
                *d = *d + v;
            }
        }
    });
}

/// Runs `f(image, chunk, parallel_gemm)` over `out` split per image: images in parallel with
/// serial GEMMs when there are several, else one image with a parallel GEMM.
fn per_image<T: Float>(out: &mut [T], n: usize, f: impl Fn(usize, &mut [T], bool) + Sync) {
    if out.is_empty() {
        return;
    }
    let len = out.len() / n;
    if n > 1 {
        out.par_chunks_mut(len)
            .enumerate()
            .for_each(|(i, chunk)| f(i, chunk, false));
    } else {
        f(0, out, true);
    }
}

/// `y[N, C_out, oH, oW] = conv(x, w) + bias`.
pub(super) fn forward<T: Float>(
    g: &Geometry,
    x: &[T],
    w: &[T],
    bias: Option<&[T]>,
) -> crate::Result<Vec<T>> {
    let mut out = crate::cpu::try_uninit_buffer::<T>("conv", g.n * g.c_out * g.oh * g.ow)?;
    forward_into(g, x, w, bias, 0, &mut out)?;
    Ok(out)
}

/// The images `first..` of `y = conv(x, w) + bias` into `out`, which holds a whole number of
/// packed output images; `x` is the whole packed input.
pub(super) fn forward_into<T: Float>(
    g: &Geometry,
    x: &[T],
    w: &[T],
    bias: Option<&[T]>,
    first: usize,
    out: &mut [T],
) -> crate::Result<()> {
    if let Some((x, w, bias, out)) = as_f32(x, w, bias, out)
        && super::direct::applies(g)
    {
        return super::direct::forward_into(g, x, w, bias, Default::default(), first, out);
    }
    let (groups, cin_g, cout_g, k) = (g.params.groups, g.cin_g(), g.cout_g(), g.patch_len());
    let (in_plane, out_plane) = (g.h * g.w, g.oh * g.ow);
    let images = out.len().checked_div(g.c_out * out_plane).unwrap_or(0);
    let patches =
        super::patches::Patches::new(if g.is_pointwise() { 0 } else { k * out_plane }, images)?;
    per_image(out, images, |image, y, parallel| {
        let n = first + image;
        let mut cols = patches.take();
        for grp in 0..groups {
            let x_offset = (n * g.c_in + grp * cin_g) * in_plane;
            let dst = &mut y[grp * cout_g * out_plane..][..cout_g * out_plane];
            let (rhs, rhs_ref) = if g.is_pointwise() {
                (x, row_major(x_offset, out_plane))
            } else {
                im2col(g, &x[x_offset..][..cin_g * in_plane], &mut cols, parallel);
                (&cols[..], row_major(0, out_plane))
            };
            let lhs = row_major(grp * cout_g * k, k);
            let dims = (cout_g, out_plane, k);
            gemm_into(dst, w, lhs, rhs, rhs_ref, dims, false, parallel);
            // The bias is added after the GEMM: its accumulate path is slower than this pass.
            if let Some(b) = bias {
                for (row, &v) in dst.chunks_mut(out_plane).zip(&b[grp * cout_g..]) {
                    row.iter_mut().for_each(|o| *o = *o + v);
                }
            }
        }
        patches.give_back(cols);
    });
    Ok(())
}

/// The operands of a forward convolution as f32 slices, when `T` is f32.
#[allow(clippy::type_complexity)] // the four operands, as given
pub(super) fn as_f32<'a, T: Float>(
    x: &'a [T],
    w: &'a [T],
    bias: Option<&'a [T]>,
    out: &'a mut [T],
) -> Option<(&'a [f32], &'a [f32], Option<&'a [f32]>, &'a mut [f32])> {
    if T::DTYPE != crate::DType::F32 {
        return None;
    }
    // SAFETY: `T` is f32 (its dtype says so, and only f32 has that dtype), so each slice is
    // reinterpreted as itself with the same length and lifetime.
    unsafe {
        let cast = |s: &'a [T]| std::slice::from_raw_parts(s.as_ptr() as *const f32, s.len());
        Some((
            cast(x),
            cast(w),
            bias.map(cast),
            std::slice::from_raw_parts_mut(out.as_mut_ptr() as *mut f32, out.len()),
        ))
    }
}

/// `dx[N, C_in, H, W] = col2im(w^T @ grad_out)` per image and group.
pub(super) fn backward_input<T: Float>(g: &Geometry, grad_out: &[T], w: &[T]) -> Vec<T> {
    let (groups, cin_g, cout_g, k) = (g.params.groups, g.cin_g(), g.cout_g(), g.patch_len());
    let (in_plane, out_plane) = (g.h * g.w, g.oh * g.ow);
    let mut dx = vec![T::zero(); g.n * g.c_in * in_plane];
    per_image(&mut dx, g.n, |n, dx, parallel| {
        let mut cols = vec![T::zero(); if g.is_pointwise() { 0 } else { k * out_plane }];
        for grp in 0..groups {
            let go = row_major((n * g.c_out + grp * cout_g) * out_plane, out_plane);
            let wt = transposed(grp * cout_g * k, k);
            let dst = &mut dx[grp * cin_g * in_plane..][..cin_g * in_plane];
            let dims = (k, out_plane, cout_g);
            if g.is_pointwise() {
                gemm_into(dst, w, wt, grad_out, go, dims, false, parallel);
            } else {
                gemm_into(&mut cols, w, wt, grad_out, go, dims, false, parallel);
                col2im(g, &cols, dst);
            }
        }
    });
    dx
}

/// `dw[C_out, C_in/g, kH, kW] = sum over images of grad_out @ cols^T` per group.
pub(super) fn backward_weight<T: Float>(g: &Geometry, x: &[T], grad_out: &[T]) -> Vec<T> {
    let (groups, cin_g, cout_g, k) = (g.params.groups, g.cin_g(), g.cout_g(), g.patch_len());
    let (in_plane, out_plane) = (g.h * g.w, g.oh * g.ow);
    let len = g.c_out * k;
    // Adds image `n`'s contribution to `dw`, reusing `cols` as scratch.
    let add_image = |n: usize, dw: &mut [T], cols: &mut Vec<T>, parallel: bool| {
        for grp in 0..groups {
            let x_offset = (n * g.c_in + grp * cin_g) * in_plane;
            let (rhs, rhs_ref) = if g.is_pointwise() {
                (x, transposed(x_offset, out_plane))
            } else {
                cols.resize(k * out_plane, T::zero());
                im2col(g, &x[x_offset..][..cin_g * in_plane], cols, parallel);
                (&cols[..], transposed(0, out_plane))
            };
            let go = row_major((n * g.c_out + grp * cout_g) * out_plane, out_plane);
            let dst = &mut dw[grp * cout_g * k..][..cout_g * k];
            gemm_into(
                dst,
                grad_out,
                go,
                rhs,
                rhs_ref,
                (cout_g, k, out_plane),
                true,
                parallel,
            );
        }
    };
    if g.n <= 1 {
        let mut dw = vec![T::zero(); len];
        (0..g.n).for_each(|n| add_image(n, &mut dw, &mut Vec::new(), true));
        return dw;
    }
    (0..g.n)
        .into_par_iter()
        .fold(
            || (vec![T::zero(); len], Vec::new()),
            |(mut dw, mut cols), n| {
                add_image(n, &mut dw, &mut cols, false);
                (dw, cols)
            },
        )
        .map(|(dw, _)| dw)
        .reduce(
            || vec![T::zero(); len],
            |mut a, b| {
                a.iter_mut().zip(&b).for_each(|(a, &b)| *a = *a + b);
                a
            },
        )
}
