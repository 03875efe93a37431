//! The error bound of a dot product whose operands were rounded to a quantisation step, for
//! the tests that compare quantized results with float ones.

/// `sum_k (|x| * w_step / 2 + |w| * x_step / 2 + x_step * w_step / 4)`: the largest error of
/// one output when x and w are each rounded to their nearest step (no clamping).
pub fn rounding_bound(x: &[f32], w: &[f32], x_step: f32, w_step: f32) -> f32 {
    x.iter()
        .zip(w)
        .map(|(x, w)| x.abs() * w_step / 2.0 + w.abs() * x_step / 2.0 + x_step * w_step / 4.0)
        .sum()
}
