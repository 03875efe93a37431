//! Max pooling of u8 tensors stored channels last (what quantized convolutions write): each
//! output pixel is the elementwise maximum of the channel vectors of its window's pixels,
//! read in place and written channels last, so that no layout change runs before or after.

use super::windows::Window;
use crate::cpu::tensor_from;
use crate::{Result, Tensor};
use rayon::prelude::*;

/// The max pool of `x [N, C, H, W]` over `rows` x `cols` windows when `x` is a channels-last
/// view, as a channels-last view `[N, C, oH, oW]`; `None` for any other layout.
pub(super) fn max_values_u8(
    x: &Tensor,
    rows: &[Window],
    cols: &[Window],
) -> Result<Option<Tensor>> {
    let shape = x.shape();
    let nhwc = match shape.as_slice() {
        [_, _, _, _] => x.permute(&[0, 2, 3, 1])?,
        _ => return Ok(None),
    };
    if !nhwc.is_contiguous() {
        return Ok(None);
    }
    let [n, c, _, w] = [shape[0], shape[1], shape[2], shape[3]];
    let (oh, ow) = (rows.len(), cols.len());
    let mut out = crate::cpu::try_uninit_buffer::<u8>("max_pool2d", n * oh * ow * c)?;
    nhwc.with_slice(|x: &[u8]| {
        let image = x.len().checked_div(n).unwrap_or(0);
        out.par_chunks_mut((ow * c).max(1))
            .enumerate()
            .for_each(|(row, y)| {
                let (img, r) = (row / oh, row % oh);
                let src = &x[img * image..][..image];
                for (col, best) in cols.iter().zip(y.chunks_exact_mut(c.max(1))) {
                    // PyTorch's windows are never empty: the first tap seeds the maximum.
                    best.fill(0);
                    for iy in rows[r].positions() {
                        for ix in col.positions() {
                            let pixel = &src[(iy * w + ix) * c..][..c];
                            for (b, &v) in best.iter_mut().zip(pixel) {
                                *b = (*b).max(v);
                            }
                        }
                    }
                }
            })
    })?;
    Ok(Some(
        tensor_from(out, &[n, oh, ow, c]).permute(&[0, 3, 1, 2])?,
    ))
}
