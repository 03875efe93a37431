//! Optimises a trained ResNet-style CNN for inference, one pass at a time: trace it, fold batch
//! norm into the convolutions, prune 30% of the channels structurally (and fine-tune the pruned
//! graph briefly), quantize its linear layer to int8 (dynamic), simplify the elementwise and
//! layout regions with the e-graph pass, then clean up. Prints the graph after every step with the pass's time, and
//! compares accuracy, latency, parameters and FLOPs of every stage with the eager float model.
//! `--model` runs the same pipeline on a model of `tessera::nn::models` instead (untrained, in
//! eval mode), where "accuracy" is the top-1 agreement with the eager float model.

#[path = "zoo.rs"]
mod zoo;

use clap::Parser;
use indicatif::{ProgressBar, ProgressStyle};
use std::sync::Arc;
use std::time::Instant;
use tessera::datasets::{CLASSES, SIDE, accuracy, permutation, shapes};
use tessera::functional as F;
use tessera::fx::GraphModule;
use tessera::fx::trace::{LeafPolicy, trace};
use tessera::nn::layers::{
    AdaptiveAvgPool2d, BatchNorm2d, Conv2d, Conv2dOptions, Flatten, Linear, ReLU,
};
use tessera::nn::models::BasicBlock;
use tessera::nn::optim::{Adam, AdamOptions, Optimizer};
use tessera::nn::{Call, Forward, Layer, ModuleCore, ModuleExt, ModuleKind};
use tessera::passes::cost::{GraphCost, graph_cost};
use tessera::passes::{
    DeadCodeElimination, FoldBatchNorm, Pass, QuantizeDynamic, Simplify, StructuredPrune,
};
use tessera::tensor::TensorMeta;
use tessera::{Generator, Tensor, manual_seed, no_grad};

type Error = Box<dyn std::error::Error>;

#[derive(Parser)]
#[command(
    about = "Train a ResNet-style CNN on generated shapes, then optimise its traced graph \
                   pass by pass and compare accuracy and speed"
)]
pub struct Args {
    /// Training epochs of the float model.
    #[arg(long, default_value_t = 5)]
    epochs: usize,
    /// Fine-tuning epochs after pruning (0 to skip).
    #[arg(long, default_value_t = 1)]
    finetune_epochs: usize,
    /// Fraction of each channel group that structured pruning removes.
    #[arg(long, default_value_t = 0.3)]
    prune: f64,
    /// Seed of the data and of the initial weights.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Print only the summary table, not the graph after each step.
    #[arg(long)]
    quiet: bool,
    /// Also draw held-out accuracy and latency per stage as an SVG chart here.
    #[arg(long)]
    plot: Option<std::path::PathBuf>,
    /// The model: `residual` trains the small ResNet-style CNN; the others are
    /// `tessera::nn::models` with random weights (images 3x32x32, GPT 12 tokens).
    #[arg(long, value_enum, default_value_t = ModelChoice::Residual)]
    model: ModelChoice,
}

zoo::model_choice! {
    /// The models `--model` names.
    ModelChoice { Residual => "residual" }
}

/// A stem conv block, two residual blocks (the second downsampling), pooling and a classifier.
#[derive(tessera::nn::Module)]
struct ResidualNet {
    core: ModuleCore,
    conv1: Conv2d,
    bn1: BatchNorm2d,
    relu: ReLU,
    layer1: BasicBlock,
    layer2: BasicBlock,
    avgpool: AdaptiveAvgPool2d,
    flatten: Flatten,
    fc: Linear,
}

impl ResidualNet {
    fn new() -> tessera::nn::Result<Self> {
        Ok(ResidualNet {
            core: ModuleCore::default(),
            conv1: Conv2d::with_options(1, 16, 3, Conv2dOptions::default().padding(1))?,
            bn1: BatchNorm2d::new(16)?,
            relu: ReLU::new(),
            layer1: BasicBlock::new(16, 16, 1)?,
            layer2: BasicBlock::new(16, 32, 2)?,
            avgpool: AdaptiveAvgPool2d::new(1),
            flatten: Flatten::new(),
            fc: Linear::new(32, CLASSES.len())?,
        })
    }
}

impl Forward for ResidualNet {
    type Output = Tensor;
    fn forward(&self, x: Tensor) -> tessera::nn::Result<Tensor> {
        let x = self.relu.call(self.bn1.call(self.conv1.call(x)?)?)?;
        let x = self.layer2.call(self.layer1.call(x)?)?;
        self.fc.call(self.flatten.call(self.avgpool.call(x)?)?)
    }
}

/// Trains `model` on `(x, y)` with Adam for `epochs`, showing progress.
fn train(
    model: &dyn Layer,
    data: &(Tensor, Tensor),
    epochs: usize,
    lr: f64,
    g: &mut Generator,
) -> Result<(), Error> {
    model.train(true);
    let params = model.parameter_tensors();
    let mut optimizer = Adam::new(
        params,
        AdamOptions {
            lr,
            ..Default::default()
        },
    )?;
    let (n, batch) = (data.0.shape()[0], 32);
    let bar = ProgressBar::new((epochs * n.div_ceil(batch)) as u64);
    bar.set_style(ProgressStyle::with_template(
        "{bar:40} {pos}/{len} batches {msg}",
    )?);
    for epoch in 0..epochs {
        let order = permutation(n, g)?;
        for start in (0..n).step_by(batch) {
            let index = order.narrow(0, start, batch.min(n - start))?;
            let logits = model.forward(data.0.index_select(0, &index)?)?;
            let loss = F::cross_entropy(
                &logits,
                &data.1.index_select(0, &index)?,
                Default::default(),
            )?;
            optimizer.zero_grad(true);
            loss.backward()?;
            optimizer.step()?;
            bar.set_message(format!(
                "epoch {}/{epochs}, loss {:.4}",
                epoch + 1,
                loss.item::<f64>()?
            ));
            bar.inc(1);
        }
    }
    bar.finish_and_clear();
    model.eval();
    Ok(())
}

/// One row of the summary: a stage of the model and what it costs.
struct Stage {
    name: String,
    pass_ms: f64,
    accuracy: f64,
    latency_ms: f64,
    cost: Option<GraphCost>,
}

/// Held-out accuracy and the median latency of classifying the whole held-out set.
fn measure(model: &dyn Layer, test: &(Tensor, Tensor)) -> Result<(f64, f64), Error> {
    let _guard = no_grad();
    let logits = flat_logits(&model.forward(test.0.clone())?)?;
    let mut times: Vec<f64> = (0..15)
        .map(|_| {
            let start = Instant::now();
            model
                .forward(test.0.clone())
                .map(|_| start.elapsed().as_secs_f64() * 1e3)
        })
        .collect::<tessera::nn::Result<_>>()?;
    times.sort_by(f64::total_cmp);
    Ok((accuracy(&logits, &test.1)?, times[times.len() / 2]))
}

/// `[..., C]` logits as `[rows, C]` (a language model's positions become rows).
fn flat_logits(logits: &Tensor) -> Result<Tensor, Error> {
    let classes = logits.shape().last().copied().unwrap_or(1).max(1);
    Ok(logits.reshape(&[logits.numel() / classes, classes])?)
}

fn main() -> std::process::ExitCode {
    tessera::exit_code("optimize", run(&Args::parse()))
}

pub fn run(args: &Args) -> Result<(), Error> {
    if !(0.0..1.0).contains(&args.prune) {
        return Err(format!("--prune must be in [0, 1), got {}", args.prune).into());
    }
    let mut g = Generator::new(args.seed);
    if let ModelChoice::Zoo(model) = args.model {
        let untrained = Untrained {
            model,
            g: &mut g,
            args,
        };
        return model.build(CLASSES.len(), 2 * SIDE, untrained);
    }
    let train_data = shapes(1500, &mut g)?;
    let test = shapes(600, &mut g)?;
    manual_seed(args.seed);
    let model = Arc::new(ResidualNet::new()?);
    println!(
        "Training a ResNet-style CNN on 1500 generated {SIDE}x{SIDE} images ({} epochs)",
        args.epochs
    );
    train(&*model, &train_data, args.epochs, 1e-2, &mut g)?;
    optimise(model, Some(&train_data), &test, &mut g, args)
}

/// 32 inputs for a model of the zoo (shapes upsampled to 3x32x32, or 12 random tokens for the
/// GPT), labelled with the eager model's own predictions, through the pipeline.
struct Untrained<'a> {
    model: zoo::Zoo,
    g: &'a mut Generator,
    args: &'a Args,
}

impl zoo::UseModel for Untrained<'_> {
    fn with<M: Layer + 'static>(self, model: M) -> Result<(), Error> {
        model.eval();
        let inputs = if self.model == zoo::Zoo::Gpt {
            zoo::token_ids(32, 12, self.g)?
        } else {
            let (images, _) = shapes(32, self.g)?;
            images
                .reshape(&[32, 1, SIDE, 1, SIDE, 1])?
                .expand(&[32, 3, SIDE, 2, SIDE, 2])?
                .reshape(&[32, 3, 2 * SIDE, 2 * SIDE])?
        };
        let labels = {
            let _guard = no_grad();
            flat_logits(&model.forward(inputs.clone())?)?.argmax(Some(1), false)?
        };
        println!(
            "{:?} with random weights in eval mode; accuracy = top-1 agreement with the eager model",
            self.model
        );
        optimise(Arc::new(model), None, &(inputs, labels), self.g, self.args)
    }
}

/// Traces `model` and runs the pipeline on it, measuring every stage on `test`; the pruned
/// graph is fine-tuned on `train_data` when there is some.
fn optimise<M: Layer + 'static>(
    model: Arc<M>,
    train_data: Option<&(Tensor, Tensor)>,
    test: &(Tensor, Tensor),
    g: &mut Generator,
    args: &Args,
) -> Result<(), Error> {
    let test = test.clone();
    let mut stages = Vec::new();
    let (accuracy, latency_ms) = measure(&*model, &test)?;
    stages.push(Stage {
        name: "eager float model".into(),
        pass_ms: 0.0,
        accuracy,
        latency_ms,
        cost: None,
    });

    let start = Instant::now();
    let graph = trace(
        &*model,
        TensorMeta::new(test.0.shape(), test.0.dtype()),
        // Attention and transformer layers are traced through, so the passes see their ops.
        LeafPolicy::default()
            .trace_kind(ModuleKind::MultiheadAttention)
            .trace_kind(ModuleKind::TransformerEncoderLayer),
    )?;
    let mut gm = GraphModule::new(model.clone(), graph);
    let trace_ms = start.elapsed().as_secs_f64() * 1e3;
    record(&mut stages, "trace", trace_ms, &gm, &test, args)?;

    let steps: Vec<(&str, Box<dyn Pass>)> = vec![
        ("fold_batch_norm", Box::new(FoldBatchNorm)),
        (
            "structured_prune",
            Box::new(StructuredPrune::new(args.prune)),
        ),
        ("quantize_dynamic", Box::new(QuantizeDynamic::new(true))),
        ("simplify", Box::new(Simplify::default())),
        ("dead_code_elimination", Box::new(DeadCodeElimination)),
    ];
    for (name, pass) in steps {
        let start = Instant::now();
        if name == "structured_prune" {
            let report = StructuredPrune::new(args.prune).run_with_report(&mut gm)?;
            let pass_ms = start.elapsed().as_secs_f64() * 1e3;
            println!("\n{report}");
            record(&mut stages, "structured_prune", pass_ms, &gm, &test, args)?;
            if let (Some(train_data), true) = (train_data, args.finetune_epochs > 0) {
                train(&gm, train_data, args.finetune_epochs, 1e-3, g)?;
                let label = format!("fine-tuned {} epoch(s)", args.finetune_epochs);
                record(&mut stages, &label, 0.0, &gm, &test, args)?;
            }
            continue;
        }
        pass.run(&mut gm)?;
        let pass_ms = start.elapsed().as_secs_f64() * 1e3;
        record(&mut stages, name, pass_ms, &gm, &test, args)?;
    }
    print_summary(&stages);
    if let Some(path) = &args.plot {
        plot(&stages, path)?;
        println!("\nwrote {}", path.display());
    }
    Ok(())
}

/// Accuracy (left axis) and latency (right axis) per stage, as an SVG line chart.
fn plot(stages: &[Stage], path: &std::path::Path) -> Result<(), Error> {
    use plotters::prelude::*;
    let root = SVGBackend::new(path, (1200, 420)).into_drawing_area();
    root.fill(&WHITE)?;
    let n = stages.len() as i32;
    let slowest = stages.iter().map(|s| s.latency_ms).fold(0.0, f64::max) * 1.15;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "Accuracy and latency per optimisation stage",
            ("sans-serif", 20),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(55)
        .right_y_label_area_size(55)
        .build_cartesian_2d(-0.5f64..n as f64 - 0.5, 0.0f64..100.0)?
        .set_secondary_coord(-0.5f64..n as f64 - 0.5, 0.0f64..slowest.max(1e-3));
    let names: Vec<String> = stages.iter().map(|s| s.name.clone()).collect();
    chart
        .configure_mesh()
        .x_labels(stages.len())
        .x_label_formatter(&|x| {
            let i = x.round();
            if (x - i).abs() < 1e-6 && i >= 0.0 {
                names.get(i as usize).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        })
        .x_label_style(("sans-serif", 11))
        .y_desc("held-out accuracy (%)")
        .draw()?;
    chart
        .configure_secondary_axes()
        .y_desc("latency (ms)")
        .draw()?;
    let at = |i: usize| i as f64;
    chart
        .draw_series(LineSeries::new(
            stages
                .iter()
                .enumerate()
                .map(|(i, s)| (at(i), 100.0 * s.accuracy)),
            BLUE.stroke_width(2),
        ))?
        .label("accuracy (%)")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLUE));
    chart.draw_series(
        stages
            .iter()
            .enumerate()
            .map(|(i, s)| Circle::new((at(i), 100.0 * s.accuracy), 4, BLUE.filled())),
    )?;
    chart
        .draw_secondary_series(LineSeries::new(
            stages
                .iter()
                .enumerate()
                .map(|(i, s)| (at(i), s.latency_ms)),
            RED.stroke_width(2),
        ))?
        .label("latency (ms)")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], RED));
    chart.draw_secondary_series(
        stages
            .iter()
            .enumerate()
            .map(|(i, s)| Circle::new((at(i), s.latency_ms), 4, RED.filled())),
    )?;
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(SeriesLabelPosition::LowerLeft)
        .draw()?;
    root.present()?;
    Ok(())
}

/// Measures `gm` after the step `name`, prints its graph (unless quiet) and adds its row.
fn record(
    stages: &mut Vec<Stage>,
    name: &str,
    pass_ms: f64,
    gm: &GraphModule,
    test: &(Tensor, Tensor),
    args: &Args,
) -> Result<(), Error> {
    gm.eval();
    gm.graph.verify()?;
    let (accuracy, latency_ms) = measure(gm, test)?;
    let cost = graph_cost(gm)?;
    if !args.quiet {
        println!(
            "\n== after {name} ({pass_ms:.2} ms): accuracy {:.1}%, {cost}\n{}",
            100.0 * accuracy,
            gm.graph
        );
    }
    stages.push(Stage {
        name: name.into(),
        pass_ms,
        accuracy,
        latency_ms,
        cost: Some(cost),
    });
    Ok(())
}

fn print_summary(stages: &[Stage]) {
    let base = &stages[0];
    println!(
        "\n{:<26} {:>9} {:>9} {:>11} {:>8} {:>11} {:>9}",
        "stage", "pass ms", "accuracy", "latency ms", "speedup", "parameters", "MFLOPs"
    );
    for s in stages {
        let (params, flops) = match &s.cost {
            Some(c) => (
                c.parameters.to_string(),
                format!("{:.2}", c.flops as f64 / 1e6),
            ),
            None => ("-".into(), "-".into()),
        };
        println!(
            "{:<26} {:>9.2} {:>8.1}% {:>11.2} {:>7.2}x {:>11} {:>9}",
            s.name,
            s.pass_ms,
            100.0 * s.accuracy,
            s.latency_ms,
            base.latency_ms / s.latency_ms,
            params,
            flops
        );
    }
}
