//! `tessera bench FILE`: times runs of a graph artifact with a progress bar, then prints the
//! median, the 10th and 90th percentiles and the throughput.

use crate::failure::{Failure, Result};
use crate::inputs::parse_shape;
use crate::run::{Backend, Runner, prepare};
use indicatif::{ProgressBar, ProgressStyle};
use std::path::PathBuf;
use std::time::Instant;

/// Time a graph artifact's runs.
#[derive(clap::Args)]
pub struct Args {
    /// A graph artifact folder.
    file: PathBuf,
    /// The input's shape (`1,3,224,224`), once per input; default: the saved shapes.
    #[arg(long = "input-shape", value_parser = parse_shape)]
    input_shape: Vec<Vec<usize>>,
    /// What runs the graph (not with --compare, which runs interp and cpu).
    #[arg(long, value_enum, default_value_t = Backend::Interp)]
    backend: Backend,
    /// Timed runs (after warm-up).
    #[arg(long, default_value_t = 50)]
    runs: usize,
    /// Untimed runs first.
    #[arg(long, default_value_t = 5)]
    warmup: usize,
    /// Time both backends that run here in this process, one after the other: `interp` (the
    /// reference interpreter, each node through its eager kernel) and `cpu` (the compiled
    /// code, with the time compiling took). Cannot be combined with --backend.
    #[arg(long, conflicts_with = "backend")]
    compare: bool,
}

/// Milliseconds at the `q` quantile of sorted samples.
fn quantile(sorted: &[f64], q: f64) -> f64 {
    let i = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[i]
}

pub fn run(args: &Args) -> Result<()> {
    if args.runs == 0 {
        return Err(Failure::usage("--runs must be at least 1"));
    }
    let (traced, inputs) = prepare(&args.file, None, &args.input_shape, 0)?;
    let batch = inputs
        .first()
        .and_then(|t| t.shape().first().copied())
        .unwrap_or(1);
    let backends: Vec<Backend> = if args.compare {
        vec![Backend::Interp, Backend::Cpu]
    } else {
        vec![args.backend]
    };
    println!(
        "{:<8} {:>11} {:>11} {:>11} {:>14} {:>12}",
        "backend", "median ms", "p10 ms", "p90 ms", "items/s", "compile ms"
    );
    for backend in backends {
        let start = Instant::now();
        let runner = Runner::new(&traced, &inputs, backend)?;
        let compile_ms = match runner {
            Runner::Interp(_) => "-".to_string(),
            Runner::Compiled(_) => format!("{:.1}", start.elapsed().as_secs_f64() * 1e3),
        };
        for _ in 0..args.warmup {
            runner.run(&inputs)?;
        }
        let bar = ProgressBar::new(args.runs as u64).with_style(
            ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len}")
                .map_err(|e| Failure::failed("progress bar", e))?,
        );
        bar.set_message(backend.name());
        let mut samples = Vec::with_capacity(args.runs);
        for _ in 0..args.runs {
            let start = Instant::now();
            runner.run(&inputs)?;
            samples.push(start.elapsed().as_secs_f64() * 1e3);
            bar.inc(1);
        }
        bar.finish_and_clear();
        samples.sort_by(f64::total_cmp);
        let median = quantile(&samples, 0.5);
        println!(
            "{:<8} {:>11.3} {:>11.3} {:>11.3} {:>14.1} {:>12}",
            backend.name(),
            median,
            quantile(&samples, 0.1),
            quantile(&samples, 0.9),
            batch as f64 / (median / 1e3),
            compile_ms
        );
    }
    Ok(())
}
