//! The static int8 add (PyTorch's `quantized::add` and `quantized::add_relu`): two u8
//! tensors of one shape, each with its own scale and zero point, added as the values they
//! stand for and requantized to u8 with the output's parameters, ReLU fused. The residual
//! connections of quantized networks run on it, so that they stay in u8.

use super::affine::{QParams, round_half_even};
use crate::cpu::tensor_from;
use crate::{Result, Tensor, TensorError};
use rayon::prelude::*;

/// Elements per parallel task.
const CHUNK: usize = 1 << 14;

/// `requantize((a - a_zp) * a_scale + (b - b_zp) * b_scale)` elementwise, in f32: the sum
/// is multiplied by the f32 reciprocal of `out.scale`, rounded half to even, shifted by the
/// output zero point and clamped to `[0, 255]` (`[out_zp, 255]` under ReLU).
pub(super) fn add_static(
    op: &str,
    (a, aq): (&Tensor, QParams),
    (b, bq): (&Tensor, QParams),
    out: QParams,
    relu: bool,
) -> Result<Tensor> {
    let shape = a.shape();
    if shape != b.shape() {
        return Err(TensorError::shapes(
            op,
            &shape,
            &b.shape(),
            "quantized add takes two tensors of one shape",
        ));
    }
    let inverse = 1.0 / out.scale;
    let lo = if relu {
        out.zero_point.clamp(0, 255)
    } else {
        0
    };
    let (a_zp, b_zp) = (aq.zero_point as f32, bq.zero_point as f32);
    // Elementwise, so any one order of the elements serves: channels last when `a` is a
    // channels-last view (quantized convolutions write them), so that it is read in place.
    let channels_last = shape.len() == 4 && a.permute(&[0, 2, 3, 1])?.is_contiguous();
    let (a, b) = if channels_last {
        (a.permute(&[0, 2, 3, 1])?, b.permute(&[0, 2, 3, 1])?)
    } else {
        (a.clone(), b.clone())
    };
    let mut y = crate::cpu::try_uninit_buffer::<u8>(op, a.numel())?;
    a.with_slice(|a: &[u8]| {
        b.with_slice(|b: &[u8]| {
            y.par_chunks_mut(CHUNK)
                .zip(a.par_chunks(CHUNK).zip(b.par_chunks(CHUNK)))
                .for_each(|(y, (a, b))| {
                    for (y, (&a, &b)) in y.iter_mut().zip(a.iter().zip(b)) {
                        let v = (f32::from(a) - a_zp) * aq.scale + (f32::from(b) - b_zp) * bq.scale;
                        *y = round_half_even(v * inverse)
                            .saturating_add(out.zero_point)
                            .clamp(lo, 255) as u8;
                    }
                })
        })
    })??;
    if channels_last {
        tensor_from(y, &a.shape()).permute(&[0, 3, 1, 2])
    } else {
        Ok(tensor_from(y, &shape))
    }
}
