//! Compiled programs on a CUDA device ([`CudaProgram`]): what `tessera::compile` runs when it
//! compiles for `Device::Cuda(i)`. The program is lowered by the shared lowering as for the
//! CPU (there is no lowering logic here); each fusion group's kernel is rendered to PTX and
//! loaded once (a GEMM or convolution with its fused epilogue as a generated tile kernel), the slots live in one arena allocated once (the memory plan's intermediates,
//! then fixed places for inputs, outputs and the values of host steps), the weights are
//! uploaded once, and each run of consecutive launches is captured into a CUDA graph on the
//! first call and replayed on later ones. Steps the renderer does not generate run on the
//! host ([`HostStep`], each with why). An updating run (a training step's) writes the outputs
//! it safely can straight into the tensors they update ([`CudaProgram::run_updating`]).

mod host;
mod layout;
mod program;
mod region;
mod run;
mod update;

pub use program::{CudaProgram, CudaRunStats, HostStep};
