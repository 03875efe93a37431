//! Trains a small CNN built from `tessera::nn::layers` to tell three generated shapes apart,
//! saves a training checkpoint (`.pt`) and the weights (safetensors), and checks that a fresh
//! model loaded from them gives bit-identical outputs.

use clap::Parser;
use indicatif::{ProgressBar, ProgressStyle};
use std::path::{Path, PathBuf};
use tessera::datasets::{CLASSES, SIDE, accuracy, permutation, shapes};
use tessera::functional as F;
use tessera::nn::optim::{Adam, AdamOptions, Optimizer};
use tessera::nn::{
    Call, ModuleExt, StateDict, Value, load_checkpoint, load_safetensors, save_checkpoint,
    save_safetensors,
};
use tessera::{Generator, Tensor, manual_seed, no_grad};

#[path = "shapes_net.rs"]
mod shapes_net;
use shapes_net::ShapesNet;

type Error = Box<dyn std::error::Error>;

#[derive(Parser)]
#[command(about = "Train a small CNN on generated bars and squares, checkpoint it and reload it")]
pub(crate) struct Args {
    /// Passes over the training set.
    #[arg(long, default_value_t = 6)]
    epochs: usize,
    /// Seed of the data and of the initial weights.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Directory for checkpoint.pt and model.safetensors (default: a temporary directory,
    /// deleted on exit).
    #[arg(long)]
    out: Option<PathBuf>,
}

/// The model's outputs in evaluation mode, without recording a graph.
fn predict(model: &ShapesNet, images: &Tensor) -> Result<Tensor, Error> {
    model.eval();
    let _guard = no_grad();
    Ok(model.call(images.clone())?)
}

fn main() -> std::process::ExitCode {
    tessera::exit_code("train_shapes", run(&Args::parse()))
}

pub(crate) fn run(args: &Args) -> Result<(), Error> {
    if args.epochs == 0 {
        return Err("--epochs must be at least 1".into());
    }
    // Where the checkpoint goes, settled first so that a bad --out fails before training.
    let temp;
    let dir: &Path = match &args.out {
        Some(dir) => {
            std::fs::create_dir_all(dir)
                .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
            dir
        }
        None => {
            temp = tempfile::tempdir()?;
            temp.path()
        }
    };
    let (train_size, test_size, batch_size) = (1500, 600, 32);
    let mut g = Generator::new(args.seed);
    let (train_x, train_y) = shapes(train_size, &mut g)?;
    let (test_x, test_y) = shapes(test_size, &mut g)?;
    manual_seed(args.seed);
    let model = ShapesNet::new()?;
    let params = model.parameter_tensors();
    let options = AdamOptions {
        lr: 1e-2,
        ..Default::default()
    };
    let mut optimizer = Adam::new(params, options)?;
    println!(
        "Training on {train_size} generated 1x{SIDE}x{SIDE} images of {} classes ({}), \
         {} epochs of Adam (lr 1e-2, batch {batch_size}); {test_size} held-out images",
        CLASSES.len(),
        CLASSES.join(", "),
        args.epochs
    );
    println!("{}", model.repr());

    let batches = train_size.div_ceil(batch_size);
    let bar = ProgressBar::new((args.epochs * batches) as u64);
    bar.set_style(ProgressStyle::with_template(
        "{bar:40} {pos}/{len} steps  {msg}",
    )?);
    let mut last_loss = f64::NAN;
    for epoch in 0..args.epochs {
        model.train(true);
        let order = permutation(train_size, &mut g)?;
        let (mut seen, mut correct, mut loss_sum) = (0usize, 0.0, 0.0);
        for b in 0..batches {
            let start = b * batch_size;
            let len = batch_size.min(train_size - start);
            let index = order.narrow(0, start, len)?;
            let (x, y) = (
                train_x.index_select(0, &index)?,
                train_y.index_select(0, &index)?,
            );
            let logits = model.call(x)?;
            let loss = F::cross_entropy(&logits, &y, F::CrossEntropyOptions::default())?;
            optimizer.zero_grad(true);
            loss.backward()?;
            optimizer.step()?;
            seen += len;
            loss_sum += loss.item::<f64>()? * len as f64;
            correct += accuracy(&logits, &y)? * len as f64;
            bar.set_message(format!(
                "epoch {}/{}  loss {:.4}  train accuracy {:.1}%",
                epoch + 1,
                args.epochs,
                loss_sum / seen as f64,
                100.0 * correct / seen as f64
            ));
            bar.inc(1);
        }
        last_loss = loss_sum / seen as f64;
        let held_out = accuracy(&predict(&model, &test_x)?, &test_y)?;
        bar.suspend(|| {
            println!(
            "epoch {}/{}: training loss {last_loss:.4}, training accuracy {:.1}%, held-out accuracy {:.1}%",
            epoch + 1,
            args.epochs,
            100.0 * correct / seen as f64,
            100.0 * held_out
        )
        });
    }
    bar.finish();

    let test_logits = predict(&model, &test_x)?;
    let test_accuracy = accuracy(&test_logits, &test_y)?;
    println!(
        "final training loss {last_loss:.4}; held-out accuracy {:.1}% ({test_size} images)",
        100.0 * test_accuracy
    );

    // Save: a training checkpoint as PyTorch's tutorials write it, and the weights alone.
    let state = model.state_dict()?;
    let mut checkpoint = Value::dict();
    if let Value::Dict(entries) = &mut checkpoint {
        entries.insert("epoch".into(), Value::Int(args.epochs as i64));
        entries.insert("model_state_dict".into(), Value::from(&state));
        entries.insert("optimizer_state_dict".into(), optimizer.state_dict());
        entries.insert("loss".into(), Value::Float(last_loss));
    }
    let checkpoint_path = dir.join("checkpoint.pt");
    let weights_path = dir.join("model.safetensors");
    save_checkpoint(&checkpoint_path, &checkpoint)?;
    save_safetensors(&state, &weights_path)?;
    println!(
        "saved {} and {}",
        checkpoint_path.display(),
        weights_path.display()
    );

    // Reload into fresh models (new random weights) and compare outputs bit for bit.
    let loaded = load_checkpoint(&checkpoint_path)?;
    let model_state = loaded
        .get("model_state_dict")
        .ok_or("the checkpoint has no model_state_dict")?;
    let from_checkpoint = ShapesNet::new()?;
    from_checkpoint.load_state_dict(&StateDict::try_from(model_state)?, true, false)?;
    let mut resumed = Adam::new(from_checkpoint.parameter_tensors(), AdamOptions::default())?;
    let optimizer_state = loaded
        .get("optimizer_state_dict")
        .ok_or("the checkpoint has no optimizer_state_dict")?;
    resumed.load_state_dict(optimizer_state)?;
    println!(
        "checkpoint: epoch {}, loss {:.4}, optimizer lr {}",
        loaded.get("epoch").and_then(Value::as_i64).unwrap_or(-1),
        loaded
            .get("loss")
            .and_then(Value::as_f64)
            .unwrap_or(f64::NAN),
        resumed.param_groups()[0].lr()
    );
    let from_safetensors = ShapesNet::new()?;
    from_safetensors.load_state_dict(&load_safetensors(&weights_path)?, true, false)?;

    let expected = test_logits.to_vec::<f32>()?;
    for (name, fresh) in [
        ("checkpoint.pt", &from_checkpoint),
        ("model.safetensors", &from_safetensors),
    ] {
        let got = predict(fresh, &test_x)?.to_vec::<f32>()?;
        let identical = got.len() == expected.len()
            && got
                .iter()
                .zip(&expected)
                .all(|(a, b)| a.to_bits() == b.to_bits());
        if !identical {
            return Err(format!("the model reloaded from {name} gives different outputs").into());
        }
        println!("reloaded model gives identical outputs (from {name})");
    }
    Ok(())
}
