//! Traces the small CNN of the conformance cases into a graph, prints it (graph, table, code),
//! writes a Graphviz DOT file, runs it with the interpreter and compares with eager execution.

use clap::Parser;
use std::path::PathBuf;
use tessera::fx::trace::{LeafPolicy, inline, trace};
use tessera::nn::models::SmallCnn;
use tessera::nn::{Call, ModuleExt};
use tessera::{DType, Tensor, no_grad};

#[derive(Parser)]
#[command(about = "Trace a CNN into Tessera's graph IR and run it with the interpreter")]
pub(crate) struct Args {
    /// Where to write the Graphviz DOT file.
    #[arg(long, default_value = "small_cnn.dot")]
    dot: PathBuf,
    /// Batch size of the traced input.
    #[arg(long, default_value_t = 4)]
    batch: usize,
    /// Also save the inlined graph and its weights as an artifact folder here, for the
    /// `tessera` command (`tessera inspect DIR`).
    #[arg(long)]
    save: Option<PathBuf>,
}

fn main() -> std::process::ExitCode {
    tessera::exit_code("trace", run_example(&Args::parse()))
}

pub(crate) fn run_example(args: &Args) -> Result<(), Box<dyn std::error::Error>> {
    let cnn = SmallCnn::new()?;
    cnn.eval();
    let x = Tensor::randn(&[args.batch, 3, 16, 16], DType::F32)?;

    let started = std::time::Instant::now();
    let mut traced = trace(&cnn, x.meta(), LeafPolicy::default())?;
    let trace_time = started.elapsed();
    traced.graph.verify()?;
    println!("== the graph (traced in {trace_time:?})\n{}", traced.graph);
    println!("== as a table\n{}", traced.graph.tabular());
    println!("== as code\n{}", traced.graph.code()?);
    std::fs::write(&args.dot, traced.graph.to_dot())?;
    println!(
        "wrote {} (render with `dot -Tpng {} -o graph.png`)\n",
        args.dot.display(),
        args.dot.display()
    );

    let _guard = no_grad();
    let eager = cnn.call(x.clone())?;
    let interpreted = traced.interpret(&cnn, std::slice::from_ref(&x))?.remove(0);
    let same = eager.to_vec::<f32>()? == interpreted.to_vec::<f32>()?;
    println!("interpreter equals eager: {same}");

    inline(&mut traced, &cnn, |_| true)?;
    traced.graph.verify()?;
    println!("\n== inlined into ops\n{}", traced.graph);
    let inlined = traced.interpret(&cnn, std::slice::from_ref(&x))?.remove(0);
    let same_inlined = eager.to_vec::<f32>()? == inlined.to_vec::<f32>()?;
    println!("inlined graph equals eager: {same_inlined}");
    if !(same && same_inlined) {
        return Err("the graph does not reproduce eager execution".into());
    }
    if let Some(dir) = &args.save {
        tessera::fx::artifact::save(&traced, dir)?;
        println!("saved the artifact to {}", dir.display());
    }
    Ok(())
}
