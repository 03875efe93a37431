//! Tessera: PyTorch-style tensors, autograd and (as the project grows) modules, graph
//! capture, rewrite passes and compilers, for Rust. This crate re-exports the others.
//!
//! A crate that depends on `tessera` alone has everything: `tessera::nn::Module` is both the
//! trait and its `#[derive(Module)]` (as `serde::Serialize` is), and the derive finds the
//! module machinery through this facade. The README's examples are compiled and run as
//! doctests of such a crate (`tests/facade_user`).

mod compile;
mod compile_train;
pub mod datasets;
mod exit;
pub mod fit;
pub mod profiler;

pub use exit::{error_report, exit_code};

pub use compile::{
    Backend, BatchMode, CompileError, CompileOptions, CompileReport, CompiledModule,
    DUMP_KERNELS_ENV, compile, compile_layer,
};
pub use compile_train::{
    CompiledTrainStep, LossFn, TrainStepOptions, TrainStepReport, compile_train_step,
};
pub use tessera_cpu as cpu;
pub use tessera_cuda as cuda;
pub use tessera_distributed as distributed;
pub use tessera_kernel as kernel;
pub use tessera_kernel::{ConvAlgorithm, ConvChoice, WinogradPolicy};
pub use tessera_tensor::op::WinogradTile;

pub use tessera_fx as fx;
pub use tessera_nn as nn;
pub use tessera_passes as passes;
pub use tessera_tensor as tensor;
pub use tessera_tensor::functional;
pub use tessera_tensor::{
    DType, Device, Generator, GradcheckOptions, Result, Tensor, TensorError, gradcheck,
    manual_seed, no_grad,
};
