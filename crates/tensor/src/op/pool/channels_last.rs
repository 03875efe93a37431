//! Pooling of u8 tensors stored channels last (what quantized convolutions write): each
//! output pixel is the elementwise maximum, or the rounded mean, of the channel vectors of
//! its window's pixels, read in place and written channels last, so that no layout change
//! runs before or after.

use super::windows::{Window, divisor, requantize_mean};
use crate::cpu::tensor_from;
use crate::{Result, Tensor};
use rayon::prelude::*;

/// `pixel(window_row, window_col, image, out, scratch)` for every output pixel of `x [N, C, H, W]`
/// over `rows` x `cols` windows when `x` is a channels-last view (`image` is one image's
/// `[H, W, C]` bytes, `out` the pixel's `C` channels, `scratch` a buffer each parallel task
/// reuses), as a channels-last view
/// `[N, C, oH, oW]`; `None` for any other layout.
fn pool_channels_last(
    op: &str,
    x: &Tensor,
    rows: &[Window],
    cols: &[Window],
    pixel: impl Fn(&Window, &Window, &[u8], &mut [u8], &mut Vec<u32>) + Sync,
) -> Result<Option<Tensor>> {
    let shape = x.shape();
    let nhwc = match shape.as_slice() {
        [_, _, _, _] => x.permute(&[0, 2, 3, 1])?,
        _ => return Ok(None),
    };
    if !nhwc.is_contiguous() {
        return Ok(None);
    }
    let [n, c] = [shape[0], shape[1]];
    let (oh, ow) = (rows.len(), cols.len());
    let mut out = crate::cpu::try_uninit_buffer::<u8>(op, n * oh * ow * c)?;
    nhwc.with_slice(|x: &[u8]| {
        let image = x.len().checked_div(n).unwrap_or(0);
        out.par_chunks_mut((ow * c).max(1))
            .enumerate()
            .for_each_init(Vec::new, |scratch, (row, y)| {
                let (img, r) = (row / oh, row % oh);
                let src = &x[img * image..][..image];
                for (col, out) in cols.iter().zip(y.chunks_exact_mut(c.max(1))) {
                    pixel(&rows[r], col, src, out, scratch);
                }
            })
    })?;
    Ok(Some(
        tensor_from(out, &[n, oh, ow, c]).permute(&[0, 3, 1, 2])?,
    ))
}

/// The max pool of `x [N, C, H, W]` over `rows` x `cols` windows when `x` is a channels-last
/// view, as a channels-last view; `None` for any other layout.
pub(super) fn max_values_u8(
    x: &Tensor,
    rows: &[Window],
    cols: &[Window],
) -> Result<Option<Tensor>> {
    let w = x.shape().get(3).copied().unwrap_or(0);
    pool_channels_last("max_pool2d", x, rows, cols, |row, col, src, best, _| {
        let c = best.len();
        // PyTorch's windows are never empty; 0 is the smallest u8.
        best.fill(0);
        for iy in row.positions() {
            for ix in col.positions() {
                for (b, &v) in best.iter_mut().zip(&src[(iy * w + ix) * c..][..c]) {
                    *b = (*b).max(v);
                }
            }
        }
    })
}

/// The average pool (padding never counted) of `x [N, C, H, W]` whose zero point is
/// `zero_point` over `rows` x `cols` windows when `x` is a channels-last view, rounding as
/// the planar u8 average does; `None` for any other layout.
pub(super) fn avg_values_u8(
    x: &Tensor,
    rows: &[Window],
    cols: &[Window],
    zero_point: i64,
) -> Result<Option<Tensor>> {
    let w = x.shape().get(3).copied().unwrap_or(0);
    pool_channels_last("avg_pool2d", x, rows, cols, |row, col, src, mean, sums| {
        let c = mean.len();
        sums.clear();
        sums.resize(c, 0);
        for iy in row.positions() {
            for ix in col.positions() {
                for (s, &v) in sums.iter_mut().zip(&src[(iy * w + ix) * c..][..c]) {
                    *s += u32::from(v);
                }
            }
        }
        let n = divisor(row, col, false);
        for (m, &s) in mean.iter_mut().zip(sums.iter()) {
            *m = if n == 0 {
                0
            } else {
                requantize_mean(u64::from(s), n, zero_point)
            };
        }
    })
}
