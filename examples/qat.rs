//! Quantization-aware training against post-training quantization, on the shapes CNN: trains
//! it in float, quantizes a copy statically after training (observers, a few calibration
//! batches, conversion), fine-tunes another copy with fake quantization (`PrepareQat`) and
//! converts it to the same int8 graph, then prints the held-out accuracy of all three.

use clap::Parser;
use tessera::datasets::{accuracy, shapes};
use tessera::fit::{FitOptions, fit_classifier};
use tessera::fx::GraphModule;
use tessera::fx::trace::{LeafPolicy, trace};
use tessera::nn::Call;
use tessera::nn::quantized::enable_observers;
use tessera::{Generator, Tensor, manual_seed, no_grad};
use tessera_passes::{ConvertStatic, FoldBatchNorm, InsertObservers, Pass, PrepareQat, calibrate};

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
    /// Quantization-aware fine-tuning epochs (observers are frozen for the last one, when
    /// there are several).
    #[arg(long, default_value_t = 2)]
    qat_epochs: usize,
    /// Training images.
    #[arg(long, default_value_t = 1500)]
    train_size: usize,
    /// Held-out images.
    #[arg(long, default_value_t = 600)]
    test_size: usize,
    /// Batches of 32 training images that post-training calibration observes.
    #[arg(long, default_value_t = 2)]
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

fn main() -> std::process::ExitCode {
    tessera::exit_code("qat", run(&Args::parse()))
}

pub(crate) fn run(args: &Args) -> Result<(), Error> {
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
    let float_gm = folded(&model, &test.0)?;
    let float_accuracy = evaluate(&float_gm, &test)?;

    // Post-training static quantization.
    let mut ptq = folded(&model, &test.0)?;
    InsertObservers.run(&mut ptq)?;
    let batches: Vec<Vec<Tensor>> = (0..args.calibration_batches)
        .map(|b| Ok(vec![train.0.narrow(0, 32 * b, 32)?]))
        .collect::<Result<_, Error>>()?;
    calibrate(&ptq, &batches)?;
    ConvertStatic { per_channel: true }.run(&mut ptq)?;
    let ptq_accuracy = evaluate(&ptq, &test)?;

    // Quantization-aware fine-tuning of the folded float model, then the same conversion.
    let mut qat = folded(&model, &test.0)?;
    PrepareQat.run(&mut qat)?;
    let fine_tune = FitOptions {
        epochs: 1,
        lr: 1e-3,
        ..Default::default()
    };
    for epoch in 0..args.qat_epochs {
        // Observers record at least one epoch before they are frozen.
        if epoch > 0 && epoch + 1 == args.qat_epochs {
            enable_observers(&qat, false)?;
        }
        fit_classifier(&qat, &train, fine_tune, &mut g)?;
    }
    enable_observers(&qat, false)?;
    let fake_quantized_accuracy = evaluate(&qat, &test)?;
    ConvertStatic { per_channel: true }.run(&mut qat)?;
    let qat_accuracy = evaluate(&qat, &test)?;

    println!(
        "{} held-out images, float trained {} epochs",
        args.test_size, args.epochs
    );
    println!(
        "float accuracy                     {:6.2}%",
        100.0 * float_accuracy
    );
    println!(
        "post-training int8 ({} calibration batches) {:6.2}%",
        args.calibration_batches,
        100.0 * ptq_accuracy
    );
    println!(
        "QAT fake-quantized ({} epochs)      {:6.2}%",
        args.qat_epochs,
        100.0 * fake_quantized_accuracy
    );
    println!(
        "QAT int8                           {:6.2}%",
        100.0 * qat_accuracy
    );
    let verdict = if qat_accuracy > ptq_accuracy {
        "QAT recovers accuracy that post-training quantization lost"
    } else if qat_accuracy == ptq_accuracy {
        "QAT and post-training quantization are equally accurate on this small task"
    } else {
        "QAT does not beat post-training quantization on this small task"
    };
    println!(
        "{verdict} (int8 vs float: PTQ {:+.2} points, QAT {:+.2} points)",
        100.0 * (ptq_accuracy - float_accuracy),
        100.0 * (qat_accuracy - float_accuracy)
    );
    Ok(())
}
