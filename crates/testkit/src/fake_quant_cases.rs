//! Inputs for testing the fake-quantize kernels against the eager ones: values at rounding
//! ties and the ends of f32, float scales and zero points with NaN, zero and negative ones,
//! and integer zero points at the ends of a range.

use crate::exact_bits as bits;
use tessera_tensor::op::FakeQuantOp;
use tessera_tensor::{Op, Tensor};

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

/// Bounds on the sums of absolute values of the learnable gradients' terms per channel
/// (`dScale`, then `dZeroPoint`) for an upstream gradient `dy` of `shape` with `scale`: a
/// `dScale` term is at most `|dy| * max(4, range + 1) * grad_factor` (inside the range
/// `|(fq - x) / scale|` is half a step, and a few for f32's rounding), a `dZeroPoint` term
/// `|dy * scale| * grad_factor`.
pub fn gradient_sum_bounds(
    dy: &Tensor,
    scale: &[f32],
    axis: Option<usize>,
    (quant_min, quant_max): (i64, i64),
    grad_factor: f64,
) -> (Vec<f64>, Vec<f64>) {
    let shape = dy.shape();
    let inner: usize = match axis {
        Some(a) => shape[a + 1..].iter().product(),
        None => 1,
    };
    let mut abs_dy = vec![0f64; scale.len()];
    for (i, g) in dy.to_vec::<f32>().unwrap().iter().enumerate() {
        abs_dy[(i / inner.max(1)) % scale.len().max(1)] += f64::from(g.abs());
    }
    let step = ((quant_max - quant_min + 1) as f64).max(4.0) * grad_factor.abs();
    let dscale = abs_dy.iter().map(|a| a * step).collect();
    let dzero = abs_dy
        .iter()
        .zip(scale)
        .map(|(a, s)| a * f64::from(s.abs()) * grad_factor.abs())
        .collect();
    (dscale, dzero)
}

/// Whether the f32 sums `got` and `want` of `terms` f32 terms, summed in f64 in different
/// orders, agree: both NaN, equal, or apart by at most one f32 step plus twice the f64
/// rounding of `terms` partial sums of absolute sum `bound`.
pub fn sums_agree(got: f32, want: f32, terms: usize, bound: f64) -> bool {
    if got.is_nan() || want.is_nan() {
        return got.is_nan() && want.is_nan();
    }
    if got == want {
        return true;
    }
    let step = f64::from(f32::EPSILON) * f64::from(got.abs().max(want.abs()));
    let drift = 2.0 * terms as f64 * f64::EPSILON * bound;
    (f64::from(got) - f64::from(want)).abs() <= step + drift
}

/// Asserts that the learnable gradients `got` (`dX, dScale, dZeroPoint`) agree with `want`
/// for `inputs` (`grad, x, scale, zero_point`) of an op of `(axis, range, grad_factor)`: `dX`
/// bit for bit, the sums by [`sums_agree`] within [`gradient_sum_bounds`].
pub fn gradients_agree(
    what: &str,
    got: &[Tensor],
    want: &[Tensor],
    inputs: &[Tensor],
    (axis, range, grad_factor): (Option<usize>, (i64, i64), f64),
) {
    assert_eq!(bits(&got[0]), bits(&want[0]), "{what}: dX");
    let scale = inputs[2].to_vec::<f32>().unwrap();
    let (ds_bound, dz_bound) = gradient_sum_bounds(&inputs[0], &scale, axis, range, grad_factor);
    let terms = inputs[1].numel() / scale.len().max(1);
    for (i, bounds) in [(1, ds_bound), (2, dz_bound)] {
        let (g, w) = (
            got[i].to_vec::<f32>().unwrap(),
            want[i].to_vec::<f32>().unwrap(),
        );
        assert_eq!(got[i].shape(), want[i].shape(), "{what}: output {i}");
        for (c, ((g, w), b)) in g.iter().zip(&w).zip(&bounds).enumerate() {
            assert!(
                sums_agree(*g, *w, terms, *b),
                "{what}: output {i} channel {c}: {g} vs eager {w}"
            );
        }
    }
}

/// The axis, range and gradient factor of a learnable fake-quantize backward `op`.
pub fn learnable_form(op: &Op) -> Option<(Option<usize>, (i64, i64), f64)> {
    match *op {
        Op::FakeQuantBackward(FakeQuantOp::LearnablePerTensor {
            quant_min,
            quant_max,
            grad_factor,
        }) => Some((None, (quant_min, quant_max), grad_factor)),
        Op::FakeQuantBackward(FakeQuantOp::LearnablePerChannel {
            axis,
            quant_min,
            quant_max,
            grad_factor,
        }) => Some((Some(axis), (quant_min, quant_max), grad_factor)),
        _ => None,
    }
}

/// The inputs `grad, x, scale, zero_point` of a fake-quantize backward for `x` of `shape`
/// with `channels` parameters, from [`x_values`] and [`parameters`].
pub fn gradient_case(shape: &[usize], channels: usize, seed: usize) -> Vec<Tensor> {
    let n = shape.iter().product();
    let x = Tensor::from_vec(x_values(n, seed), shape).unwrap();
    let grad = Tensor::from_vec(x_values(n, seed + 5), shape).unwrap();
    let (scale, zero) = parameters(channels, seed);
    vec![grad, x, scale, zero]
}
