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
use tessera::nn::models::{
    Gpt, GptConfig, MobileNetV2, ResNet, SmallCnn, Vgg, VisionTransformer, VitConfig,
};
use tessera::nn::{Forward, Layer, ModuleExt, ModuleKind, init};
use tessera::{CompileOptions, DType, Tensor, compile, manual_seed, no_grad};

type Error = Box<dyn std::error::Error>;

/// The models this example can compile.
#[derive(ValueEnum, Clone, Copy, Debug)]
enum Model {
    /// The conformance suite's small CNN (two conv blocks, 10 classes).
    SmallCnn,
    /// torchvision's ResNet-18 layout, 1000 classes.
    Resnet18,
    /// torchvision's ResNet-34, 1000 classes.
    Resnet34,
    /// torchvision's ResNet-50 (bottleneck blocks), 1000 classes.
    Resnet50,
    /// torchvision's MobileNetV2 (width 1.0), 1000 classes.
    #[value(name = "mobilenet_v2")]
    MobilenetV2,
    /// torchvision's VGG-11 with batch norm, 1000 classes.
    #[value(name = "vgg11_bn")]
    Vgg11Bn,
    /// A Vision Transformer in torchvision's layout: 8x8 patches, 2 layers of width 32.
    Vit,
    /// The tiny GPT decoder (vocabulary 50) on `--size` token ids (at most its context, 12).
    Gpt,
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
        Model::Resnet18 => compare(ResNet::resnet18(1000)?, image, args),
        Model::Resnet34 => compare(ResNet::resnet34(1000)?, image, args),
        Model::Resnet50 => compare(ResNet::resnet50(1000)?, image, args),
        Model::MobilenetV2 => compare(MobileNetV2::new(1000, 1.0)?, image, args),
        Model::Vgg11Bn => compare(Vgg::vgg11_bn(1000)?, image, args),
        Model::Vit => {
            let config = VitConfig {
                image_size: args.size,
                ..VitConfig::tiny(1000)
            };
            let vit = VisionTransformer::new(config)?;
            // torchvision starts the head at zero: a zero output would compare trivially.
            init::normal_(
                vit.get_parameter("heads.head.weight")?.tensor(),
                0.0,
                0.1,
                None,
            )?;
            compare(vit, image, args)
        }
        Model::Gpt => {
            let config = GptConfig::tiny();
            let len = args.size.min(config.block_size);
            let ids: Vec<i64> = (0..args.batch * len)
                .map(|i| (i * 7 % config.vocab_size) as i64)
                .collect();
            let ids = Tensor::from_vec(ids, &[args.batch, len])?;
            compare(Gpt::new(config)?, ids, args)
        }
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
