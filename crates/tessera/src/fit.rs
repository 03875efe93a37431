//! `fit_classifier`: the training loop of the examples and the demo, written once: shuffled
//! mini-batches, cross-entropy, Adam, a progress bar, and the model left in eval mode.

use crate::datasets::permutation;
use crate::functional as F;
use crate::nn::optim::{Adam, AdamOptions, Optimizer};
use crate::nn::{Layer, ModuleExt, Result};
use crate::{Generator, Tensor};
use indicatif::{ProgressBar, ProgressStyle};

/// How [`fit_classifier`] trains.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FitOptions {
    /// Passes over the data.
    pub epochs: usize,
    /// Adam's learning rate.
    pub lr: f64,
    /// Samples per step.
    pub batch_size: usize,
}

impl Default for FitOptions {
    fn default() -> Self {
        FitOptions {
            epochs: 3,
            lr: 1e-2,
            batch_size: 32,
        }
    }
}

/// Trains `model` on images `data.0` with class labels `data.1` (cross-entropy, Adam),
/// showing a progress bar, then puts it in eval mode. Returns the last step's loss.
pub fn fit_classifier(
    model: &dyn Layer,
    data: &(Tensor, Tensor),
    options: FitOptions,
    g: &mut Generator,
) -> Result<f64> {
    model.train(true);
    let mut optimizer = Adam::new(
        model.parameter_tensors(),
        AdamOptions {
            lr: options.lr,
            ..Default::default()
        },
    )?;
    let (n, batch) = (data.0.shape()[0], options.batch_size.max(1));
    let bar = ProgressBar::new((options.epochs * n.div_ceil(batch)) as u64);
    if let Ok(style) = ProgressStyle::with_template("{bar:40} {pos}/{len} batches {msg}") {
        bar.set_style(style);
    }
    let mut last_loss = f64::NAN;
    for epoch in 0..options.epochs {
        let order = permutation(n, g)?;
        for start in (0..n).step_by(batch) {
            let index = order.narrow(0, start, batch.min(n - start))?;
            let logits = model.forward(data.0.index_select(0, &index)?)?;
            let labels = data.1.index_select(0, &index)?;
            let loss = F::cross_entropy(&logits, &labels, Default::default())?;
            optimizer.zero_grad(true);
            loss.backward()?;
            optimizer.step()?;
            last_loss = loss.item::<f64>()?;
            bar.set_message(format!(
                "epoch {}/{}, loss {last_loss:.4}",
                epoch + 1,
                options.epochs
            ));
            bar.inc(1);
        }
    }
    bar.finish_and_clear();
    model.eval();
    Ok(last_loss)
}
