//! Affine quantization of values: choosing a scale and zero point from an observed range
//! (PyTorch's observers and fbgemm's dynamic choice), and the quantize/dequantize kernels
//! per tensor and per channel. Rounding is half to even, as `torch.round` and `nearbyint`.

use crate::cpu::tensor_from;
use crate::storage::StorageElement;
use crate::{DType, Result, Tensor, TensorError};
use rayon::prelude::*;

/// Elements per parallel task of the elementwise kernels.
const CHUNK: usize = 1 << 15;

/// A scale and zero point: `real = (q - zero_point) * scale`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct QParams {
    pub scale: f32,
    pub zero_point: i64,
}

impl QParams {
    pub fn new(scale: f32, zero_point: i64) -> Self {
        QParams { scale, zero_point }
    }
}

/// PyTorch's `MinMaxObserver` with `per_tensor_affine`: the range is widened to hold 0, then
/// `scale = (max - min) / (qmax - qmin)` (at least `f32::EPSILON`) and
/// `zero_point = qmin - round(min / scale)`, clamped to `[qmin, qmax]`.
pub fn affine_qparams(min: f32, max: f32, (qmin, qmax): (i64, i64)) -> QParams {
    let (min, max) = (min.min(0.0), max.max(0.0));
    let scale = ((max - min) / (qmax - qmin) as f32).max(f32::EPSILON);
    let zero_point = (qmin - (min / scale).round_ties_even() as i64).clamp(qmin, qmax);
    QParams::new(scale, zero_point)
}

/// PyTorch's `per_tensor_symmetric`/`per_channel_symmetric` for a signed range:
/// `scale = max(|min|, |max|) / ((qmax - qmin) / 2)` (at least `f32::EPSILON`), zero point 0.
pub fn symmetric_qparams(min: f32, max: f32, (qmin, qmax): (i64, i64)) -> QParams {
    let bound = (-min.min(0.0)).max(max.max(0.0));
    let scale = (bound / ((qmax - qmin) as f32 / 2.0)).max(f32::EPSILON);
    QParams::new(scale, 0)
}

/// fbgemm's `ChooseQuantizationParams` as PyTorch's dynamic linear uses it for activations:
/// u8 in `[0, 255]` (`[0, 127]` with `reduce_range`), the range widened to hold 0, a scale of
/// 0.1 for an all-zero range, and the zero point from whichever end loses less precision.
pub fn dynamic_qparams(min: f32, max: f32, reduce_range: bool) -> QParams {
    let (qmin, qmax) = if reduce_range {
        (0i64, 127i64)
    } else {
        (0, 255)
    };
    let (min, max) = (f64::from(min.min(0.0)), f64::from(max.max(0.0)));
    let mut scale = ((max - min) / (qmax - qmin) as f64) as f32;
    if scale == 0.0 || !(1.0 / scale).is_finite() {
        scale = 0.1;
    }
    let s = f64::from(scale);
    let (from_min, from_max) = (qmin as f64 - min / s, qmax as f64 - max / s);
    let (err_min, err_max) = (
        (qmin as f64).abs() + (min / s).abs(),
        (qmax as f64).abs() + (max / s).abs(),
    );
    let initial = if err_min < err_max {
        from_min
    } else {
        from_max
    };
    let zero_point = (initial.round_ties_even() as i64).clamp(qmin, qmax);
    QParams::new(scale, zero_point)
}

/// An integer storage type a quantized tensor can have.
pub(crate) trait QInt: StorageElement + Copy + Send + Sync {
    fn from_clamped(v: i64) -> Self;
    fn widen(self) -> i64;
}

macro_rules! qint {
    ($($t:ty),*) => {$(
        impl QInt for $t {
            #[inline]
            fn from_clamped(v: i64) -> Self {
                v as $t
            }
            #[inline]
            fn widen(self) -> i64 {
                self as i64
            }
        }
    )*};
}
qint!(u8, i8, i32);

/// Runs `$body` with `$Q` bound to the Rust type of a quantized dtype.
macro_rules! qint_dispatch {
    ($dtype:expr, $op:expr, $Q:ident => $body:expr) => {
        match $dtype {
            DType::U8 => {
                type $Q = u8;
                $body
            }
            DType::I8 => {
                type $Q = i8;
                $body
            }
            DType::I32 => {
                type $Q = i32;
                $body
            }
            other => return Err(TensorError::dtype($op, other)),
        }
    };
}

/// `x` rounded to the nearest integer, ties to even, as an integer (`torch.round`,
/// `nearbyint`). On x86-64 this is `cvtss2si` under the default rounding mode (round to
/// nearest even); `f32::round_ties_even` would be a libm call there, as baseline x86-64 has
/// no SSE4.1 `roundss`. Values beyond i32 (and NaN, which gives 0) take the slow path.
#[inline]
pub(crate) fn round_half_even(x: f32) -> i64 {
    #[cfg(target_arch = "x86_64")]
    if x.abs() < 2.0e9 {
        use std::arch::x86_64::{_mm_cvtss_si32, _mm_set_ss};
        // SAFETY: SSE is part of the x86-64 baseline.
        return i64::from(unsafe { _mm_cvtss_si32(_mm_set_ss(x)) });
    }
    x.round_ties_even() as i64
}

/// `clamp(round_half_even(x / scale) + zero_point, qmin, qmax)` in f32.
#[inline]
pub(crate) fn quantize_f32(x: f32, q: QParams, (qmin, qmax): (i64, i64)) -> i64 {
    // PyTorch (`quantize_val`, fbgemm's `Quantize`) multiplies by the f32 reciprocal of the
    // scale rather than dividing: the two differ in the last bit, which decides exact ties
    // (a weight at -127.5 steps rounds to -128 one way and -127 the other).
    round_half_even(x * (1.0 / q.scale))
        .saturating_add(q.zero_point)
        .clamp(qmin, qmax)
}

/// The same in f64.
#[inline]
fn quantize_f64(x: f64, scale: f64, zero_point: i64, (qmin, qmax): (i64, i64)) -> i64 {
    // Saturating, as the f32 path: an infinite or huge `x` stays on its side of the range.
    ((x / scale).round_ties_even() as i64)
        .saturating_add(zero_point)
        .clamp(qmin, qmax)
}

/// Quantizes each element with the scale and zero point of its channel.
fn quantize_with<Q: QInt>(
    x: &Tensor,
    op: &str,
    params: &(impl Fn(usize) -> (f64, i64) + Sync),
    range: (i64, i64),
) -> Result<Tensor> {
    let shape = x.shape();
    let out: Vec<Q> = match x.dtype() {
        DType::F32 => x.with_slice(|s: &[f32]| {
            let mut out = crate::cpu::try_uninit_buffer::<Q>("quantize", s.len())?;
            par_map_indexed(s, &mut out, |i, &v| {
                let (scale, zp) = params(i);
                Q::from_clamped(quantize_f32(v, QParams::new(scale as f32, zp), range))
            });
            Ok(out)
        })??,
        DType::F64 => x.with_slice(|s: &[f64]| {
            s.iter()
                .enumerate()
                .map(|(i, &v)| {
                    let (scale, zp) = params(i);
                    Q::from_clamped(quantize_f64(v, scale, zp, range))
                })
                .collect()
        })?,
        other => return Err(TensorError::dtype(op, other)),
    };
    Ok(tensor_from(out, &shape))
}

/// Writes `f(i, &src[i])` into `out[i]` for every element, in parallel chunks of `CHUNK`.
fn par_map_indexed<I: Sync, O: Send>(src: &[I], out: &mut [O], f: impl Fn(usize, &I) -> O + Sync) {
    out.par_chunks_mut(CHUNK)
        .zip(src.par_chunks(CHUNK))
        .enumerate()
        .for_each(|(c, (o, s))| {
            for (i, (o, v)) in o.iter_mut().zip(s).enumerate() {
                *o = f(c * CHUNK + i, v);
            }
        });
}

/// Dequantizes each element with the scale and zero point of its channel, into f32.
fn dequantize_with<Q: QInt>(
    q: &Tensor,
    params: &(impl Fn(usize) -> (f32, i64) + Sync),
) -> Result<Tensor> {
    let shape = q.shape();
    let out = q.with_slice(|s: &[Q]| {
        let mut out = crate::cpu::try_uninit_buffer::<f32>("quantize", s.len())?;
        par_map_indexed(s, &mut out, |i, &v| {
            let (scale, zp) = params(i);
            (v.widen() - zp) as f32 * scale
        });
        Ok(out)
    })??;
    Ok(tensor_from(out, &shape))
}

pub(super) fn quantize_per_tensor(
    x: &Tensor,
    scale: f64,
    zero_point: i64,
    dtype: DType,
) -> Result<Tensor> {
    let op = "quantize_per_tensor";
    let range = super::qrange(op, dtype)?;
    if dtype == DType::U8 && x.dtype() == DType::F32 {
        return super::quantize_u8::quantize_f32_to_u8(x, QParams::new(scale as f32, zero_point));
    }
    let params = move |_: usize| (scale, zero_point);
    qint_dispatch!(dtype, op, Q => quantize_with::<Q>(x, op, &params, range))
}

pub(super) fn dequantize_per_tensor(q: &Tensor, scale: f64, zero_point: i64) -> Result<Tensor> {
    let params = move |_: usize| (scale as f32, zero_point);
    qint_dispatch!(q.dtype(), "dequantize", Q => dequantize_with::<Q>(q, &params))
}

/// Scales (f32) and zero points (i64) of each channel, and the elements per channel step.
fn channel_params(
    x: &Tensor,
    scales: &Tensor,
    zero_points: &Tensor,
    axis: usize,
) -> Result<(Vec<f32>, Vec<i64>, usize, usize)> {
    let shape = x.shape();
    let channels = shape.get(axis).copied().unwrap_or(1).max(1);
    let inner: usize = shape.get(axis + 1..).map_or(1, |s| s.iter().product());
    Ok((
        scales.to_vec::<f32>()?,
        zero_points.to_vec::<i64>()?,
        inner.max(1),
        channels,
    ))
}

pub(super) fn quantize_per_channel(
    x: &Tensor,
    scales: &Tensor,
    zero_points: &Tensor,
    axis: usize,
    dtype: DType,
) -> Result<Tensor> {
    let op = "quantize_per_channel";
    let range = super::qrange(op, dtype)?;
    let (s, z, inner, channels) = channel_params(x, scales, zero_points, axis)?;
    for (c, (&scale, &zp)) in s.iter().zip(&z).enumerate() {
        if !(scale.is_finite() && scale > 0.0) || zp < range.0 || zp > range.1 {
            return Err(TensorError::invalid(
                op,
                format!(
                    "channel {c}: scale {scale} must be positive and finite and zero point {zp} inside [{}, {}]",
                    range.0, range.1
                ),
            ));
        }
    }
    let params = move |i: usize| {
        let c = (i / inner) % channels;
        (f64::from(s[c]), z[c])
    };
    qint_dispatch!(dtype, op, Q => quantize_with::<Q>(x, op, &params, range))
}

pub(super) fn dequantize_per_channel(
    q: &Tensor,
    scales: &Tensor,
    zero_points: &Tensor,
    axis: usize,
) -> Result<Tensor> {
    let (s, z, inner, channels) = channel_params(q, scales, zero_points, axis)?;
    let params = move |i: usize| {
        let c = (i / inner) % channels;
        (s[c], z[c])
    };
    qint_dispatch!(q.dtype(), "dequantize_per_channel", Q => dequantize_with::<Q>(q, &params))
}

/// The smallest and largest finite-or-not element of `x` (`(inf, -inf)` when empty), in
/// parallel chunks.
pub(crate) fn min_max(x: &[f32]) -> (f32, f32) {
    x.par_chunks(CHUNK)
        .map(|c| {
            c.iter()
                .fold((f32::INFINITY, f32::NEG_INFINITY), |(lo, hi), &v| {
                    (lo.min(v), hi.max(v))
                })
        })
        .reduce(
            || (f32::INFINITY, f32::NEG_INFINITY),
            |(a, b), (c, d)| (a.min(c), b.max(d)),
        )
}
