//! End-to-end demo: trains a two-layer MLP with autograd and SGD on a built-in data set
//! (three interleaved spirals), showing the loss fall and the accuracy rise.

use clap::Parser;
use indicatif::{ProgressBar, ProgressStyle};
use tessera::functional as F;
use tessera::{DType, Generator, Result, Tensor, no_grad};

#[derive(Parser)]
#[command(about = "Train a small classifier on three spirals with Tessera's autograd")]
pub(crate) struct Args {
    /// Passes over the data set.
    #[arg(long, default_value_t = 200)]
    epochs: usize,
    /// Learning rate of plain SGD.
    #[arg(long, default_value_t = 0.5)]
    lr: f64,
    /// Seed of the data set and the initial weights.
    #[arg(long, default_value_t = 0)]
    seed: u64,
}

/// `classes` spirals of `per_class` 2-D points each, with labels.
fn spirals(classes: usize, per_class: usize, g: &mut Generator) -> Result<(Tensor, Tensor)> {
    let mut points = Vec::with_capacity(classes * per_class * 2);
    let mut labels = Vec::with_capacity(classes * per_class);
    for c in 0..classes {
        for i in 0..per_class {
            let r = i as f64 / per_class as f64;
            let angle = c as f64 * 4.0 + 4.0 * r + g.normal() * 0.2;
            points.extend([(r * angle.sin()) as f32, (r * angle.cos()) as f32]);
            labels.push(c as i64);
        }
    }
    Ok((
        Tensor::from_vec(points, &[classes * per_class, 2])?,
        Tensor::from_vec(labels, &[classes * per_class])?,
    ))
}

fn param(shape: &[usize], scale: f64, g: &mut Generator) -> Result<Tensor> {
    Tensor::randn_with(shape, DType::F32, g)?
        .mul_scalar(scale)?
        .requires_grad_(true)
}

fn main() -> std::process::ExitCode {
    tessera::exit_code("demo", run(&Args::parse()))
}

pub(crate) fn run(args: &Args) -> Result<()> {
    let mut g = Generator::new(args.seed);
    let (x, y) = spirals(3, 200, &mut g)?;
    let hidden = 64;
    let params = [
        param(&[hidden, 2], 1.0, &mut g)?,
        param(&[hidden], 0.1, &mut g)?,
        param(&[3, hidden], 0.1, &mut g)?,
        param(&[3], 0.0, &mut g)?,
    ];
    let forward = |x: &Tensor| -> Result<Tensor> {
        x.linear(&params[0], Some(&params[1]))?
            .relu()?
            .linear(&params[2], Some(&params[3]))
    };
    let accuracy = |logits: &Tensor| -> Result<f64> {
        logits
            .argmax(Some(1), false)?
            .eq_(&y)?
            .to_dtype(DType::F32)?
            .mean_all()?
            .item::<f64>()
    };

    println!(
        "Training a 2-{hidden}-3 MLP on {} points of three spirals ({} epochs of full-batch SGD, lr {})",
        x.shape()[0],
        args.epochs,
        args.lr
    );
    let bar = ProgressBar::new(args.epochs as u64);
    bar.set_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} epochs  {msg}").expect("valid template"),
    );
    let mut first_loss = None;
    for epoch in 0..args.epochs {
        params.iter().for_each(|p| p.set_grad(None));
        let logits = forward(&x)?;
        let loss = F::cross_entropy(&logits, &y, F::CrossEntropyOptions::default())?;
        loss.backward()?;
        {
            let _guard = no_grad();
            for p in &params {
                if let Some(grad) = p.grad() {
                    p.sub_(&grad.mul_scalar(args.lr)?)?;
                }
            }
        }
        let loss = loss.item::<f64>()?;
        first_loss.get_or_insert(loss);
        if epoch % 10 == 0 || epoch + 1 == args.epochs {
            bar.set_message(format!(
                "loss {loss:.4}  accuracy {:.1}%",
                100.0 * accuracy(&logits)?
            ));
        }
        bar.inc(1);
    }
    bar.finish();
    let logits = {
        let _guard = no_grad();
        forward(&x)?
    };
    let final_loss =
        F::cross_entropy(&logits, &y, F::CrossEntropyOptions::default())?.item::<f64>()?;
    println!(
        "loss {:.4} -> {final_loss:.4}, training accuracy {:.1}%",
        first_loss.unwrap_or(f64::NAN),
        100.0 * accuracy(&logits)?
    );
    Ok(())
}
