//! Inputs for testing the fake-quantize kernels against the eager ones: values at rounding
//! ties and the ends of f32, float scales and zero points with NaN, zero and negative ones,
//! and integer zero points at the ends of a range.

use tessera_tensor::Tensor;

/// Ties, NaN, infinities, signed zeros, huge and subnormal values, cycled over `n` elements.
pub fn x_values(n: usize, seed: usize) -> Vec<f32> {
    const SPECIAL: [f32; 16] = [
        0.5,
        -0.5,
        1.5,
        -2.5,
        127.5,
        -128.5,
        f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        -0.0,
        1.0e30,
        -3.0e38,
        8_388_607.5,
        1.0e-40,
        // The largest f32 below 0.25.
        f32::from_bits(0x3E7F_FFFF),
        -7.75,
    ];
    (0..n)
        .map(|i| {
            let k = i * 7919 + seed * 104_729;
            if k.is_multiple_of(3) {
                SPECIAL[k / 3 % SPECIAL.len()]
            } else {
                (k % 2001) as f32 / 8.0 - 125.0
            }
        })
        .collect()
}

/// Scales and zero points per channel: exact halves, NaN, a zero and a negative scale.
pub fn parameters(channels: usize, seed: usize) -> (Tensor, Tensor) {
    const SCALES: [f32; 7] = [0.5, 0.1, 2.0, 0.0, -0.25, f32::NAN, 1.0e-3];
    const ZERO_POINTS: [f32; 9] = [0.0, 2.5, -3.5, 3.5, f32::NAN, 300.0, -1.0e20, 0.4, -0.0];
    let scale = (0..channels).map(|c| SCALES[(c + seed) % SCALES.len()]);
    let zero = (0..channels).map(|c| ZERO_POINTS[(c * 2 + seed) % ZERO_POINTS.len()]);
    (
        Tensor::from_vec(scale.collect::<Vec<_>>(), &[channels]).unwrap(),
        Tensor::from_vec(zero.collect::<Vec<_>>(), &[channels]).unwrap(),
    )
}

/// Integer zero points inside `[quant_min, quant_max]` per channel, ends included.
pub fn integer_zero_points(
    channels: usize,
    (quant_min, quant_max): (i64, i64),
    seed: usize,
) -> Tensor {
    let span = quant_max - quant_min;
    let zp = (0..channels).map(|c| match (c + seed) % 4 {
        0 => quant_min,
        1 => quant_max,
        _ => quant_min + ((c * 37 + seed * 11) as i64 % (span + 1)),
    });
    Tensor::from_vec(zp.collect::<Vec<i64>>(), &[channels]).unwrap()
}
