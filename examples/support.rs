//! Timing shared by the benchmark examples.

use std::time::Instant;

/// Median and fastest wall time of `reps` runs of `f`, in milliseconds, after 3 warm-ups.
pub fn time<E>(reps: usize, mut f: impl FnMut() -> Result<(), E>) -> Result<(f64, f64), E> {
    for _ in 0..3 {
        f()?;
    }
    let mut samples = Vec::with_capacity(reps.max(1));
    for _ in 0..reps.max(1) {
        let start = Instant::now();
        f()?;
        samples.push(start.elapsed().as_secs_f64() * 1e3);
    }
    samples.sort_by(f64::total_cmp);
    Ok((samples[samples.len() / 2], samples[0]))
}
