//! `exp` of f32 as straight-line arithmetic a backend emits inline and vectorised: the
//! argument clamped to `[-104, 89]` (past which the result is 0 or infinity anyway), reduced
//! to `r = x - n ln 2` with `n = round(x log2 e)` (ln 2 in two parts; the rounding is the
//! addition of 1.5 * 2^23, whose sum's low bits are `n` as an integer too), `e^r` by Cephes'
//! degree-6 polynomial, and `2^n` applied as two exact powers of two so that results down to
//! the subnormals and up to the overflow round once. Every step is one IEEE operation
//! (no fused multiply-add), so the kernel IR's interpreter, a backend's code and the eager
//! softmax's vector rows agree bit for bit (but for the payload of a NaN, which vector
//! min/max instructions may make canonical);
//! against the correctly rounded `exp` the error is at most [`EXP_F32_MAX_ULP`] ulp over a
//! sweep of every 997th f32 (`tests` below: every binade of both signs).

/// The largest error of [`exp_f32`] in units in the last place found over the f32 range.
pub const EXP_F32_MAX_ULP: u32 = 1;

/// The clamp bounds of the argument.
pub const EXP_F32_LOW: f32 = -104.0;
pub const EXP_F32_HIGH: f32 = 89.0;
pub const LOG2_E: f32 = std::f32::consts::LOG2_E;
/// `ln 2` split so that `n * LN2_HIGH` is exact for every `n` the clamp allows.
pub const LN2_HIGH: f32 = 0.693_359_4;
pub const LN2_LOW: f32 = -2.121_944_4e-4;
/// 1.5 * 2^23: adding it to a float of magnitude below 2^22 rounds that float to an integer
/// (ties to even), and the sum's bits minus its own are that integer.
pub const ROUNDER: f32 = 12_582_912.0;
/// Cephes' `expf` coefficients, highest degree first; `e^r ~ 1 + r + r^2 p(r)`.
pub const EXP_F32_POLY: [f32; 6] = [
    1.987_569_2e-4,
    1.398_2e-3,
    8.333_452e-3,
    4.166_579_6e-2,
    1.666_666_5e-1,
    // Cephes writes 5.000_000_1e-1, which rounds to 0.5 in f32.
    5e-1,
];

/// `e^x` of f32, computed as the CPU backend's inline code computes it.
pub extern "C" fn exp_f32(x: f32) -> f32 {
    // A backend's `fmin`/`fmax` propagate NaN, which `f32::clamp` would not keep.
    let c = if x.is_nan() {
        x
    } else {
        x.clamp(EXP_F32_LOW, EXP_F32_HIGH)
    };
    let t = c * LOG2_E + ROUNDER;
    let n = t - ROUNDER;
    let r = c - n * LN2_HIGH;
    let r = r - n * LN2_LOW;
    let mut p = EXP_F32_POLY[0];
    for k in &EXP_F32_POLY[1..] {
        p = p * r + k;
    }
    let y = p * (r * r) + r + 1.0;
    // `n` as an integer from the sum's bits (any value for a NaN, whose result stays NaN).
    let n = (t.to_bits() as i32).wrapping_sub(ROUNDER.to_bits() as i32);
    let (half, rest) = (n >> 1, n.wrapping_sub(n >> 1));
    y * power_of_two(half) * power_of_two(rest)
}

/// `2^e` for `e` in `-126..=127` (wrapping, as a backend's integer arithmetic, outside it).
fn power_of_two(e: i32) -> f32 {
    f32::from_bits((e.wrapping_add(127) as u32) << 23)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Distance in ulps between two finite floats of the same sign, or 0 when equal.
    fn ulps(a: f32, b: f32) -> u32 {
        if a == b {
            return 0;
        }
        (a.to_bits() as i64 - b.to_bits() as i64).unsigned_abs() as u32
    }

    #[test]
    fn exp_is_within_its_ulp_bound_over_the_whole_f32_range() {
        let mut worst = (0, 0.0f32);
        // Every 997th bit pattern: 4.3 million inputs, about 8,000 in every binade of both signs.
        for bits in (0..=u32::MAX).step_by(997) {
            let x = f32::from_bits(bits);
            if x.is_nan() {
                assert!(exp_f32(x).is_nan());
                continue;
            }
            let expected = (x as f64).exp() as f32;
            let got = exp_f32(x);
            let e = ulps(got, expected);
            if e > worst.0 {
                worst = (e, x);
            }
        }
        assert!(
            worst.0 <= EXP_F32_MAX_ULP,
            "{} ulp at x = {:e}",
            worst.0,
            worst.1
        );
    }

    #[test]
    fn exp_of_the_special_values_is_as_ieee_says() {
        assert_eq!(exp_f32(0.0), 1.0);
        assert_eq!(exp_f32(f32::INFINITY), f32::INFINITY);
        assert_eq!(exp_f32(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp_f32(89.0), f32::INFINITY);
        let near_overflow = 88.72f32;
        let expected = (near_overflow as f64).exp() as f32;
        assert!(ulps(exp_f32(near_overflow), expected) <= EXP_F32_MAX_ULP);
        assert_eq!(exp_f32(-104.0), 0.0);
        assert!(exp_f32(-100.0) > 0.0, "subnormal results are kept");
        assert!(exp_f32(f32::NAN).is_nan());
    }
}
