//! Benchmarks of the eager CPU path on the workloads of `../shared/reference/BASELINE.md`,
//! and of the same models compiled (`bench_compiled`) and trained as compiled steps
//! (`bench_train`); `--json` prints one object per line:
//! `{"name", "median_ms", "min_ms", "threads"}` (and `"gbs"` for `memory_bandwidth_gbs`,
//! `"gflops"` for `fma_peak_gflops`).
//! The GPU rows (`bench_cuda`, names ending in `_cuda...`) add `"gbs"`, `"fraction_of_copy"`
//! or `"us_per_kernel"`; without a GPU each is `{"name", "unavailable": reason}`.

mod bench_compiled;
mod bench_cuda;
mod bench_train;
mod fma_peak;
#[path = "shapes_net.rs"]
mod shapes_net;
mod support;

use clap::Parser;
use support::time;
use tessera::functional as F;
use tessera::fx::trace::{LeafPolicy, trace};
use tessera::nn::layers::{CrossEntropyLoss, Linear, ReLU};
use tessera::nn::models::{ResNet18, SmallCnn as SmallCnnModule};
use tessera::nn::optim::{Optimizer, SGD, SgdOptions};
use tessera::nn::{Call, ModuleExt, Sequential};
use tessera::{DType, Generator, Result, Tensor, no_grad};

#[derive(Parser)]
#[command(about = "Time Tessera's eager CPU kernels on the baseline workloads")]
struct Args {
    /// Print one JSON object per workload instead of a table.
    #[arg(long)]
    json: bool,
    /// Threads for the kernels (the baseline figures use 2).
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// Timed repetitions per workload (after 3 warm-up runs).
    #[arg(long, default_value_t = 15)]
    reps: usize,
    /// Run only the workloads whose names contain one of these comma-separated texts, in
    /// the order given.
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
}

/// A `Linear` layer's parameters with PyTorch's default uniform(-1/sqrt(in), 1/sqrt(in)) init.
fn linear_params(inputs: usize, outputs: usize, g: &mut Generator) -> Result<(Tensor, Tensor)> {
    let bound = 1.0 / (inputs as f64).sqrt();
    let init = |shape: &[usize], g: &mut Generator| -> Result<Tensor> {
        Tensor::rand_with(shape, DType::F32, g)?
            .mul_scalar(2.0 * bound)?
            .add_scalar(-bound)?
            .requires_grad_(true)
    };
    Ok((init(&[outputs, inputs], g)?, init(&[outputs], g)?))
}

struct Mlp {
    layers: Vec<(Tensor, Tensor)>,
}

impl Mlp {
    fn new(g: &mut Generator) -> Result<Mlp> {
        Ok(Mlp {
            layers: vec![
                linear_params(784, 256, g)?,
                linear_params(256, 128, g)?,
                linear_params(128, 10, g)?,
            ],
        })
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let mut h = x.clone();
        for (i, (w, b)) in self.layers.iter().enumerate() {
            h = h.linear(w, Some(b))?;
            if i + 1 < self.layers.len() {
                h = h.relu()?;
            }
        }
        Ok(h)
    }

    fn parameters(&self) -> Vec<Tensor> {
        self.layers
            .iter()
            .flat_map(|(w, b)| [w.clone(), b.clone()])
            .collect()
    }
}

/// SGD with momentum 0.9, as `torch.optim.SGD(lr=0.01, momentum=0.9)`.
fn sgd_step(params: &[Tensor], buffers: &mut [Option<Tensor>]) -> Result<()> {
    let _guard = no_grad();
    for (p, buf) in params.iter().zip(buffers.iter_mut()) {
        let Some(g) = p.grad() else { continue };
        let update = match buf.take() {
            Some(b) => {
                b.mul_scalar_(0.9)?.add_(&g)?;
                b
            }
            None => g.deep_clone()?,
        };
        p.sub_(&update.mul_scalar(0.01)?)?;
        *buf = Some(update);
    }
    Ok(())
}

/// The small CNN of `d_cnn_eval` in eval mode (batch norm folded into nothing: running stats).
struct SmallCnn {
    conv1: (Tensor, Tensor),
    bn1: [Tensor; 4],
    conv2: (Tensor, Tensor),
    bn2: [Tensor; 4],
    fc: (Tensor, Tensor),
}

impl SmallCnn {
    fn new(g: &mut Generator) -> Result<SmallCnn> {
        let conv = |o: usize, i: usize, g: &mut Generator| -> Result<(Tensor, Tensor)> {
            Ok((
                Tensor::randn_with(&[o, i, 3, 3], DType::F32, g)?.mul_scalar(0.2)?,
                Tensor::randn_with(&[o], DType::F32, g)?.mul_scalar(0.1)?,
            ))
        };
        let bn = |c: usize, g: &mut Generator| -> Result<[Tensor; 4]> {
            Ok([
                Tensor::rand_with(&[c], DType::F32, g)?.add_scalar(0.5)?,
                Tensor::randn_with(&[c], DType::F32, g)?.mul_scalar(0.1)?,
                Tensor::randn_with(&[c], DType::F32, g)?.mul_scalar(0.1)?,
                Tensor::rand_with(&[c], DType::F32, g)?.add_scalar(0.5)?,
            ])
        };
        Ok(SmallCnn {
            conv1: conv(16, 3, g)?,
            bn1: bn(16, g)?,
            conv2: conv(32, 16, g)?,
            bn2: bn(32, g)?,
            fc: linear_params(32, 10, g)?,
        })
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let bn = |x: &Tensor, p: &[Tensor; 4]| {
            F::batch_norm(
                x,
                Some(&p[2]),
                Some(&p[3]),
                Some(&p[0]),
                Some(&p[1]),
                false,
                0.1,
                1e-5,
            )
        };
        let h = F::conv2d(
            x,
            &self.conv1.0,
            Some(&self.conv1.1),
            [1, 1],
            [1, 1],
            [1, 1],
            1,
        )?;
        let h = bn(&h, &self.bn1)?.relu()?;
        let h = F::max_pool2d(&h, [2, 2], [2, 2], [0, 0], [1, 1], false)?;
        let h = F::conv2d(
            &h,
            &self.conv2.0,
            Some(&self.conv2.1),
            [2, 2],
            [1, 1],
            [1, 1],
            1,
        )?;
        let h = bn(&h, &self.bn2)?.relu()?;
        let h = F::adaptive_avg_pool2d(&h, [1, 1])?.flatten(1, -1)?;
        h.linear(&self.fc.0, Some(&self.fc.1))
    }
}

/// Errors of the module workloads, as tensor errors so that all workloads share one type.
fn nn_err(e: tessera::nn::NnError) -> tessera::TensorError {
    match e {
        tessera::nn::NnError::Op(e) | tessera::nn::NnError::Tensor { source: e, .. } => e,
        other => tessera::TensorError::Autograd(other.to_string()),
    }
}

/// Errors of the graph workloads, as tensor errors.
fn fx_err(e: tessera::fx::FxError) -> tessera::TensorError {
    tessera::TensorError::Autograd(e.to_string())
}

fn main() -> std::process::ExitCode {
    tessera::exit_code("bench", run(&Args::parse()))
}

/// ResNet-18 in eval mode, a 224x224 image and the module-level trace of one call.
fn traced_resnet18(
    g: &mut Generator,
) -> Result<(ResNet18, Tensor, tessera::fx::trace::TracedGraph)> {
    let resnet = ResNet18::new(1000).map_err(nn_err)?;
    resnet.eval();
    let image = Tensor::randn_with(&[1, 3, 224, 224], DType::F32, g)?;
    let traced = trace(&resnet, image.meta(), LeafPolicy::default()).map_err(fx_err)?;
    Ok((resnet, image, traced))
}

/// A workload: its name and a setup that returns the closure to time.
type Workload = (
    &'static str,
    fn(&mut Generator) -> Result<Box<dyn FnMut() -> Result<()>>>,
);

const WORKLOADS: [Workload; 14] = [
    ("matmul_1024", |g| {
        let a = Tensor::randn_with(&[1024, 1024], DType::F32, g)?;
        let b = Tensor::randn_with(&[1024, 1024], DType::F32, g)?;
        Ok(Box::new(move || a.matmul(&b).map(drop)))
    }),
    ("mlp_infer_b256", |g| {
        let mlp = Mlp::new(g)?;
        let mlp = Mlp {
            layers: mlp
                .layers
                .iter()
                .map(|(w, b)| (w.detach(), b.detach()))
                .collect(),
        };
        let x = Tensor::randn_with(&[256, 784], DType::F32, g)?;
        Ok(Box::new(move || {
            let _guard = no_grad();
            mlp.forward(&x).map(drop)
        }))
    }),
    ("mlp_train_b256", |g| {
        let mlp = Mlp::new(g)?;
        let x = Tensor::randn_with(&[256, 784], DType::F32, g)?;
        let target = Tensor::randint_with(0, 10, &[256], DType::I64, g)?;
        let params = mlp.parameters();
        let mut buffers: Vec<Option<Tensor>> = vec![None; params.len()];
        Ok(Box::new(move || {
            params.iter().for_each(|p| p.set_grad(None));
            let loss = F::cross_entropy(
                &mlp.forward(&x)?,
                &target,
                F::CrossEntropyOptions::default(),
            )?;
            loss.backward()?;
            sgd_step(&params, &mut buffers)
        }))
    }),
    ("cnn_infer_b64", |g| {
        let cnn = SmallCnn::new(g)?;
        let images = Tensor::randn_with(&[64, 3, 32, 32], DType::F32, g)?;
        Ok(Box::new(move || {
            let _guard = no_grad();
            cnn.forward(&images).map(drop)
        }))
    }),
    ("mlp_train_b256_nn", |g| {
        let mlp = Sequential::new()
            .add(Linear::new(784, 256).map_err(nn_err)?)
            .add(ReLU::new())
            .add(Linear::new(256, 128).map_err(nn_err)?)
            .add(ReLU::new())
            .add(Linear::new(128, 10).map_err(nn_err)?);
        let x = Tensor::randn_with(&[256, 784], DType::F32, g)?;
        let target = Tensor::randint_with(0, 10, &[256], DType::I64, g)?;
        let params = mlp.parameter_tensors();
        let mut opt = SGD::new(
            params,
            SgdOptions {
                lr: 0.01,
                momentum: 0.9,
                ..Default::default()
            },
        )
        .map_err(nn_err)?;
        let loss_fn = CrossEntropyLoss::new();
        Ok(Box::new(move || {
            opt.zero_grad(true);
            let loss = loss_fn
                .call((mlp.call(x.clone()).map_err(nn_err)?, target.clone()))
                .map_err(nn_err)?;
            loss.backward()?;
            opt.step().map_err(nn_err)
        }))
    }),
    ("cnn_infer_b64_nn", |g| {
        let cnn = SmallCnnModule::new().map_err(nn_err)?;
        cnn.eval();
        let images = Tensor::randn_with(&[64, 3, 32, 32], DType::F32, g)?;
        Ok(Box::new(move || {
            let _guard = no_grad();
            cnn.call(images.clone()).map(drop).map_err(nn_err)
        }))
    }),
    ("trace_small_cnn", |_| {
        let cnn = SmallCnnModule::new().map_err(nn_err)?;
        cnn.eval();
        let meta = tessera::tensor::TensorMeta::new([64, 3, 32, 32], DType::F32);
        Ok(Box::new(move || {
            trace(&cnn, meta.clone(), LeafPolicy::default())
                .map(drop)
                .map_err(fx_err)
        }))
    }),
    ("trace_resnet18", |_| {
        let resnet = ResNet18::new(1000).map_err(nn_err)?;
        resnet.eval();
        let meta = tessera::tensor::TensorMeta::new([1, 3, 224, 224], DType::F32);
        Ok(Box::new(move || {
            trace(&resnet, meta.clone(), LeafPolicy::default())
                .map(drop)
                .map_err(fx_err)
        }))
    }),
    ("cnn_infer_b64_interpreted", |g| {
        let cnn = SmallCnnModule::new().map_err(nn_err)?;
        cnn.eval();
        let images = Tensor::randn_with(&[64, 3, 32, 32], DType::F32, g)?;
        let traced = trace(&cnn, images.meta(), LeafPolicy::default()).map_err(fx_err)?;
        Ok(Box::new(move || {
            let _guard = no_grad();
            traced
                .interpret(&cnn, std::slice::from_ref(&images))
                .map(drop)
                .map_err(fx_err)
        }))
    }),
    ("resnet18_infer_b1", |g| {
        let resnet = ResNet18::new(1000).map_err(nn_err)?;
        resnet.eval();
        let image = Tensor::randn_with(&[1, 3, 224, 224], DType::F32, g)?;
        Ok(Box::new(move || {
            let _guard = no_grad();
            resnet.call(image.clone()).map(drop).map_err(nn_err)
        }))
    }),
    ("resnet18_infer_b1_interpreted", |g| {
        let (resnet, image, traced) = traced_resnet18(g)?;
        Ok(Box::new(move || {
            let _guard = no_grad();
            traced
                .interpret(&resnet, std::slice::from_ref(&image))
                .map(drop)
                .map_err(fx_err)
        }))
    }),
    ("resnet18_infer_b1_profiled", |g| {
        let (resnet, image, traced) = traced_resnet18(g)?;
        Ok(Box::new(move || {
            let _guard = no_grad();
            tessera::profiler::Profiler::new()
                .profile_graph(&traced, &resnet, std::slice::from_ref(&image))
                .map(drop)
                .map_err(fx_err)
        }))
    }),
    ("elementwise_16m", |g| {
        let x = Tensor::rand_with(&[16 << 20], DType::F32, g)?;
        Ok(Box::new(move || {
            x.mul_scalar(1.5)?
                .add_scalar(0.25)?
                .relu()?
                .mul_scalar(0.5)?
                .add_scalar(-1.0)
                .map(drop)
        }))
    }),
    ("fma_peak_gflops", |_| fma_peak::fma_peak()),
];

fn run(args: &Args) -> Result<()> {
    tessera::tensor::set_num_threads(args.threads)?;
    if !args.json {
        println!(
            "{:<30} {:>11} {:>11} {:>8}",
            "workload", "median ms", "min ms", "threads"
        );
    }
    let all = || {
        WORKLOADS
            .iter()
            .chain(bench_compiled::WORKLOADS.iter())
            .chain(bench_train::WORKLOADS.iter())
    };
    let selected: Vec<&Workload> = if args.only.is_empty() {
        all().collect()
    } else {
        args.only
            .iter()
            .flat_map(|o| all().filter(move |(name, _)| name.contains(o.as_str())))
            .collect()
    };
    for (name, setup) in selected {
        let mut f = setup(&mut Generator::new(0))?;
        let (median, min) = time(args.reps, &mut f)?;
        let mut row = serde_json::json!({"name": name, "median_ms": median, "min_ms": min, "threads": args.threads});
        let gbs = (*name == "memory_bandwidth_gbs")
            .then(|| bench_compiled::TRIAD_BYTES / (median * 1e-3) / 1e9);
        if let Some(gbs) = gbs {
            row["gbs"] = serde_json::json!(gbs);
        }
        let gflops = (*name == "fma_peak_gflops").then(|| {
            fma_peak::FLOPS_PER_THREAD * rayon::current_num_threads() as f64 / (median * 1e-3) / 1e9
        });
        if let Some(gflops) = gflops {
            row["gflops"] = serde_json::json!(gflops);
        }
        if args.json {
            println!("{row}");
        } else {
            let extra = match (gbs, gflops) {
                (Some(g), _) => format!("  {g:.1} GB/s"),
                (_, Some(f)) => format!("  {f:.0} GFLOP/s"),
                _ => String::new(),
            };
            println!(
                "{name:<30} {median:>11.3} {min:>11.3} {:>8}{extra}",
                args.threads
            );
        }
    }
    run_cuda(args)
}

/// The GPU rows `args` selects (all of them without `--only`), each measured, or reported
/// unavailable (no driver or GPU) without stopping the others.
fn run_cuda(args: &Args) -> Result<()> {
    let selected = bench_cuda::ROWS
        .iter()
        .filter(|name| args.only.is_empty() || args.only.iter().any(|o| name.contains(o.as_str())));
    let mut copy_gbs = None;
    for &name in selected {
        let mut row = serde_json::json!({"name": name});
        match bench_cuda::measure(name, args.reps) {
            Ok(r) => {
                row["median_ms"] = serde_json::json!(r.median_ms);
                row["min_ms"] = serde_json::json!(r.min_ms);
                if let Some(gbs) = r.gbs {
                    row["gbs"] = serde_json::json!(gbs);
                    match copy_gbs {
                        None => copy_gbs = Some(gbs),
                        Some(copy) => row["fraction_of_copy"] = serde_json::json!(gbs / copy),
                    }
                }
                if let Some(us) = r.us_per_kernel {
                    row["us_per_kernel"] = serde_json::json!(us);
                }
            }
            Err(tessera::TensorError::DeviceUnavailable { reason, .. }) => {
                row["unavailable"] = serde_json::json!(reason);
            }
            Err(e) => return Err(e),
        }
        if args.json {
            println!("{row}");
        } else {
            println!("{name:<30} {}", row);
        }
    }
    Ok(())
}
