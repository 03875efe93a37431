//! Pooling windows along one axis (PyTorch's output-size and window rules) and the kernels
//! that reduce over them or scatter gradients back, one `H x W` plane per parallel task.
//! Max pooling also runs on u8 (quantized activations: dequantization is monotonic); the u8
//! average is in [`avg_forward_u8`].

use super::Pool2dParams;
use crate::cpu::PAR_CHUNK;
use crate::storage::StorageElement;
use crate::{Float, Result, TensorError};
use rayon::prelude::*;

/// The input positions `start, start + step, ... < end` one output position reads along one
/// axis; `padded` is the window's length counting padding (for `count_include_pad`).
#[derive(Debug, Clone, Copy)]
pub(super) struct Window {
    start: usize,
    end: usize,
    step: usize,
    padded: usize,
}

impl Window {
    pub(super) fn positions(&self) -> impl Iterator<Item = usize> {
        (self.start..self.end).step_by(self.step)
    }

    fn len(&self) -> usize {
        self.end.saturating_sub(self.start)
    }

    /// The windows of max (`dilated`) or average pooling along `axis` of a plane of `size`.
    pub(super) fn strided(
        op: &str,
        p: &Pool2dParams,
        axis: usize,
        size: [usize; 2],
        dilated: bool,
    ) -> Result<Vec<Window>> {
        let out = Window::strided_len(op, p, axis, size, dilated)?;
        let (k, s, pad, d) = (
            p.kernel[axis] as i64,
            p.stride[axis] as i64,
            p.padding[axis] as i64,
            p.dilation[axis] as i64,
        );
        // `strided_len` checked that every value below fits in i64 with room to spare.
        let input = size[axis] as i64;
        let span = d * (k - 1) + 1;
        let mut windows = reserve(op, out)?;
        windows.extend((0..out as i64).map(|o| {
            let start = o * s - pad;
            if dilated {
                let end = (start + span).min(input);
                // The first tap inside the input.
                let first = if start < 0 {
                    start + (-start + d - 1) / d * d
                } else {
                    start
                };
                Window {
                    start: first as usize,
                    end: end.max(first) as usize,
                    step: d as usize,
                    padded: 0,
                }
            } else {
                let end = (start + k).min(input + pad);
                Window {
                    start: start.max(0) as usize,
                    end: end.min(input) as usize,
                    step: 1,
                    padded: (end - start) as usize,
                }
            }
        }));
        Ok(windows)
    }

    /// How many windows max (`dilated`) or average pooling has along `axis` of a plane of
    /// `size`, checking the params: O(1), so meta functions never build the windows.
    pub(super) fn strided_len(
        op: &str,
        p: &Pool2dParams,
        axis: usize,
        size: [usize; 2],
        dilated: bool,
    ) -> Result<usize> {
        let (k, s, pad, d) = (
            p.kernel[axis],
            p.stride[axis],
            p.padding[axis],
            p.dilation[axis],
        );
        if p.kernel.contains(&0) || p.stride.contains(&0) || p.dilation.contains(&0) {
            return Err(TensorError::invalid(
                op,
                format!(
                    "kernel_size, stride and dilation must be positive, got kernel_size {:?}, stride {:?}, dilation {:?}",
                    p.kernel, p.stride, p.dilation
                ),
            ));
        }
        if !dilated && p.dilation != [1, 1] {
            return Err(TensorError::invalid(
                op,
                format!("dilation must be [1, 1], got {:?}", p.dilation),
            ));
        }
        // Sizes and params beyond 2^40 are refused before any arithmetic can overflow.
        const LIMIT: usize = 1 << 40;
        if [k, s, pad, d, size[axis]].iter().any(|&v| v > LIMIT) {
            return Err(TensorError::invalid(
                op,
                format!(
                    "input plane {size:?}, kernel_size {:?}, stride {:?}, padding {:?} or dilation {:?} is larger than 2^40",
                    p.kernel, p.stride, p.padding, p.dilation
                ),
            ));
        }
        // Below 2^40 each, but dilation times kernel can still pass 2^63.
        let span = d
            .checked_mul(k.saturating_sub(1))
            .filter(|&v| v <= LIMIT)
            .map(|v| v + 1)
            .ok_or_else(|| {
                TensorError::invalid(
                    op,
                    format!(
                        "the dilated kernel (kernel_size {:?}, dilation {:?}) is larger than 2^40",
                        p.kernel, p.dilation
                    ),
                )
            })?;
        let half = if dilated { span / 2 } else { k / 2 };
        if pad > half {
            return Err(TensorError::invalid(
                op,
                format!(
                    "pad should be at most half of effective kernel size, but got padding {:?}, kernel_size {:?} and dilation {:?}",
                    p.padding, p.kernel, p.dilation
                ),
            ));
        }
        let input = size[axis] as i64;
        let (s, pad, span) = (s as i64, pad as i64, span as i64);
        let round_up = if p.ceil_mode { s - 1 } else { 0 };
        let mut out = (input + 2 * pad - span + round_up).div_euclid(s) + 1;
        // The last window must start inside the input or its left padding.
        if p.ceil_mode && (out - 1) * s >= input + pad {
            out -= 1;
        }
        if out < 1 {
            return Err(TensorError::invalid(
                op,
                format!(
                    "given input plane {size:?}, kernel_size {:?}, stride {:?}, padding {:?} and dilation {:?}, the calculated output size is too small",
                    p.kernel, p.stride, p.padding, p.dilation
                ),
            ));
        }
        Ok(out as usize)
    }

    /// PyTorch's adaptive bins: output `i` of `out` covers `floor(i*n/out) .. ceil((i+1)*n/out)`.
    /// Fallible: `out` windows are reserved first (a hostile output size is `OutOfMemory`), and
    /// the bounds are computed in u128, where `(i + 1) * n` cannot overflow.
    pub(super) fn adaptive(op: &str, n: usize, out: usize) -> Result<Vec<Window>> {
        let mut windows = reserve(op, out)?;
        let (n128, out128) = (n as u128, out as u128);
        windows.extend((0..out).map(|i| {
            let i = i as u128;
            let start = (i * n128 / out128) as usize;
            let end = ((i + 1) * n128).div_ceil(out128) as usize;
            Window {
                start,
                end,
                step: 1,
                padded: end - start,
            }
        }));
        Ok(windows)
    }
}

/// An element max pooling selects over: floats, where NaN wins as in PyTorch, and u8.
pub(super) trait MaxElement: StorageElement + PartialOrd {
    /// At most every value a window can hold: where all taps equal it, the first tap wins.
    const LOWEST: Self;
    /// Whether `self` replaces `best` as the window's maximum.
    fn beats(self, best: Self) -> bool;
}

macro_rules! float_max_element {
    ($($t:ty),*) => {$(
        impl MaxElement for $t {
            const LOWEST: Self = <$t>::NEG_INFINITY;
            fn beats(self, best: Self) -> bool {
                (self > best) | self.is_nan()
            }
        }
    )*};
}
float_max_element!(f32, f64);

impl MaxElement for u8 {
    const LOWEST: Self = 0;
    fn beats(self, best: Self) -> bool {
        self > best
    }
}

/// `count` planes read as `src` (`[H, W]`) and written as `dst`.
pub(super) struct Planes {
    count: usize,
    src: [usize; 2],
    dst: [usize; 2],
}

impl Planes {
    pub(super) fn new(count: usize, src: [usize; 2], dst: [usize; 2]) -> Planes {
        Planes { count, src, dst }
    }

    // Saturating: with no planes (`count` 0) the plane sizes may overflow, and nothing is
    // read or written; with planes, the meta functions have refused overflowing shapes.
    fn src_len(&self) -> usize {
        self.src[0].saturating_mul(self.src[1])
    }

    fn dst_len(&self) -> usize {
        self.dst[0].saturating_mul(self.dst[1])
    }
}

/// Fills `out` plane by plane with `fill(plane_index, plane)`, in parallel when large.
fn per_plane<T: Send>(out: &mut [T], plane: usize, fill: impl Fn(usize, &mut [T]) + Sync) {
    if plane == 0 {
        return;
    }
    if out.len() < PAR_CHUNK {
        out.chunks_mut(plane)
            .enumerate()
            .for_each(|(i, p)| fill(i, p));
    } else {
        out.par_chunks_mut(plane)
            .enumerate()
            .for_each(|(i, p)| fill(i, p));
    }
}

/// The window's divisor: its padded size or the number of input elements it covers.
pub(super) fn divisor(row: &Window, col: &Window, count_include_pad: bool) -> usize {
    if count_include_pad {
        row.padded * col.padded
    } else {
        row.len() * col.len()
    }
}

/// Max per window and the index of the (first) max in the plane; NaN wins, as in PyTorch.
pub(super) fn max_forward<T: MaxElement>(
    p: &Planes,
    rows: &[Window],
    cols: &[Window],
    x: &[T],
) -> Result<(Vec<T>, Vec<i64>)> {
    let (w, out_len) = (p.src[1], p.dst_len());
    let mut values = crate::cpu::try_uninit_buffer::<T>("pool", p.count * out_len)?;
    let mut indices = crate::cpu::try_uninit_buffer::<i64>("pool", p.count * out_len)?;
    let regular = regular_windows(rows).zip(regular_windows(cols));
    let fill = |i: usize, (out, idx): (&mut [T], &mut [i64])| {
        let src = &x[i * p.src_len()..][..p.src_len()];
        if let Some(((sh, kh), (sw, kw))) = regular {
            max_regular(src, w, (sh, kh), (sw, kw), rows.len(), cols.len(), out, idx);
            return;
        }
        for (r, row) in rows.iter().enumerate() {
            for (c, col) in cols.iter().enumerate() {
                // Branch-free selection: the data decides, so branches would mispredict.
                let (mut best, mut at) = (T::LOWEST, row.start * w + col.start);
                let mut y = row.start;
                while y < row.end {
                    let mut pos = y * w + col.start;
                    let row_end = y * w + col.end;
                    while pos < row_end {
                        let v = src[pos];
                        let better = v.beats(best);
                        best = if better { v } else { best };
                        at = if better { pos } else { at };
                        pos += col.step;
                    }
                    y += row.step;
                }
                out[r * cols.len() + c] = best;
                idx[r * cols.len() + c] = at as i64;
            }
        }
    };
    if out_len > 0 {
        let planes = values.chunks_mut(out_len).zip(indices.chunks_mut(out_len));
        if p.count * out_len < PAR_CHUNK {
            planes.enumerate().for_each(|(i, o)| fill(i, o));
        } else {
            values
                .par_chunks_mut(out_len)
                .zip(indices.par_chunks_mut(out_len))
                .enumerate()
                .for_each(|(i, o)| fill(i, o));
        }
    }
    Ok((values, indices))
}

/// Max per window without indices; NaN wins, as in PyTorch.
pub(super) fn max_values<T: MaxElement>(
    p: &Planes,
    rows: &[Window],
    cols: &[Window],
    x: &[T],
) -> Result<Vec<T>> {
    let (Some((sh, kh)), Some((sw, kw))) = (regular_windows(rows), regular_windows(cols)) else {
        return Ok(max_forward(p, rows, cols, x)?.0);
    };
    let (w, out_len) = (p.src[1], p.dst_len());
    let mut values = crate::cpu::try_uninit_buffer::<T>("pool", p.count * out_len)?;
    per_plane(&mut values, out_len, |i, out| {
        let src = &x[i * p.src_len()..][..p.src_len()];
        for (r, best) in out.chunks_mut(cols.len()).enumerate() {
            let first = r * sh * w;
            for (c, b) in best.iter_mut().enumerate() {
                *b = src[first + c * sw];
            }
            for ky in 0..kh {
                for kx in 0..kw {
                    let taps = &src[(r * sh + ky) * w + kx..];
                    for (c, b) in best.iter_mut().enumerate() {
                        let v = taps[c * sw];
                        *b = if v.beats(*b) { v } else { *b };
                    }
                }
            }
        }
    });
    Ok(values)
}

/// `(stride, size)` when every window is dense, equally long and `stride` apart from 0 (no
/// padding, dilation or clipping): the case pooling layers almost always hit.
fn regular_windows(windows: &[Window]) -> Option<(usize, usize)> {
    let first = windows.first()?;
    let size = first.len();
    let stride = match windows.get(1) {
        Some(second) => second.start.checked_sub(first.start)?,
        None => 1,
    };
    let dense = windows
        .iter()
        .enumerate()
        .all(|(i, w)| w.step == 1 && w.len() == size && w.start == i * stride);
    (dense && size > 0 && stride > 0).then_some((stride, size))
}

/// Max pooling over dense windows, one output row at a time with the tap loops outside and
/// the output columns innermost, so that the selection runs without data-dependent branches.
#[allow(clippy::too_many_arguments)]
fn max_regular<T: MaxElement>(
    src: &[T],
    w: usize,
    (sh, kh): (usize, usize),
    (sw, kw): (usize, usize),
    out_rows: usize,
    out_cols: usize,
    out: &mut [T],
    idx: &mut [i64],
) {
    for r in 0..out_rows {
        let best = &mut out[r * out_cols..][..out_cols];
        let at = &mut idx[r * out_cols..][..out_cols];
        let first = r * sh * w;
        for (c, (b, a)) in best.iter_mut().zip(at.iter_mut()).enumerate() {
            *b = src[first + c * sw];
            *a = (first + c * sw) as i64;
        }
        for ky in 0..kh {
            for kx in 0..kw {
                let base = (r * sh + ky) * w + kx;
                let taps = &src[base..];
                for (c, (b, a)) in best.iter_mut().zip(at.iter_mut()).enumerate() {
                    let v = taps[c * sw];
                    let better = v.beats(*b);
                    // Arithmetic rather than `if`, which compilers turn into branches.
                    *a += better as i64 * ((base + c * sw) as i64 - *a);
                    *b = if better { v } else { *b };
                }
            }
        }
    }
}

/// Adds each gradient to the input position its index names.
pub(super) fn max_backward<T: Float>(
    op: &str,
    p: &Planes,
    grad: &[T],
    indices: &[i64],
) -> Result<Vec<T>> {
    let plane = p.dst_len();
    if let Some(bad) = indices.iter().find(|&&i| i < 0 || i as usize >= plane) {
        return Err(TensorError::invalid(
            op,
            format!(
                "index {bad} is out of range for an input plane of {:?}",
                p.dst
            ),
        ));
    }
    let mut dx = vec![T::zero(); p.count * plane];
    per_plane(&mut dx, plane, |i, dst| {
        let range = i * p.src_len()..(i + 1) * p.src_len();
        for (&g, &at) in grad[range.clone()].iter().zip(&indices[range]) {
            dst[at as usize] = dst[at as usize] + g;
        }
    });
    Ok(dx)
}

/// Mean per window (see [`divisor`]).
pub(super) fn avg_forward<T: Float>(
    p: &Planes,
    rows: &[Window],
    cols: &[Window],
    count_include_pad: bool,
    x: &[T],
) -> Vec<T> {
    let w = p.src[1];
    let mut y = vec![T::zero(); p.count * p.dst_len()];
    per_plane(&mut y, p.dst_len(), |i, out| {
        let src = &x[i * p.src_len()..][..p.src_len()];
        for (r, row) in rows.iter().enumerate() {
            for (c, col) in cols.iter().enumerate() {
                let sum: T = row
                    .positions()
                    .map(|y| {
                        src[y * w + col.start..y * w + col.end]
                            .iter()
                            .copied()
                            .sum()
                    })
                    .sum();
                let n = divisor(row, col, count_include_pad);
                out[r * cols.len() + c] = if n == 0 {
                    T::zero()
                } else {
                    sum / T::from_f64(n as f64)
                };
            }
        }
    });
    y
}

/// Mean per window of u8 values whose zero point is `zero_point`, as PyTorch's quantized
/// average kernels on x86 compute it: `acc = sum - n * zero_point` is scaled by the f32
/// `1 / n`, rounded half to even (`nearbyint`) and the zero point added back, so that input
/// and output share their scale and zero point. With an odd zero point this differs from
/// rounding the mean of the stored values at exact halves. Padding never counts: the divisor
/// is the number of input elements (the op rejects counted padding).
pub(super) fn avg_forward_u8(
    p: &Planes,
    rows: &[Window],
    cols: &[Window],
    x: &[u8],
    zero_point: i64,
) -> Vec<u8> {
    let w = p.src[1];
    let mut y = vec![0u8; p.count * p.dst_len()];
    per_plane(&mut y, p.dst_len(), |i, out| {
        let src = &x[i * p.src_len()..][..p.src_len()];
        for (r, row) in rows.iter().enumerate() {
            for (c, col) in cols.iter().enumerate() {
                let sum: u64 = row
                    .positions()
                    .map(|y| {
                        src[y * w + col.start..y * w + col.end]
                            .iter()
                            .map(|&v| u64::from(v))
                            .sum::<u64>()
                    })
                    .sum();
                let n = divisor(row, col, false);
                out[r * cols.len() + c] = if n == 0 {
                    0
                } else {
                    requantize_mean(sum, n, zero_point)
                };
            }
        }
    });
    y
}

/// `clamp(round_half_even((sum - n * zero_point) * (1 / n)) + zero_point, 0, 255)`, the
/// product in f32 as PyTorch's `requantize_from_int`.
pub(super) fn requantize_mean(sum: u64, n: usize, zero_point: i64) -> u8 {
    let acc = sum as i64 - n as i64 * zero_point;
    let multiplier = (1.0 / n as f64) as f32;
    (crate::op::quant::round_half_even(acc as f32 * multiplier) + zero_point).clamp(0, 255) as u8
}

/// Spreads each gradient evenly over its window, the adjoint of [`avg_forward`].
pub(super) fn avg_backward<T: Float>(
    p: &Planes,
    rows: &[Window],
    cols: &[Window],
    count_include_pad: bool,
    grad: &[T],
) -> Vec<T> {
    let w = p.dst[1];
    let mut dx = vec![T::zero(); p.count * p.dst_len()];
    per_plane(&mut dx, p.dst_len(), |i, dst| {
        let src = &grad[i * p.src_len()..][..p.src_len()];
        for (r, row) in rows.iter().enumerate() {
            for (c, col) in cols.iter().enumerate() {
                let n = divisor(row, col, count_include_pad);
                if n == 0 {
                    continue;
                }
                let g = src[r * cols.len() + c] / T::from_f64(n as f64);
                for y in row.positions() {
                    for v in &mut dst[y * w + col.start..y * w + col.end] {
                        *v = *v + g;
                    }
                }
            }
        }
    });
    dx
}

/// Room for `out` windows, or `OutOfMemory` naming `op` (a hostile output size).
fn reserve(op: &str, out: usize) -> Result<Vec<Window>> {
    let mut windows = Vec::new();
    windows
        .try_reserve_exact(out)
        .map_err(|_| TensorError::OutOfMemory {
            op: op.into(),
            shape: vec![out],
            bytes: out.saturating_mul(std::mem::size_of::<Window>()),
        })?;
    Ok(windows)
}
