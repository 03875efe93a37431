//! Compiles a model as `torch.compile` would: traces it, runs the inference passes, lowers the
//! fusion groups to kernels and JIT-compiles them; then prints the compile report (kernels,
//! fallbacks, compile time) and the latency of eager, interpreted and compiled execution,
//! after checking that all three agree.

mod support;
mod zoo;

use clap::Parser;
use std::sync::Arc;
use std::time::Instant;
use tessera::fx::GraphModule;
use tessera::fx::trace::{LeafPolicy, trace};
use tessera::nn::models::SmallCnn;
use tessera::nn::{Forward, Layer, ModuleExt, ModuleKind};
use tessera::{
    BatchMode, CompileOptions, CompiledModule, DType, Generator, Tensor, compile, manual_seed,
    no_grad,
};

type Error = Box<dyn std::error::Error>;

zoo::model_choice! {
    /// The models this example can compile: the conformance suite's small CNN (two conv blocks,
    /// 10 classes), then those of `tessera::nn::models` (1000 classes).
    Model { SmallCnn => "small-cnn" }
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
    let image = Tensor::randn(&[args.batch, 3, args.size, args.size], DType::F32)?;
    match args.model {
        Model::SmallCnn => compare(SmallCnn::new()?, image, args),
        Model::Zoo(model) => {
            let x = match model {
                zoo::Zoo::Gpt => zoo::token_ids(args.batch, args.size, &mut Generator::new(0))?,
                _ => image,
            };
            model.build(1000, args.size, Compare { x, args })
        }
    }
}

/// [`compare`] as a [`zoo::UseModel`].
struct Compare<'a> {
    x: Tensor,
    args: &'a Args,
}

impl zoo::UseModel for Compare<'_> {
    fn with<M: Layer + 'static>(self, model: M) -> Result<(), Error> {
        compare(model, self.x, self.args)
    }
}

/// Compiles `model` and compares its three execution modes on input `x`.
fn compare<M: Layer + 'static>(model: M, x: Tensor, args: &Args) -> Result<(), Error> {
    let model = Arc::new(model);
    model.eval();
    let inputs = std::slice::from_ref(&x);

    let start = Instant::now();
    // Attention and transformer layers are traced through, so the compiler sees their ops.
    let policy = LeafPolicy::default()
        .trace_kind(ModuleKind::MultiheadAttention)
        .trace_kind(ModuleKind::TransformerEncoderLayer);
    let traced = trace(&*model, x.meta(), policy)?;
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

    new_batch(&compiled, &x)?;

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

/// Times the first and second call at the next batch: with a dynamic batch the first one
/// lowers the graph again and runs the code already compiled.
fn new_batch(compiled: &CompiledModule, x: &Tensor) -> Result<(), Error> {
    let mut shape = x.shape();
    let Some(batch) = shape.first_mut() else {
        return Ok(());
    };
    *batch += 1;
    if let BatchMode::Specialised(why) = &compiled.report().batch {
        // Such a graph may not run at another batch at all (a batch-1 trace drops the expand
        // of a parameter over the batch, as a ViT's class token): say why and move on.
        println!(
            "batch {}: not run, the batch is specialised: {why}",
            shape[0]
        );
        return Ok(());
    }
    let next = [Tensor::zeros(&shape, x.dtype())?];
    let compiles = compiled.compile_count();
    let start = Instant::now();
    compiled.run(&next)?;
    let first_ms = start.elapsed().as_secs_f64() * 1e3;
    let start = Instant::now();
    compiled.run(&next)?;
    let second_ms = start.elapsed().as_secs_f64() * 1e3;
    println!(
        "batch {}: first call {first_ms:.2} ms, second {second_ms:.2} ms, {} new compiles ({})",
        shape[0],
        compiled.compile_count() - compiles,
        compiled.report().batch
    );
    Ok(())
}
