//! The GPU rows of `examples/bench.rs` (`--only cuda`), against `scripts/bench_pytorch_cuda.py`:
//! device-to-device copy bandwidth (`copy_d2d_64m_cuda`, the reference the elementwise row is
//! held to in the same run), a fused chain of 4 elementwise ops on 64M f32 compiled for the GPU
//! (`elementwise_64m_cuda_compiled`, its bandwidth and fraction of the copy's), ResNet-18
//! inference at batch 64 eager and compiled, and launch overhead per kernel (a compiled small
//! CNN at batch 1, kernels so small that launching dominates) with and without CUDA graphs.
//! Every row synchronizes the device before its clock stops. Without an NVIDIA driver and GPU
//! each row is `DeviceUnavailable` (a typed error, never a panic); the caller reports it.

use crate::support::time;
use std::sync::Arc;
use tessera::cuda::CudaBackend;
use tessera::fx::GraphModule;
use tessera::fx::trace::{LeafPolicy, trace};
use tessera::nn::models::{ResNet18, SmallCnn};
use tessera::nn::{Call, Forward, Layer, Module, ModuleCore, ModuleExt};
use tessera::tensor::Device;
use tessera::{CompileOptions, CompiledModule, DType, Generator, Result, Tensor, TensorError};
use tessera::{compile, no_grad};

/// Elements of the copy and elementwise rows (64M f32, 256 MiB per array).
pub const ELEMENTS: usize = 64 << 20;

/// Bytes one copy or one fused elementwise pass moves (read once, written once).
pub const BYTES_MOVED: f64 = 2.0 * (ELEMENTS * 4) as f64;

/// The rows, in the order they run.
pub const ROWS: [&str; 6] = [
    "copy_d2d_64m_cuda",
    "elementwise_64m_cuda_compiled",
    "resnet18_infer_b64_cuda",
    "resnet18_infer_b64_cuda_compiled",
    "launch_overhead_cuda_graphs",
    "launch_overhead_cuda_no_graphs",
];

/// One measured row.
#[derive(Debug, Clone)]
pub struct CudaRow {
    pub median_ms: f64,
    pub min_ms: f64,
    /// Bandwidth, for the copy and elementwise rows.
    pub gbs: Option<f64>,
    /// Microseconds per kernel, for the launch-overhead rows.
    pub us_per_kernel: Option<f64>,
}

/// `relu(x * 1.5 + 0.25) * 0.5`: 4 elementwise ops, fused into one kernel when compiled.
#[derive(Module)]
struct Chain4 {
    core: ModuleCore,
}

impl Forward for Chain4 {
    type Output = Tensor;
    fn forward(&self, x: Tensor) -> tessera::nn::Result<Tensor> {
        Ok(x.mul_scalar(1.5)?
            .add_scalar(0.25)?
            .relu()?
            .mul_scalar(0.5)?)
    }
}

fn nn_err(e: tessera::nn::NnError) -> TensorError {
    TensorError::Autograd(e.to_string())
}

/// The CUDA backend on device 0, or `DeviceUnavailable` saying why not.
pub fn cuda_backend() -> Result<Arc<CudaBackend>> {
    tessera::cuda::init().map_err(|e| TensorError::DeviceUnavailable {
        device: Device::Cuda(0),
        reason: e.to_string(),
    })
}

/// `model` traced and compiled for `x` (a CUDA tensor) on its device.
fn compiled<M: Layer + 'static>(model: M, x: &Tensor, cuda_graphs: bool) -> Result<CompiledModule> {
    let model = Arc::new(model);
    model.eval();
    let traced = trace(&*model, x.meta(), LeafPolicy::default())
        .map_err(|e| TensorError::Autograd(format!("trace: {e}")))?;
    let gm = GraphModule::new(model, traced);
    let options = CompileOptions {
        device: x.device(),
        cuda_graphs,
        ..CompileOptions::default()
    };
    compile(&gm, std::slice::from_ref(x), options)
        .map_err(|e| TensorError::Autograd(format!("compile: {e}")))
}

/// Times `f` (`reps` runs after warm-ups), the device synchronized after each run.
fn timed(
    backend: &CudaBackend,
    reps: usize,
    mut f: impl FnMut() -> Result<()>,
) -> Result<(f64, f64)> {
    time(reps, || {
        f()?;
        backend
            .synchronize(0)
            .map_err(|e| TensorError::Autograd(format!("synchronize: {e}")))
    })
}

/// Measures row `name` (one of [`ROWS`]) with `reps` timed runs.
pub fn measure(name: &'static str, reps: usize) -> Result<CudaRow> {
    let backend = cuda_backend()?;
    let cuda = Device::Cuda(0);
    let g = &mut Generator::new(0);
    let _guard = no_grad();
    let row = |(median_ms, min_ms): (f64, f64)| CudaRow {
        median_ms,
        min_ms,
        gbs: None,
        us_per_kernel: None,
    };
    let bandwidth = |mut r: CudaRow| {
        r.gbs = Some(BYTES_MOVED / (r.median_ms * 1e-3) / 1e9);
        r
    };
    match name {
        "copy_d2d_64m_cuda" => {
            let x = Tensor::rand_with(&[ELEMENTS], DType::F32, g)?.to_device(cuda)?;
            let t = timed(&backend, reps, || x.deep_clone().map(drop))?;
            Ok(bandwidth(row(t)))
        }
        "elementwise_64m_cuda_compiled" => {
            let x = Tensor::rand_with(&[ELEMENTS], DType::F32, g)?.to_device(cuda)?;
            let chain = Chain4 {
                core: ModuleCore::default(),
            };
            let c = compiled(chain, &x, true)?;
            let t = timed(&backend, reps, || {
                c.call(x.clone()).map(drop).map_err(nn_err)
            })?;
            Ok(bandwidth(row(t)))
        }
        "resnet18_infer_b64_cuda" => {
            let model = ResNet18::new(1000).map_err(nn_err)?;
            model.eval();
            model.to_device(cuda).map_err(nn_err)?;
            let x = Tensor::randn_with(&[64, 3, 224, 224], DType::F32, g)?.to_device(cuda)?;
            let t = timed(&backend, reps, || {
                model.call(x.clone()).map(drop).map_err(nn_err)
            })?;
            Ok(row(t))
        }
        "resnet18_infer_b64_cuda_compiled" => {
            let model = ResNet18::new(1000).map_err(nn_err)?;
            model.to_device(cuda).map_err(nn_err)?;
            let x = Tensor::randn_with(&[64, 3, 224, 224], DType::F32, g)?.to_device(cuda)?;
            let c = compiled(model, &x, true)?;
            let t = timed(&backend, reps, || {
                c.call(x.clone()).map(drop).map_err(nn_err)
            })?;
            Ok(row(t))
        }
        "launch_overhead_cuda_graphs" | "launch_overhead_cuda_no_graphs" => {
            let model = SmallCnn::new().map_err(nn_err)?;
            model.to_device(cuda).map_err(nn_err)?;
            let x = Tensor::randn_with(&[1, 3, 32, 32], DType::F32, g)?.to_device(cuda)?;
            let graphs = name == "launch_overhead_cuda_graphs";
            let c = compiled(model, &x, graphs)?;
            let t = timed(&backend, reps, || {
                c.call(x.clone()).map(drop).map_err(nn_err)
            })?;
            let kernels = c.report().device_kernels.max(1);
            let mut r = row(t);
            r.us_per_kernel = Some(r.median_ms * 1e3 / kernels as f64);
            Ok(r)
        }
        other => Err(TensorError::InvalidArgument {
            op: "bench".into(),
            msg: format!("no GPU row {other}; the rows are {ROWS:?}"),
        }),
    }
}
