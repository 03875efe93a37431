//! The compiled workloads of `examples/bench.rs`: the eager workloads' models compiled with
//! `tessera::compile` (`<workload>_compiled`), a transformer encoder block eager and compiled,
//! cold compile times (`compile_<model>_ms`: trace and compile from nothing, in process) and
//! the memory bandwidth the elementwise figures are measured against.

use crate::{Workload, fx_err, nn_err};
use rayon::prelude::*;
use std::sync::Arc;
use tessera::fx::GraphModule;
use tessera::fx::trace::{LeafPolicy, trace};
use tessera::nn::layers::{
    Conv2d, Conv2dOptions, Linear, MaxPool2d, MaxPool2dOptions, ReLU, TransformerEncoderLayer,
    TransformerOptions,
};
use tessera::nn::models::{ResNet18, SmallCnn};
use tessera::nn::{Call, Forward, Layer, Module, ModuleCore, ModuleExt, ModuleKind, Sequential};
use tessera::{CompileOptions, CompiledModule, DType, Result, Tensor, compile, no_grad};

/// `relu(x * 1.5 + 0.25) * 0.5 - 1`, the elementwise workload as a module.
#[derive(Module)]
struct ElementwiseChain {
    core: ModuleCore,
}

impl Forward for ElementwiseChain {
    type Output = Tensor;
    fn forward(&self, x: Tensor) -> tessera::nn::Result<Tensor> {
        Ok(x.mul_scalar(1.5)?
            .add_scalar(0.25)?
            .relu()?
            .mul_scalar(0.5)?
            .add_scalar(-1.0)?)
    }
}

/// The baseline's MLP, 784-256-128-10 with ReLU.
pub(crate) fn mlp() -> Result<Sequential> {
    Ok(Sequential::new()
        .add(Linear::new(784, 256).map_err(nn_err)?)
        .add(ReLU::new())
        .add(Linear::new(256, 128).map_err(nn_err)?)
        .add(ReLU::new())
        .add(Linear::new(128, 10).map_err(nn_err)?))
}

/// The transformer block of the issue: width 256, 4 heads, feed-forward 1024, batch first,
/// no dropout (PyTorch: `nn.TransformerEncoderLayer(256, 4, 1024, 0.0, batch_first=True)`).
fn transformer_block() -> Result<TransformerEncoderLayer> {
    let options = TransformerOptions::default()
        .dim_feedforward(1024)
        .dropout(0.0)
        .batch_first(true);
    TransformerEncoderLayer::with_options(256, 4, options).map_err(nn_err)
}

/// Traces `model` (attention and transformer layers traced through, so the compiler sees
/// their ops) and compiles it for `x`.
fn compiled<M: Layer + 'static>(model: M, x: &Tensor) -> Result<CompiledModule> {
    let model = Arc::new(model);
    model.eval();
    let policy = LeafPolicy::default()
        .trace_kind(ModuleKind::MultiheadAttention)
        .trace_kind(ModuleKind::TransformerEncoderLayer);
    let traced = trace(&*model, x.meta(), policy).map_err(fx_err)?;
    let gm = GraphModule::new(model, traced);
    compile(&gm, std::slice::from_ref(x), CompileOptions::default())
        .map_err(|e| tessera::TensorError::Autograd(format!("compile: {e}")))
}

/// A workload calling a compiled `model` on `x`.
fn run_compiled<M: Layer + 'static>(model: M, x: Tensor) -> Result<Box<dyn FnMut() -> Result<()>>> {
    let compiled = compiled(model, &x)?;
    Ok(Box::new(move || {
        let _guard = no_grad();
        compiled.call(x.clone()).map(drop).map_err(nn_err)
    }))
}

/// A workload tracing and compiling a fresh `model()` for `x` on every call.
fn compile_each_time<M: Layer + 'static>(
    model: fn() -> Result<M>,
    x: Tensor,
) -> Result<Box<dyn FnMut() -> Result<()>>> {
    Ok(Box::new(move || compiled(model()?, &x).map(drop)))
}

/// Elements of each array of the bandwidth loop (64 MiB of f32).
pub const TRIAD_ELEMENTS: usize = 16 << 20;

/// STREAM's triad `a = b + s * c` over existing arrays, on the thread pool: 3 x 64 MiB moved.
fn triad() -> Result<Box<dyn FnMut() -> Result<()>>> {
    let mut a = vec![0.0f32; TRIAD_ELEMENTS];
    let b = vec![1.0f32; TRIAD_ELEMENTS];
    let c = vec![2.0f32; TRIAD_ELEMENTS];
    Ok(Box::new(move || {
        a.par_chunks_mut(1 << 16)
            .zip(b.par_chunks(1 << 16).zip(c.par_chunks(1 << 16)))
            .for_each(|(a, (b, c))| {
                for ((a, b), c) in a.iter_mut().zip(b).zip(c) {
                    *a = b + 1.5 * c;
                }
            });
        std::hint::black_box(&a);
        Ok(())
    }))
}

/// Bytes the triad moves per call.
pub const TRIAD_BYTES: f64 = 3.0 * (TRIAD_ELEMENTS * 4) as f64;

pub const WORKLOADS: [Workload; 17] = [
    ("mlp_infer_b256_compiled", |g| {
        run_compiled(mlp()?, Tensor::randn_with(&[256, 784], DType::F32, g)?)
    }),
    ("cnn_infer_b64_compiled", |g| {
        run_compiled(
            SmallCnn::new().map_err(nn_err)?,
            Tensor::randn_with(&[64, 3, 32, 32], DType::F32, g)?,
        )
    }),
    ("resnet18_infer_b1_compiled", |g| {
        run_compiled(
            ResNet18::new(1000).map_err(nn_err)?,
            Tensor::randn_with(&[1, 3, 224, 224], DType::F32, g)?,
        )
    }),
    ("winograd_conv_b1_64x56_compiled", |g| {
        // ResNet-18's first stage convolution (64 channels, 56x56, 3x3, padding 1) and its
        // ReLU: the cost rule picks Winograd F(4x4,3x3).
        let conv =
            Conv2d::with_options(64, 64, 3, Conv2dOptions::default().padding(1)).map_err(nn_err)?;
        run_compiled(
            Sequential::new().add(conv).add(ReLU::new()),
            Tensor::randn_with(&[1, 64, 56, 56], DType::F32, g)?,
        )
    }),
    ("elementwise_16m_compiled", |g| {
        run_compiled(
            ElementwiseChain {
                core: ModuleCore::default(),
            },
            Tensor::rand_with(&[16 << 20], DType::F32, g)?,
        )
    }),
    ("transformer_block_b8", |g| {
        let block = transformer_block()?;
        block.eval();
        let x = Tensor::randn_with(&[8, 128, 256], DType::F32, g)?;
        Ok(Box::new(move || {
            let _guard = no_grad();
            block.call(x.clone()).map(drop).map_err(nn_err)
        }))
    }),
    ("transformer_block_b8_compiled", |g| {
        run_compiled(
            transformer_block()?,
            Tensor::randn_with(&[8, 128, 256], DType::F32, g)?,
        )
    }),
    ("compile_small_cnn_ms", |g| {
        compile_each_time(
            || SmallCnn::new().map_err(nn_err),
            Tensor::randn_with(&[64, 3, 32, 32], DType::F32, g)?,
        )
    }),
    ("compile_resnet18_ms", |g| {
        compile_each_time(
            || ResNet18::new(1000).map_err(nn_err),
            Tensor::randn_with(&[1, 3, 224, 224], DType::F32, g)?,
        )
    }),
    ("compile_transformer_block_ms", |g| {
        compile_each_time(
            transformer_block,
            Tensor::randn_with(&[8, 128, 256], DType::F32, g)?,
        )
    }),
    ("memory_bandwidth_gbs", |_| triad()),
    ("resnet18_stem_conv_b1_compiled", |g| {
        // ResNet-18's first convolution (3 to 64 channels, 7x7, stride 2, padding 3, 224x224)
        // and its ReLU: the direct convolution, 118 M multiply-adds.
        let options = Conv2dOptions::default().stride(2).padding(3).bias(false);
        let conv = Conv2d::with_options(3, 64, 7, options).map_err(nn_err)?;
        run_compiled(
            Sequential::new().add(conv).add(ReLU::new()),
            Tensor::randn_with(&[1, 3, 224, 224], DType::F32, g)?,
        )
    }),
    ("resnet18_stem_pool_b1_compiled", |g| {
        // ResNet-18's stem max pooling alone (3x3, stride 2, padding 1 on its 112x112 planes):
        // one kernel of guarded loads, mostly inside the input.
        let pool = MaxPool2d::with_options(3, MaxPool2dOptions::default().stride(2).padding(1));
        run_compiled(pool, Tensor::randn_with(&[1, 64, 112, 112], DType::F32, g)?)
    }),
    ("winograd_conv_b1_128x28_compiled", |g| {
        // ResNet-18's second stage convolution (128 channels, 28x28, 3x3, padding 1) and its
        // ReLU: rows of seven F(4x4,3x3) tiles, fewer than one transform step of eight.
        let conv = Conv2d::with_options(128, 128, 3, Conv2dOptions::default().padding(1))
            .map_err(nn_err)?;
        run_compiled(
            Sequential::new().add(conv).add(ReLU::new()),
            Tensor::randn_with(&[1, 128, 28, 28], DType::F32, g)?,
        )
    }),
    ("winograd_conv_b1_256x14_compiled", |g| {
        // ResNet-18's third stage convolution (256 channels, 14x14, 3x3, padding 1) and its
        // ReLU: 16 F(4x4,3x3) tiles, products computed along the output channels, its 9.4 MB
        // of transformed weights streamed from memory when the other layers' have evicted
        // them.
        let conv = Conv2d::with_options(256, 256, 3, Conv2dOptions::default().padding(1))
            .map_err(nn_err)?;
        run_compiled(
            Sequential::new().add(conv).add(ReLU::new()),
            Tensor::randn_with(&[1, 256, 14, 14], DType::F32, g)?,
        )
    }),
    ("strided_conv_b1_64x56_compiled", |g| {
        // ResNet-18's first stride-2 convolution (64 to 128 channels, 3x3, padding 1, 56x56)
        // and its ReLU: im2col of the one image on the threads, then the GEMM.
        let options = Conv2dOptions::default().stride(2).padding(1);
        let conv = Conv2d::with_options(64, 128, 3, options).map_err(nn_err)?;
        run_compiled(
            Sequential::new().add(conv).add(ReLU::new()),
            Tensor::randn_with(&[1, 64, 56, 56], DType::F32, g)?,
        )
    }),
    ("downsample_conv_b1_64x56_compiled", |g| {
        // ResNet-18's first downsampling convolution (64 to 128 channels, 1x1, stride 2, 56x56):
        // a GEMM on every second pixel, an eager call in the program (nothing to fuse).
        let options = Conv2dOptions::default().stride(2).bias(false);
        let conv = Conv2d::with_options(64, 128, 1, options).map_err(nn_err)?;
        run_compiled(conv, Tensor::randn_with(&[1, 64, 56, 56], DType::F32, g)?)
    }),
];
