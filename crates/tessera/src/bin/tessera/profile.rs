//! `tessera profile FILE -o trace.json`: profiled runs of a graph artifact, interpreted or
//! compiled: the table of time per op or kernel sorted by self time, and a Chrome trace for
//! Perfetto.

use crate::failure::{Failure, Result};
use crate::inputs::parse_shape;
use crate::run::{Backend, Runner, prepare};
use std::path::PathBuf;
use tessera::nn::layers::Identity;
use tessera::profiler::Profiler;

/// Profile a graph artifact's run.
#[derive(clap::Args)]
pub struct Args {
    /// A graph artifact folder.
    file: PathBuf,
    /// The input's shape (`1,3,224,224`), once per input; default: the saved shapes.
    #[arg(long = "input-shape", value_parser = parse_shape)]
    input_shape: Vec<Vec<usize>>,
    /// Profiled runs (after one untimed warm-up run).
    #[arg(long, default_value_t = 1)]
    runs: usize,
    /// `interp`: one event per node of the reference interpreter; `cpu`: one event per step of
    /// the compiled program (a generated kernel, or a node run by its eager kernel).
    #[arg(long, value_enum, default_value_t = Backend::Interp)]
    backend: Backend,
    /// Write the Chrome trace JSON here (open it in https://ui.perfetto.dev).
    #[arg(short, long)]
    output: Option<PathBuf>,
}

pub fn run(args: &Args) -> Result<()> {
    let (traced, inputs) = prepare(&args.file, None, &args.input_shape, 0)?;
    let root = Identity::new();
    let profiler = Profiler::new();
    let runner = Runner::new(&traced, &inputs, args.backend)?;
    let run_once = |p: &Profiler| match &runner {
        Runner::Interp(traced) => p
            .profile_graph(traced, &root, &inputs)
            .map(drop)
            .map_err(|e| Failure::failed("running the graph", e)),
        Runner::Compiled(compiled) => p
            .profile_compiled(compiled, &inputs)
            .map(drop)
            .map_err(|e| Failure::failed("running the compiled graph", e)),
    };
    run_once(&profiler)?;
    profiler.clear();
    for _ in 0..args.runs.max(1) {
        run_once(&profiler)?;
    }
    print!("{}", profiler.table());
    if let Some(path) = &args.output {
        std::fs::write(path, profiler.chrome_trace())
            .map_err(|e| Failure::failed(format!("writing {}", path.display()), e))?;
        println!("wrote {}", path.display());
    }
    Ok(())
}
