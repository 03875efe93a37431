//! Inputs for testing the quantized-op kernels against the eager ones: float values at
//! rounding ties, NaN and the ends of f32 and f64 (from [`crate::fake_quant_cases`]), valid
//! scales that make ties and saturate both ends, zero points at the ends of each quantized
//! type's range, quantized values covering each type's range, and u8 planes whose pooling
//! windows tie at .5 steps and reach both ends of u8.

use crate::fake_quant_cases::x_values;
use tessera_tensor::op::Pool2dParams;
use tessera_tensor::{DType, Tensor};

/// The quantized storage types with their ranges.
pub const QUANTIZED_TYPES: [(DType, (i64, i64)); 3] = [
    (DType::U8, (0, 255)),
    (DType::I8, (-128, 127)),
    (DType::I32, (i32::MIN as i64, i32::MAX as i64)),
];

/// Positive finite scales per channel: powers of two (exact ties), tenths (reciprocals that
/// round), a tiny one saturating everything and a large one sending most values to the zero
/// point.
pub fn valid_scales(channels: usize, seed: usize) -> Tensor {
    const SCALES: [f32; 7] = [0.5, 0.1, 2.0, 1.0e-3, 0.25, 1.0e-30, 3.0e5];
    let scale = (0..channels).map(|c| SCALES[(c + seed) % SCALES.len()]);
    Tensor::from_vec(scale.collect::<Vec<_>>(), &[channels]).unwrap()
}

/// `n` float inputs of `dtype` (f32 or f64): [`x_values`], and for f64 also ties at 2^52
/// and values beyond f32's range.
pub fn float_inputs(dtype: DType, shape: &[usize], seed: usize) -> Tensor {
    let n = shape.iter().product();
    let values = x_values(n, seed);
    match dtype {
        DType::F64 => {
            const WIDE: [f64; 4] = [4_503_599_627_370_495.5, -2.5e300, 1.0e-310, 0.1];
            let v = values
                .iter()
                .enumerate()
                .map(|(i, &x)| {
                    if (i + seed).is_multiple_of(5) {
                        WIDE[(i / 5 + seed) % WIDE.len()]
                    } else {
                        f64::from(x)
                    }
                })
                .collect::<Vec<_>>();
            Tensor::from_vec(v, shape).unwrap()
        }
        _ => Tensor::from_vec(values, shape)
            .unwrap()
            .to_dtype(dtype)
            .unwrap(),
    }
}

/// Quantized values of `dtype` (u8, i8 or i32): both ends of its range, zero, and values
/// spread over it, cycled over `shape`.
pub fn quantized_inputs(dtype: DType, shape: &[usize], seed: usize) -> Tensor {
    let (lo, hi) = QUANTIZED_TYPES
        .iter()
        .find(|(d, _)| *d == dtype)
        .map(|(_, r)| *r)
        .expect("a quantized dtype");
    let n: usize = shape.iter().product();
    let span = (hi - lo) as u64 + 1;
    let values: Vec<i64> = (0..n)
        .map(|i| match (i + seed) % 5 {
            0 => lo,
            1 => hi,
            2 => 0,
            _ => lo + ((i as u64 * 2_654_435_761 + seed as u64 * 97) % span) as i64,
        })
        .collect();
    Tensor::from_vec(values, shape)
        .unwrap()
        .to_dtype(dtype)
        .unwrap()
}

/// The zero points the u8 average pools are checked with: both ends of u8, odd and even ones
/// (an odd one makes eager's `round(mean - zp) + zp` differ from rounding the mean at ties).
pub const POOL_ZERO_POINTS: [i64; 5] = [0, 37, 128, 255, 1];

/// u8 values of `shape` (the last two dims a plane) for the average pools: in each 2x2 block
/// of the plane the right column is one more than the left, so that a 2-wide window's sum is
/// odd and its mean lies on a .5 tie; every fifth block is all 255 and every seventh all 0
/// (sums at both ends of the range), the others spread over u8 by `seed`.
pub fn u8_pool_values(shape: &[usize], seed: usize) -> Tensor {
    let width = shape.last().copied().unwrap_or(1).max(1);
    let n: usize = shape.iter().product();
    let values: Vec<u8> = (0..n)
        .map(|i| {
            let (y, x) = ((i / width) / 2, (i % width) / 2);
            let block = y * 31 + x * 7 + seed * 13;
            if block.is_multiple_of(5) {
                255
            } else if block.is_multiple_of(7) {
                0
            } else {
                ((block * 37 + seed) % 255 + (i % width) % 2) as u8
            }
        })
        .collect();
    Tensor::from_vec(values, shape).unwrap()
}

/// A window of `kernel`, `stride` and `padding` (dilation 1), rounding up when `ceil_mode`.
pub fn pool_window(
    kernel: [usize; 2],
    stride: [usize; 2],
    padding: [usize; 2],
    ceil_mode: bool,
) -> Pool2dParams {
    Pool2dParams {
        kernel,
        stride,
        padding,
        dilation: [1, 1],
        ceil_mode,
    }
}

/// The windows of the u8 average pool cases: 2x2 blocks (every window of
/// [`u8_pool_values`] on a .5 tie), padding on both axes or one, ceil mode's windows partly
/// past the input, 3 taps per axis (an inexact `1/n`), and windows of more than 64 taps (a
/// reduction loop in the kernels), padded or not. Planes of at least 9 x 9 fit them all.
pub fn u8_pool_windows() -> [Pool2dParams; 7] {
    [
        pool_window([2, 2], [2, 2], [0, 0], false),
        pool_window([3, 3], [2, 2], [1, 1], true),
        pool_window([2, 3], [1, 2], [1, 1], true),
        pool_window([3, 2], [2, 2], [1, 0], false),
        pool_window([3, 3], [3, 3], [0, 0], true),
        pool_window([9, 8], [3, 4], [4, 2], true),
        pool_window([9, 9], [1, 1], [0, 0], false),
    ]
}

/// Input planes and output sizes of the u8 adaptive average pool cases: bins of different
/// sizes that overlap (7 -> 3, 6 -> 4), more bins than elements (3 -> 5), the global pool, and
/// bins tiling a plane too large to unroll (66 -> 2: a 33 x 33 window reduction).
pub const U8_ADAPTIVE_BINS: [([usize; 2], [usize; 2]); 5] = [
    ([7, 6], [3, 4]),
    ([3, 10], [5, 3]),
    ([9, 8], [1, 1]),
    ([12, 12], [4, 6]),
    ([66, 66], [2, 2]),
];
