//! Trains the shapes CNN twice from the same weights on the same batches: eagerly (forward,
//! `backward`, `optimizer.step()`) and with `tessera::compile_train_step` (the whole step one
//! compiled program), printing both loss curves and the time per step. Exits non-zero when the
//! curves or the final weights differ beyond float tolerance.

use clap::Parser;
use indicatif::{ProgressBar, ProgressStyle};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tessera::datasets::{CLASSES, SIDE, permutation, shapes};
use tessera::functional as F;
use tessera::nn::optim::{Optimizer, SGD, SgdOptions};
use tessera::nn::{Call, ModuleExt};
use tessera::{CompileOptions, Generator, Tensor, compile_train_step, manual_seed};

#[path = "shapes_net.rs"]
mod shapes_net;
use shapes_net::ShapesNet;

type Error = Box<dyn std::error::Error>;

#[derive(Parser)]
#[command(about = "Train the shapes CNN eagerly and as a compiled training step, side by side")]
struct Args {
    /// Passes over the training set.
    #[arg(long, default_value_t = 3)]
    epochs: usize,
    /// Images per batch.
    #[arg(long, default_value_t = 64)]
    batch: usize,
    /// Seed of the data and of the initial weights.
    #[arg(long, default_value_t = 0)]
    seed: u64,
}

fn main() -> std::process::ExitCode {
    tessera::exit_code("compile_train", run(&Args::parse()))
}

fn cross_entropy(logits: &Tensor, target: &Tensor) -> tessera::nn::Result<Tensor> {
    Ok(F::cross_entropy(logits, target, Default::default())?)
}

fn sgd(model: &ShapesNet) -> Result<SGD, Error> {
    let options = SgdOptions {
        lr: 0.05,
        momentum: 0.9,
        weight_decay: 1e-4,
        ..Default::default()
    };
    Ok(SGD::new(model.parameter_tensors(), options)?)
}

fn run(args: &Args) -> Result<(), Error> {
    if args.epochs == 0 || args.batch == 0 {
        return Err("--epochs and --batch must be at least 1".into());
    }
    let train_size = 1536;
    let mut g = Generator::new(args.seed);
    let (train_x, train_y) = shapes(train_size, &mut g)?;
    manual_seed(args.seed);
    let eager = Arc::new(ShapesNet::new()?);
    let compiled = Arc::new(ShapesNet::new()?);
    compiled.load_state_dict(&eager.state_dict()?, true, false)?;
    for model in [&eager, &compiled] {
        model.train(true);
    }
    let mut eager_opt = sgd(&eager)?;
    let first = permutation(train_size, &mut g)?.narrow(0, 0, args.batch)?;
    let example = (
        train_x.index_select(0, &first)?,
        train_y.index_select(0, &first)?,
    );
    let start = Instant::now();
    let mut step = compile_train_step(
        compiled.clone(),
        cross_entropy,
        sgd(&compiled)?,
        (&example.0, &example.1),
        CompileOptions::default(),
    )?;
    println!(
        "{train_size} generated 1x{SIDE}x{SIDE} images of {} classes, batch {}, SGD (lr 0.05, \
         momentum 0.9); step traced and its backward derived in {:.1?}",
        CLASSES.len(),
        args.batch,
        start.elapsed()
    );

    let batches = train_size / args.batch;
    let bar = ProgressBar::new((args.epochs * batches) as u64);
    bar.set_style(ProgressStyle::with_template(
        "{bar:40} {pos}/{len} steps  {msg}",
    )?);
    let (mut eager_time, mut compiled_time) = (Duration::ZERO, Duration::ZERO);
    let mut worst = 0.0f64;
    println!("epoch  eager loss  compiled loss");
    for epoch in 0..args.epochs {
        let order = permutation(train_size, &mut g)?;
        let (mut eager_sum, mut compiled_sum) = (0.0, 0.0);
        for b in 0..batches {
            let index = order.narrow(0, b * args.batch, args.batch)?;
            let (x, y) = (
                train_x.index_select(0, &index)?,
                train_y.index_select(0, &index)?,
            );
            let t = Instant::now();
            let loss = cross_entropy(&eager.call(x.clone())?, &y)?;
            eager_opt.zero_grad(true);
            loss.backward()?;
            eager_opt.step()?;
            let eager_loss = loss.item::<f64>()?;
            eager_time += t.elapsed();

            let t = Instant::now();
            let compiled_loss = step.step(&x, &y)?.item::<f64>()?;
            compiled_time += t.elapsed();

            worst = worst.max((eager_loss - compiled_loss).abs() / eager_loss.abs().max(1e-3));
            eager_sum += eager_loss;
            compiled_sum += compiled_loss;
            bar.inc(1);
        }
        bar.suspend(|| {
            println!(
                "{:>5}  {:>10.5}  {:>13.5}",
                epoch + 1,
                eager_sum / batches as f64,
                compiled_sum / batches as f64
            )
        });
    }
    bar.finish_and_clear();
    let steps = (args.epochs * batches) as u32;
    let report = step.report();
    println!(
        "time per step: eager {:.3?}, compiled {:.3?} ({:.2}x); {} programs compiled in {:.1?}",
        eager_time / steps,
        compiled_time / steps,
        compiled_time.as_secs_f64() / eager_time.as_secs_f64(),
        report.programs,
        report.compile_time
    );
    if let Some(remat) = &report.remat {
        println!(
            "rematerialisation: {} of the {} bytes the backward reads from the forward saved \
             ({} nodes recomputed); the step's arena: {} bytes",
            remat.bytes_saved(),
            remat.bytes_before(),
            remat.recomputed.len(),
            report.last.arena_bytes
        );
    }
    let mut weights = 0.0f64;
    for ((name, a), (_, b)) in eager
        .named_parameters()
        .into_iter()
        .zip(compiled.named_parameters())
    {
        let diff = a
            .tensor()
            .sub(b.tensor())?
            .abs()?
            .max_all()?
            .item::<f64>()?;
        let scale = a.tensor().abs()?.max_all()?.item::<f64>()?.max(1e-3);
        if diff / scale > weights {
            weights = diff / scale;
        }
        if diff / scale > 1e-2 {
            return Err(format!("{name} differs by {diff:e} after training").into());
        }
    }
    println!("largest relative difference: loss {worst:.1e}, weights {weights:.1e}");
    // Float sums in another order drift apart slowly over hundreds of steps: the curves must
    // agree to well under the loss's own step-to-step noise.
    if worst > 1e-2 {
        return Err(format!("the loss curves differ by up to {worst:.1e} (relative)").into());
    }
    Ok(())
}
