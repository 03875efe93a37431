//! The whole story on built-in data, in under a minute: train a small CNN eagerly on generated
//! shapes, trace it into a graph and print it, prune it structurally (and fine-tune), compile
//! it (batch-norm folding, clean-up, simplification, fusion, cranelift JIT), check the compiled
//! code against eager execution, and compare accuracy and latency eager vs compiled.

#[path = "support.rs"]
mod support;

use clap::Parser;
use std::sync::Arc;
use tessera::datasets::{CLASSES, SIDE, accuracy, shapes};
use tessera::fit::{FitOptions, fit_classifier};
use tessera::fx::GraphModule;
use tessera::fx::trace::{LeafPolicy, trace};
use tessera::nn::layers::{
    AdaptiveAvgPool2d, BatchNorm2d, Conv2d, Conv2dOptions, Flatten, Linear, MaxPool2d, ReLU,
};
use tessera::nn::{Forward, Layer, Sequential};
use tessera::passes::StructuredPrune;
use tessera::{CompileOptions, Generator, compile, manual_seed, no_grad};

type Error = Box<dyn std::error::Error>;

#[derive(Parser)]
#[command(
    about = "Train a CNN on generated shapes, trace, prune and compile it, and compare \
                   eager and compiled accuracy and latency"
)]
pub(crate) struct Args {
    /// Training epochs of the eager model.
    #[arg(long, default_value_t = 3)]
    epochs: usize,
    /// Training images (the held-out set is a third of this).
    #[arg(long, default_value_t = 1500)]
    train_size: usize,
    /// Fraction of each convolution's channels that structured pruning removes.
    #[arg(long, default_value_t = 0.25)]
    prune: f64,
    /// Timed runs of each model.
    #[arg(long, default_value_t = 20)]
    runs: usize,
    /// Seed of the data and of the initial weights.
    #[arg(long, default_value_t = 0)]
    seed: u64,
}

/// Two conv blocks (conv, batch norm, ReLU), pooling and a linear classifier.
fn cnn() -> tessera::nn::Result<Sequential> {
    let same = || Conv2dOptions::default().padding(1);
    Ok(Sequential::new()
        .add(Conv2d::with_options(1, 16, 3, same())?)
        .add(BatchNorm2d::new(16)?)
        .add(ReLU::new())
        .add(MaxPool2d::new(2))
        .add(Conv2d::with_options(16, 32, 3, same())?)
        .add(BatchNorm2d::new(32)?)
        .add(ReLU::new())
        .add(AdaptiveAvgPool2d::new(1))
        .add(Flatten::new())
        .add(Linear::new(32, CLASSES.len())?))
}

fn main() -> std::process::ExitCode {
    tessera::exit_code("demo", run(&Args::parse()))
}

pub(crate) fn run(args: &Args) -> Result<(), Error> {
    if !(0.0..1.0).contains(&args.prune) {
        return Err(format!("--prune must be in [0, 1), got {}", args.prune).into());
    }
    let mut g = Generator::new(args.seed);
    let train = shapes(args.train_size, &mut g)?;
    let test = shapes(args.train_size.div_ceil(3), &mut g)?;
    manual_seed(args.seed);
    let model = Arc::new(cnn()?);

    println!(
        "1. Training a CNN eagerly on {} generated {SIDE}x{SIDE} images of {} classes ({} epochs, Adam)",
        args.train_size,
        CLASSES.len(),
        args.epochs
    );
    let options = FitOptions {
        epochs: args.epochs,
        ..FitOptions::default()
    };
    let loss = fit_classifier(&*model, &train, options, &mut g)?;
    let eager_logits = {
        let _guard = no_grad();
        model.forward(test.0.clone())?
    };
    println!(
        "   final training loss {loss:.4}, held-out accuracy {:.1}%",
        100.0 * accuracy(&eager_logits, &test.1)?
    );

    println!("\n2. Tracing it into a graph of module calls:");
    let traced = trace(&*model, test.0.meta(), LeafPolicy::default())?;
    let mut gm = GraphModule::new(model.clone(), traced);
    println!("{}", gm.graph);

    println!(
        "3. Pruning {:.0}% of each convolution's channels, then one fine-tuning epoch:",
        100.0 * args.prune
    );
    let report = StructuredPrune::new(args.prune).run_with_report(&mut gm)?;
    println!("{report}");
    let finetune = FitOptions {
        epochs: 1,
        lr: 1e-3,
        ..FitOptions::default()
    };
    fit_classifier(&gm, &train, finetune, &mut g)?;

    println!("\n4. Compiling (fold batch norm, clean up, simplify, fuse, JIT):");
    let compiled = compile(
        &gm,
        std::slice::from_ref(&test.0),
        CompileOptions::default(),
    )?;
    print!("{}", compiled.report());
    let pruned_logits = {
        let _guard = no_grad();
        gm.forward(test.0.clone())?
    };
    let compiled_logits = compiled.run(std::slice::from_ref(&test.0))?.remove(0);
    let difference = compiled_logits
        .sub(&pruned_logits)?
        .abs()?
        .max_all()?
        .item::<f32>()?;
    if difference > 1e-3 {
        return Err(format!(
            "the compiled model differs from eager execution by {difference} (more than 1e-3)"
        )
        .into());
    }
    println!("   compiled outputs equal eager ones within {difference:.1e}");

    let batch = test.0.shape()[0];
    println!("\n5. Held-out accuracy and latency of classifying all {batch} images:");
    let eager = |m: &dyn Layer| -> Result<f64, Error> {
        let _guard = no_grad();
        let (median, _) = support::time(args.runs, || m.forward(test.0.clone()).map(drop))?;
        Ok(median)
    };
    let rows: [(&str, f64, f64); 3] = [
        (
            "eager, trained",
            accuracy(&eager_logits, &test.1)?,
            eager(&*model)?,
        ),
        (
            "eager, pruned",
            accuracy(&pruned_logits, &test.1)?,
            eager(&gm)?,
        ),
        (
            "compiled, pruned",
            accuracy(&compiled_logits, &test.1)?,
            support::time(args.runs, || {
                compiled.run(std::slice::from_ref(&test.0)).map(drop)
            })?
            .0,
        ),
    ];
    println!("   {:<18} {:>9} {:>12}", "model", "accuracy", "latency ms");
    for (name, accuracy, ms) in rows {
        println!("   {name:<18} {:>8.1}% {ms:>12.3}", 100.0 * accuracy);
    }
    println!(
        "   compiled runs at {:.2}x the speed of the same pruned model in eager mode, {:.2}x that \
         of the unpruned eager model",
        rows[1].2 / rows[2].2,
        rows[0].2 / rows[2].2
    );
    Ok(())
}
