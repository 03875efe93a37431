//! Compiles a model as `torch.compile` would: traces it, runs the inference passes, lowers the
//! fusion groups to kernels and JIT-compiles them; then prints the compile report (kernels,
//! fallbacks, compile time) and the latency of eager, interpreted and compiled execution,
//! after checking that all three agree.

mod support;

use clap::{Parser, ValueEnum};
use std::sync::Arc;
use std::time::Instant;
use tessera::fx::GraphModule;
use tessera::fx::trace::{LeafPolicy, trace};
use tessera::nn::models::{ResNet18, SmallCnn};
use tessera::nn::{Forward, Layer, ModuleExt};
use tessera::{CompileOptions, DType, Tensor, compile, manual_seed, no_grad};

type Error = Box<dyn std::error::Error>;

/// The models this example can compile.
#[derive(ValueEnum, Clone, Copy, Debug)]
enum Model {
    /// The conformance suite's small CNN (two conv blocks, 10 classes).
    SmallCnn,
    /// torchvision's ResNet-18 layout, 1000 classes.
    Resnet18,
}

#[derive(Parser)]
#[command(
    about = "Trace, optimise and compile a model; compare eager, interpreted and \
                   compiled latency"
)]
struct Args {
    #[arg(long, value_enum, default_value_t = Model::SmallCnn)]
    model: Model,
    /// Images per batch.
    #[arg(long, default_value_t = 8)]
    batch: usize,
    /// Image height and width.
    #[arg(long, default_value_t = 32)]
    size: usize,
    /// Timed runs of each execution mode.
    #[arg(long, default_value_t = 20)]
    runs: usize,
    /// Print the program and every kernel's IR and CLIF.
    #[arg(long)]
    kernels: bool,
}

/// The largest absolute difference between two tensors.
fn largest_difference(a: &Tensor, b: &Tensor) -> tessera::Result<f32> {
    a.sub(b)?.abs()?.max_all()?.item::<f32>()
}

fn main() -> std::process::ExitCode {
    tessera::exit_code("compile", run(&Args::parse()))
}

fn run(args: &Args) -> Result<(), Error> {
    manual_seed(0);
    match args.model {
        Model::SmallCnn => compare(Arc::new(SmallCnn::new()?), args),
        Model::Resnet18 => compare(Arc::new(ResNet18::new(1000)?), args),
    }
}

/// Compiles `model` and compares its three execution modes.
fn compare<M: Layer + 'static>(model: Arc<M>, args: &Args) -> Result<(), Error> {
    model.eval();
    let x = Tensor::randn(&[args.batch, 3, args.size, args.size], DType::F32)?;
    let inputs = std::slice::from_ref(&x);

    let start = Instant::now();
    let traced = trace(&*model, x.meta(), LeafPolicy::default())?;
    let gm = GraphModule::new(model.clone(), traced);
    let trace_ms = start.elapsed().as_secs_f64() * 1e3;
    let compiled = compile(&gm, inputs, CompileOptions::default())?;
    println!(
        "{:?} at batch {}, {}x{}",
        args.model, args.batch, args.size, args.size
    );
    println!("traced in {trace_ms:.2} ms; {}", compiled.report());
    if args.kernels {
        println!("{}", compiled.kernels());
    }

    let _guard = no_grad();
    let eager = model.forward(x.clone())?;
    let interpreted = gm.forward(x.clone())?;
    let compiled_out = compiled.run(inputs)?.remove(0);
    for (name, out) in [("interpreted", &interpreted), ("compiled", &compiled_out)] {
        let difference = largest_difference(&eager, out)?;
        if difference > 1e-3 {
            return Err(format!("{name} output differs from eager by {difference}").into());
        }
        println!("{name} output equals eager within {difference:.1e}");
    }

    let (eager_ms, _) = support::time(args.runs, || model.forward(x.clone()).map(drop))?;
    let (interp_ms, _) = support::time(args.runs, || gm.forward(x.clone()).map(drop))?;
    let (compiled_ms, _) = support::time(args.runs, || compiled.run(inputs).map(drop))?;
    println!("\n{:<12} {:>11} {:>9}", "mode", "median ms", "speedup");
    for (name, ms) in [
        ("eager", eager_ms),
        ("interpreted", interp_ms),
        ("compiled", compiled_ms),
    ] {
        println!("{name:<12} {ms:>11.3} {:>8.2}x", eager_ms / ms);
    }
    Ok(())
}
