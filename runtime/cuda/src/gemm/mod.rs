//! GEMM and convolution kernels generated as PTX: a tiled GEMM (shared-memory tiles of A and
//! B per step of k, register blocking, predicated edges for any sizes) on one of two math
//! paths ([`MathPath`]): FMA on CUDA cores (f32 and f64, exact accumulation in the element
//! type: the default for f32) or tensor cores with `mma.sync` (tf32 for f32 when
//! [`GemmOptions::allow_tf32`], f16 and bf16 with f32 accumulation). A convolution is the
//! same kernel with its B operand gathered from the input on the fly (implicit GEMM).
//!
//! Two ways in: a kernel-IR kernel with a GEMM or convolution call goes through
//! [`crate::render`] (its elementwise epilogue evaluated on the accumulators), and the eager
//! path's batched products and convolutions through [`render_gemm`] and [`render_conv`], and
//! a convolution's input and weight gradients through [`render_conv_backward`].
//! Tile sizes live in `config`, one place. Where libcublas is found, [`plan_gemm`] prefers
//! cuBLAS for the standalone products it can express ([`cublas_plan`]).

mod arith;
mod config;
mod conv_backward;
mod cublas;
mod element;
mod epilogue;
mod fma;
pub(crate) mod kernel_call;
mod mma;
mod module_text;
mod shared_layout;
mod source;
mod standalone;
mod tile_kernel;

pub use config::{
    FMA_MICRO, FMA_TILES, GemmOptions, MMA_TILES, MMA_WARP_TILE, MathPath, ROW_PAD_BYTES, Tiles,
};
pub use conv_backward::{
    ConvBackwardSpec, ConvGradient, grad_out_matrix, render_conv_backward, weight_transposed,
};
pub use cublas::{
    CublasGemm, CublasHandle, GemmImplementation, cublas_plan, cublas_present, plan_gemm,
};
pub use standalone::{
    ConvSpec, GemmParam, GemmParamRole, GemmSpec, RenderedGemm, StridedOperand, conv_output_shape,
    render_conv, render_gemm,
};
