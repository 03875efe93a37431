//! Quantization-aware training recovering accuracy that post-training quantization loses, on
//! the shapes CNN with low-bit weights (3 bits by default: values in `[-4, 3]`, held in the
//! int8 weights of the static int8 graph) and u8 activations: trains the model in float;
//! quantizes a copy after training (min/max observers, a few calibration batches, conversion),
//! once with int8 weights as a reference and once with low-bit ones; fine-tunes another copy
//! with learnable fake quantizers (`PrepareQat { learnable: true }`, LSQ: scales and zero
//! points trained with the weights) and converts it to the same low-bit-weight int8 graph;
//! prints the held-out accuracy of each. This task is easy: 8-bit and even 4-bit per-channel
//! weights lose nothing after training, so the comparison that shows what QAT does is at 3
//! bits, where rounding each weight to one of 8 levels costs accuracy.

use clap::Parser;
use tessera::datasets::{accuracy, shapes};
use tessera::fit::{FitOptions, fit_classifier};
use tessera::fx::GraphModule;
use tessera::fx::trace::{LeafPolicy, trace};
use tessera::nn::Call;
use tessera::nn::quantized::enable_param_learning;
use tessera::{Generator, Tensor, manual_seed, no_grad};
use tessera_passes::{ConvertStatic, FoldBatchNorm, Pass, PrepareQat, calibrate};

#[path = "shapes_net.rs"]
mod shapes_net;
use shapes_net::ShapesNet;

type Error = Box<dyn std::error::Error>;

#[derive(Parser)]
#[command(about = "Train the shapes CNN, then compare post-training and quantization-aware int8")]
pub(crate) struct Args {
    /// Float training epochs.
    #[arg(long, default_value_t = 4)]
    epochs: usize,
    /// Quantization-aware fine-tuning epochs.
    #[arg(long, default_value_t = 2)]
    qat_epochs: usize,
    /// Bits of the quantized weights of the low-bit comparison (2 to 8).
    #[arg(long, default_value_t = 3)]
    weight_bits: u32,
    /// Training images.
    #[arg(long, default_value_t = 1500)]
    train_size: usize,
    /// Held-out images.
    #[arg(long, default_value_t = 600)]
    test_size: usize,
    /// Batches of 32 training images that calibration observes.
    #[arg(long, default_value_t = 4)]
    calibration_batches: usize,
    #[arg(long, default_value_t = 0)]
    seed: u64,
}

/// Held-out accuracy of `gm`, without recording gradients.
fn evaluate(gm: &GraphModule, (x, y): &(Tensor, Tensor)) -> Result<f64, Error> {
    let _guard = no_grad();
    Ok(accuracy(&gm.call(x.clone())?, y)?)
}

/// The trained float model traced in eval mode with batch norm folded into the convs.
fn folded(model: &std::sync::Arc<ShapesNet>, x: &Tensor) -> Result<GraphModule, Error> {
    let graph = trace(&**model, x.meta(), LeafPolicy::default())?;
    let mut gm = GraphModule::new(model.clone(), graph);
    FoldBatchNorm.run(&mut gm)?;
    Ok(gm)
}

/// The symmetric signed range of `bits`-bit integers, as PyTorch's `quant_min`/`quant_max`.
fn signed_range(bits: u32) -> Result<(i64, i64), Error> {
    if !(2..=8).contains(&bits) {
        return Err(format!("--weight-bits must be between 2 and 8, got {bits}").into());
    }
    let half = 1i64 << (bits - 1);
    Ok((-half, half - 1))
}

/// Post-training quantization: the folded model with fake quantizers whose min/max observers
/// calibrate on `batches`, converted without any training step.
fn post_training(
    model: &std::sync::Arc<ShapesNet>,
    x: &Tensor,
    prepare: PrepareQat,
    batches: &[Vec<Tensor>],
) -> Result<GraphModule, Error> {
    let mut gm = folded(model, x)?;
    prepare.run(&mut gm)?;
    calibrate(&gm, batches)?;
    ConvertStatic { per_channel: true }.run(&mut gm)?;
    Ok(gm)
}

fn main() -> std::process::ExitCode {
    tessera::exit_code("qat", run(&Args::parse()))
}

pub(crate) fn run(args: &Args) -> Result<(), Error> {
    let weight_range = signed_range(args.weight_bits)?;
    let mut g = Generator::new(args.seed);
    let train = shapes(args.train_size, &mut g)?;
    let test = shapes(args.test_size, &mut g)?;
    manual_seed(args.seed);
    let model = std::sync::Arc::new(ShapesNet::new()?);
    let options = FitOptions {
        epochs: args.epochs,
        ..Default::default()
    };
    fit_classifier(&*model, &train, options, &mut g)?;
    let float_accuracy = evaluate(&folded(&model, &test.0)?, &test)?;
    let n = train.0.shape()[0];
    let batches: Vec<Vec<Tensor>> = (0..args.calibration_batches)
        .map(|b| 32 * b)
        .take_while(|start| *start < n)
        .map(|start| Ok(vec![train.0.narrow(0, start, 32.min(n - start))?]))
        .collect::<Result<_, Error>>()?;

    // Post-training static quantization, with int8 weights and with low-bit ones.
    let int8 = PrepareQat::default();
    let low_bit = PrepareQat {
        weight_range,
        ..PrepareQat::default()
    };
    let ptq_int8_accuracy = evaluate(&post_training(&model, &test.0, int8, &batches)?, &test)?;
    let ptq_accuracy = evaluate(&post_training(&model, &test.0, low_bit, &batches)?, &test)?;

    // Quantization-aware fine-tuning with learnable fake quantizers: calibration initializes
    // their scales and zero points, then they train with the weights; the same conversion.
    let mut qat = folded(&model, &test.0)?;
    PrepareQat {
        learnable: true,
        weight_range,
    }
    .run(&mut qat)?;
    calibrate(&qat, &batches)?;
    enable_param_learning(&qat)?;
    let fine_tune = FitOptions {
        epochs: args.qat_epochs,
        lr: 1e-3,
        ..Default::default()
    };
    fit_classifier(&qat, &train, fine_tune, &mut g)?;
    let fake_quantized_accuracy = evaluate(&qat, &test)?;
    ConvertStatic { per_channel: true }.run(&mut qat)?;
    let qat_accuracy = evaluate(&qat, &test)?;

    let bits = args.weight_bits;
    println!(
        "{} held-out images; float trained {} epochs; activations u8, weights per channel",
        args.test_size, args.epochs
    );
    let rows = [
        ("float".to_string(), float_accuracy),
        (
            "post-training, 8-bit weights".to_string(),
            ptq_int8_accuracy,
        ),
        (format!("post-training, {bits}-bit weights"), ptq_accuracy),
        (
            format!(
                "QAT fake-quantized, {bits}-bit weights ({} epochs)",
                args.qat_epochs
            ),
            fake_quantized_accuracy,
        ),
        (format!("QAT int8 graph, {bits}-bit weights"), qat_accuracy),
    ];
    for (what, accuracy) in rows {
        println!("{what:<48} {:6.2}%", 100.0 * accuracy);
    }
    let verdict = if qat_accuracy > ptq_accuracy {
        "QAT recovers accuracy that post-training quantization lost"
    } else if qat_accuracy == ptq_accuracy {
        "QAT and post-training quantization are equally accurate here"
    } else {
        "QAT does not beat post-training quantization here"
    };
    println!(
        "{verdict} ({bits}-bit weights vs float: post-training {:+.2} points, QAT {:+.2} points)",
        100.0 * (ptq_accuracy - float_accuracy),
        100.0 * (qat_accuracy - float_accuracy)
    );
    Ok(())
}
