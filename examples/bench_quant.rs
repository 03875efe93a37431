//! Int8 quantization against float on the CPU, in one run: a 1024x1024 Linear at batch 256
//! (float vs dynamic int8), the raw int8 GEMM per kernel against the f32 matmul, and the
//! conformance SmallCnn at batch 64 and ResNet-18 at batch 1 and 8 (float graph vs statically
//! quantized graph), with the
//! accuracy of each quantized model against its float one. `--json` prints one object per
//! line.

mod support;

#[path = "shapes_net.rs"]
mod shapes_net;

use clap::Parser;
use std::sync::Arc;
use tessera::fx::GraphModule;
use tessera::fx::trace::{LeafPolicy, trace};
use tessera::nn::layers::Linear;
use tessera::nn::models::{ResNet18, SmallCnn};
use tessera::nn::{Call, ModuleExt, Sequential, load_pt_state_dict};
use tessera::tensor::op::quant::{Int8Kernel, gemm_u8i8_with};
use tessera::{DType, Generator, Tensor, no_grad};
use tessera_passes::{
    ConvertStatic, FoldBatchNorm, InsertObservers, Pass, QuantizeDynamic, calibrate,
};

#[derive(Parser)]
#[command(about = "Time int8 quantized inference against float")]
struct Args {
    /// Print one JSON object per result instead of a table.
    #[arg(long)]
    json: bool,
    /// Threads for the kernels.
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// Timed repetitions per workload (after 3 warm-up runs).
    #[arg(long, default_value_t = 30)]
    reps: usize,
    /// Run only the sections (`linear`, `gemm`, `cnn`, `shapes`, `resnet`) named here, comma-separated.
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
}

type BoxError = Box<dyn std::error::Error>;
type Result<T> = std::result::Result<T, BoxError>;

/// [`support::time`] for closures failing with any error.
fn time(reps: usize, f: impl FnMut() -> Result<()>) -> Result<(f64, f64)> {
    support::time(reps, f)
}

fn values(t: &Tensor) -> Result<Vec<f32>> {
    Ok(t.detach().to_dtype(DType::F32)?.to_vec::<f32>()?)
}

/// The largest absolute difference, the largest float magnitude, and the fraction of rows
/// whose argmax agrees.
fn compare(actual: &Tensor, expected: &Tensor) -> Result<(f32, f32, f32)> {
    let (a, e) = (values(actual)?, values(expected)?);
    let classes = expected.shape().last().copied().unwrap_or(1).max(1);
    let max_err = a
        .iter()
        .zip(&e)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max);
    let magnitude = e.iter().fold(0f32, |m, v| m.max(v.abs()));
    let argmax = |row: &[f32]| (0..row.len()).max_by(|&i, &j| row[i].total_cmp(&row[j]));
    let rows = e.len() / classes;
    let agree = (0..rows)
        .filter(|&r| argmax(&a[r * classes..][..classes]) == argmax(&e[r * classes..][..classes]))
        .count();
    Ok((max_err, magnitude, agree as f32 / rows.max(1) as f32))
}

struct Report {
    json: bool,
    threads: usize,
}

impl Report {
    fn time(&self, name: &str, median: f64, min: f64, baseline: Option<f64>) {
        let ratio = baseline.map(|b| b / median);
        if self.json {
            println!(
                "{}",
                serde_json::json!({"name": name, "median_ms": median, "min_ms": min, "threads": self.threads, "speedup_vs_float": ratio})
            );
        } else {
            let ratio = ratio.map_or(String::new(), |r| format!("{r:.2}x"));
            println!(
                "{name:<34} {median:>10.3} {min:>10.3} {:>8} {ratio:>10}",
                self.threads
            );
        }
    }

    fn accuracy(&self, name: &str, (max_err, magnitude, agreement): (f32, f32, f32), rows: usize) {
        if self.json {
            println!(
                "{}",
                serde_json::json!({"name": name, "max_abs_error": max_err, "max_abs_float": magnitude, "top1_agreement": agreement, "rows": rows})
            );
        } else {
            println!(
                "{name:<34} max abs error {max_err:.5} (float outputs up to {magnitude:.3}), top-1 agreement {:.2}% of {rows}",
                agreement * 100.0
            );
        }
    }
}

/// The conformance CNN's PyTorch weights when the shared conformance data is there, else
/// PyTorch's default initialisation.
fn small_cnn() -> Result<Arc<SmallCnn>> {
    let model = Arc::new(SmallCnn::new()?);
    let path = std::path::Path::new("../shared/conformance/d_cnn_eval/state_dict.pt");
    if path.exists() {
        model.load_state_dict(&load_pt_state_dict(path)?, true, false)?;
    } else {
        eprintln!(
            "bench_quant: {} not found, using random weights",
            path.display()
        );
    }
    model.eval();
    Ok(model)
}

fn main() -> std::process::ExitCode {
    tessera::exit_code("bench_quant", run(&Args::parse()))
}

fn run(args: &Args) -> Result<()> {
    tessera::tensor::set_num_threads(args.threads)?;
    let report = Report {
        json: args.json,
        threads: args.threads,
    };
    if !args.json {
        println!(
            "{:<34} {:>10} {:>10} {:>8} {:>10}",
            "workload", "median ms", "min ms", "threads", "vs float"
        );
    }
    let _guard = no_grad();
    let g = &mut Generator::new(0);

    let wanted = |section: &str| args.only.is_empty() || args.only.iter().any(|o| o == section);
    if wanted("linear") {
        linear(args, &report, g)?;
    }
    if wanted("gemm") {
        gemm(args, &report, g)?;
    }
    if wanted("cnn") {
        cnn(args, &report, g)?;
    }
    if wanted("shapes") {
        shapes_cnn(args, &report, g)?;
    }
    if wanted("resnet") {
        for batch in [1, 8] {
            resnet18(args, &report, g, batch)?;
        }
    }
    Ok(())
}

/// Linear 1024 -> 1024 at batch 256: float vs dynamic int8 (per channel and per tensor).
fn linear(args: &Args, report: &Report, g: &mut Generator) -> Result<()> {
    let model = Arc::new(Sequential::new().add(Linear::new(1024, 1024)?));
    let x = Tensor::randn_with(&[256, 1024], DType::F32, g)?;
    let float = time(args.reps, || Ok(model.call(x.clone()).map(drop)?))?;
    report.time("linear_1024_b256_f32", float.0, float.1, None);
    for per_channel in [true, false] {
        let mut gm = GraphModule::new(
            model.clone(),
            trace(&*model, x.meta(), LeafPolicy::default())?,
        );
        QuantizeDynamic::new(per_channel).run(&mut gm)?;
        let t = time(args.reps, || Ok(gm.call(x.clone()).map(drop)?))?;
        let name = if per_channel {
            "linear_1024_b256_dynamic_int8_pc"
        } else {
            "linear_1024_b256_dynamic_int8_pt"
        };
        report.time(name, t.0, t.1, Some(float.0));
        let accuracy = compare(&gm.call(x.clone())?, &model.call(x.clone())?)?;
        report.accuracy(&format!("{name}_accuracy"), accuracy, 256);
    }

    Ok(())
}

/// The raw GEMMs at 256 x 1024 x 1024 (the Linear's shape): f32 matmul vs each int8 kernel.
fn gemm(args: &Args, report: &Report, g: &mut Generator) -> Result<()> {
    let (m, n, k) = (256, 1024, 1024);
    let x = Tensor::randn_with(&[m, k], DType::F32, g)?;
    let w = Tensor::randn_with(&[k, n], DType::F32, g)?;
    let f32_gemm = time(args.reps, || Ok(x.matmul(&w).map(drop)?))?;
    report.time("gemm_256x1024x1024_f32", f32_gemm.0, f32_gemm.1, None);
    let a: Vec<u8> = (0..m * k).map(|i| (i * 7 % 251) as u8).collect();
    let b: Vec<i8> = (0..n * k).map(|i| (i * 13 % 255) as u8 as i8).collect();
    let mut c = vec![0i32; m * n];
    for kernel in Int8Kernel::available() {
        let reps = if kernel == Int8Kernel::Scalar {
            3
        } else {
            args.reps
        };
        let t = time(reps, || {
            Ok(gemm_u8i8_with(kernel, &a, &b, &mut c, (m, n, k), true)?)
        })?;
        let name = format!("gemm_256x1024x1024_int8_{kernel:?}");
        report.time(&name, t.0, t.1, Some(f32_gemm.0));
        let gops = 2.0 * (m * n * k) as f64 / (t.0 * 1e6);
        if !report.json {
            println!("{:<34} {gops:.0} GOP/s", "");
        }
    }
    Ok(())
}

/// SmallCnn at batch 64 on 3x32x32: the folded float graph vs the static int8 graph.
fn cnn(args: &Args, report: &Report, g: &mut Generator) -> Result<()> {
    let cnn = small_cnn()?;
    let images = Tensor::randn_with(&[64, 3, 32, 32], DType::F32, g)?;
    let eager = time(args.reps, || Ok(cnn.call(images.clone()).map(drop)?))?;
    report.time("small_cnn_b64_f32_eager", eager.0, eager.1, None);
    let mut gm = GraphModule::new(
        cnn.clone(),
        trace(&*cnn, images.meta(), LeafPolicy::default())?,
    );
    FoldBatchNorm.run(&mut gm)?;
    let folded = time(args.reps, || Ok(gm.call(images.clone()).map(drop)?))?;
    report.time("small_cnn_b64_f32_folded_graph", folded.0, folded.1, None);
    InsertObservers.run(&mut gm)?;
    let batches: Vec<Vec<Tensor>> = (0..16)
        .map(|_| Tensor::randn_with(&[64, 3, 32, 32], DType::F32, g).map(|t| vec![t]))
        .collect::<std::result::Result<_, _>>()?;
    calibrate(&gm, &batches)?;
    ConvertStatic { per_channel: true }.run(&mut gm)?;
    let quantized = time(args.reps, || Ok(gm.call(images.clone()).map(drop)?))?;
    report.time(
        "small_cnn_b64_static_int8_graph",
        quantized.0,
        quantized.1,
        Some(folded.0),
    );
    // Accuracy on 1024 fresh images (16 batches not used for calibration).
    let (mut worst, mut magnitude, mut agree) = (0f32, 0f32, 0f32);
    for _ in 0..16 {
        let x = Tensor::randn_with(&[64, 3, 32, 32], DType::F32, g)?;
        let (e, mag, a) = compare(&gm.call(x.clone())?, &cnn.call(x)?)?;
        (worst, magnitude, agree) = (worst.max(e), magnitude.max(mag), agree + a / 16.0);
    }
    report.accuracy(
        "small_cnn_static_int8_accuracy",
        (worst, magnitude, agree),
        1024,
    );
    Ok(())
}

/// ResNet-18 (PyTorch's default initialisation, eval mode) on 224x224 images at `batch`:
/// eager float and the folded float graph vs the static int8 graph (per-channel weights,
/// calibrated on 4 random batches; residual adds run as int8 adds).
fn resnet18(args: &Args, report: &Report, g: &mut Generator, batch: usize) -> Result<()> {
    let resnet = Arc::new(ResNet18::new(1000)?);
    resnet.eval();
    let images = Tensor::randn_with(&[batch, 3, 224, 224], DType::F32, g)?;
    let eager = time(args.reps, || Ok(resnet.call(images.clone()).map(drop)?))?;
    report.time(
        &format!("resnet18_b{batch}_f32_eager"),
        eager.0,
        eager.1,
        None,
    );
    let mut gm = GraphModule::new(
        resnet.clone(),
        trace(&*resnet, images.meta(), LeafPolicy::default())?,
    );
    FoldBatchNorm.run(&mut gm)?;
    let folded = time(args.reps, || Ok(gm.call(images.clone()).map(drop)?))?;
    report.time(
        &format!("resnet18_b{batch}_f32_folded_graph"),
        folded.0,
        folded.1,
        None,
    );
    InsertObservers.run(&mut gm)?;
    let batches: Vec<Vec<Tensor>> = (0..4)
        .map(|_| Tensor::randn_with(&[batch, 3, 224, 224], DType::F32, g).map(|t| vec![t]))
        .collect::<std::result::Result<_, _>>()?;
    calibrate(&gm, &batches)?;
    ConvertStatic { per_channel: true }.run(&mut gm)?;
    let quantized = time(args.reps, || Ok(gm.call(images.clone()).map(drop)?))?;
    report.time(
        &format!("resnet18_b{batch}_static_int8_graph"),
        quantized.0,
        quantized.1,
        Some(folded.0),
    );
    let x = Tensor::randn_with(&[batch, 3, 224, 224], DType::F32, g)?;
    let accuracy = compare(&gm.call(x.clone())?, &resnet.call(x)?)?;
    report.accuracy(
        &format!("resnet18_b{batch}_static_int8_accuracy"),
        accuracy,
        batch,
    );
    Ok(())
}

/// The shapes CNN trained in float on the generated shapes (4 epochs, 1500 images), then
/// quantized statically (batch norm folded, 2 calibration batches of 32 training images):
/// float vs int8 time at batch 64, and on 600 held-out images the accuracy of both, their
/// top-1 agreement and the largest logit difference.
fn shapes_cnn(args: &Args, report: &Report, g: &mut Generator) -> Result<()> {
    use tessera::datasets::{accuracy, shapes};
    use tessera::fit::{FitOptions, fit_classifier};
    let train = shapes(1500, g)?;
    let (test, labels) = shapes(600, g)?;
    let model = Arc::new(shapes_net::ShapesNet::new()?);
    // `run` holds a no-grad guard for the timings; training records gradients.
    tessera::tensor::set_grad_enabled(true);
    let options = FitOptions {
        epochs: 4,
        ..Default::default()
    };
    let trained = fit_classifier(&*model, &train, options, g);
    tessera::tensor::set_grad_enabled(false);
    trained?;
    model.eval();
    let mut gm = GraphModule::new(
        model.clone(),
        trace(&*model, test.meta(), LeafPolicy::default())?,
    );
    FoldBatchNorm.run(&mut gm)?;
    let batch = test.narrow(0, 0, 64)?;
    let float = time(args.reps, || Ok(gm.call(batch.clone()).map(drop)?))?;
    report.time("shapes_cnn_b64_f32_folded_graph", float.0, float.1, None);
    let float_logits = gm.call(test.clone())?;
    InsertObservers.run(&mut gm)?;
    let calibration: Vec<Vec<Tensor>> = (0..2)
        .map(|b| Ok(vec![train.0.narrow(0, 32 * b, 32)?]))
        .collect::<Result<_>>()?;
    calibrate(&gm, &calibration)?;
    ConvertStatic { per_channel: true }.run(&mut gm)?;
    let int8 = time(args.reps, || Ok(gm.call(batch.clone()).map(drop)?))?;
    report.time(
        "shapes_cnn_b64_static_int8_graph",
        int8.0,
        int8.1,
        Some(float.0),
    );
    let int8_logits = gm.call(test.clone())?;
    report.accuracy(
        "shapes_cnn_static_int8_agreement",
        compare(&int8_logits, &float_logits)?,
        600,
    );
    let (float_accuracy, int8_accuracy) = (
        accuracy(&float_logits, &labels)?,
        accuracy(&int8_logits, &labels)?,
    );
    if report.json {
        println!(
            "{}",
            serde_json::json!({"name": "shapes_cnn_accuracy", "float": float_accuracy, "int8": int8_accuracy, "rows": 600})
        );
    } else {
        println!(
            "{:<34} float {:.2}%, static int8 {:.2}% of 600 held-out images",
            "shapes_cnn_accuracy",
            100.0 * float_accuracy,
            100.0 * int8_accuracy
        );
    }
    Ok(())
}
