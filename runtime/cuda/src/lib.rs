//! Tessera's GPU backend: [`Kernel`](tessera_kernel::Kernel)s of the kernel IR rendered to
//! PTX text by a pure function ([`render`]), testable on any machine, and loaded and launched
//! on an NVIDIA GPU through the driver API ([`CudaDevice`], cudarc with libcuda loaded at run
//! time: no CUDA toolkit is needed to build or to run). There is no lowering logic here: what
//! a kernel computes is decided in `tessera-kernel`, and this crate translates its primitives,
//! one table per concern:
//!
//! - `render`: the module header (`.version`, `.target`, `.address_size 64`) and the
//!   `.entry`, one `.u64` pointer parameter per buffer (`buf0`, `buf1`, ...);
//! - `index`: index arithmetic (32-bit when every count fits, else 64-bit): a flat index split
//!   into loop indices by `div`/`rem`, affine [`IndexExpr`](tessera_kernel::IndexExpr)s to
//!   global addresses;
//! - `scalar_table`: each [`Expr`](tessera_kernel::Expr) as PTX instructions (`.rn`
//!   arithmetic, never contracted, so results round as the interpreter's);
//! - [`math_fns`] / [`math_ir`]: the transcendental functions, written once in a small IR that
//!   renders to PTX and evaluates on the CPU with PTX semantics, so their accuracy is tested
//!   by ordinary unit tests;
//! - `elementwise`: a 1-D grid-stride loop over the flattened output domain, four points per
//!   thread with `ld/st.global.v4.f32` (`.v4.b16` for half buffers) when every access of a
//!   kernel of f32 values is contiguous or broadcast (buffers 16-byte aligned), and a scalar
//!   tail;
//! - `half`: f16 and bf16 elements as `.b16` registers, converted to and from f32;
//! - `reduce`: one block per output point, threads striding over the reduction loops once per
//!   sweep of [`Stages`](tessera_kernel::Stages), partials combined by `shfl.sync.bfly` and
//!   across warps through shared memory with `bar.sync`.
//!
//! - [`gemm`]: kernels with an external GEMM or convolution call, as a tiled GEMM (FMA, or
//!   tensor cores with `mma.sync`) or an implicit-GEMM convolution whose epilogue is the
//!   kernel's own DAG; and the standalone [`render_gemm`] / [`render_conv`] of the eager path.
//!
//! # Accuracy against the kernel-IR interpreter
//!
//! Arithmetic, comparisons, selects, casts, `sqrt` and f32 `exp` (the interpreter's inline
//! polynomial, operation for operation) agree bit for bit. The other transcendentals are
//! computed in f64 by range reduction and polynomials of plain IEEE operations (no
//! `ex2/lg2.approx`: results do not depend on the GPU's approximate units), f32 arguments
//! converted exactly and results rounded once. Measured worst errors (the tests of
//! `math_accuracy`, sweeps of each function's range):
//!
//! | function | f64 | f32 |
//! |---|---|---|
//! | exp | 1 ulp | 0 (bit-exact) |
//! | log | 1 ulp | 1 ulp |
//! | sin, cos, every finite `x` (Payne-Hanek reduction from `|x| = 2^20`) | 2 ulp | 1 ulp |
//! | tanh | 3 ulp | 2 ulp (glibc's `tanhf` is 2 ulp off where ours is correctly rounded) |
//! | erf | 6 ulp (near `|x| = 2`, where the series hands over to `erfc`'s continued fraction) | 0-1 ulp |
//! | pow | 1 ulp on a grid of `a` in `(0, 148)`, `b` in `[-8, 8]`; special cases exact | 1 ulp |
//!
//! Reductions combine partial results in a tree (per thread, across lanes, across warps), so
//! sums differ from the interpreter's left-to-right sums by rounding; max and min agree
//! exactly (a NaN wins, as in the interpreter).
//!
//! ```
//! use tessera_cuda::{PtxTarget, render};
//! use tessera_kernel::{BufferRole, Expr, IndexExpr, KernelBuilder, ScalarType, UnaryFn};
//!
//! // y[i] = exp(x[i]) over 1000 points.
//! let mut b = KernelBuilder::new("exp_kernel", vec![1000]);
//! let x = b.buffer(BufferRole::Input, ScalarType::F32, 1000);
//! let y = b.buffer(BufferRole::Output, ScalarType::F32, 1000);
//! let index = IndexExpr { offset: 0, strides: vec![1] };
//! let v = b.push(ScalarType::F32, Expr::Load { buffer: x, index: index.clone() });
//! let e = b.push(ScalarType::F32, Expr::Unary(UnaryFn::Exp, v));
//! b.store(y, index, e);
//! let kernel = b.finish();
//!
//! let rendered = render(&kernel, &PtxTarget::SM80)?;
//! assert!(rendered.ptx.contains(".visible .entry exp_kernel("));
//! // Contiguous f32: four points per thread and iteration, with vector loads and stores.
//! assert!(rendered.ptx.contains("ld.global.v4.f32"));
//! assert_eq!(rendered.block, 256);
//! assert_eq!(rendered.grid_for(132), 1); // 250 groups of four, 256 threads per block
//! # Ok::<(), tessera_cuda::CudaError>(())
//! ```

pub mod allocator;
mod body;
pub mod compiled;
mod device;
pub mod driver;
mod elementwise;
mod emit;
mod error;
mod gathered;
pub mod gemm;
mod group;
mod guarded;
mod half;
mod index;
#[cfg(test)]
mod math_accuracy;
pub mod math_fns;
pub mod math_ir;
mod narrow;
mod ptx_module;
mod reduce;
mod render;
mod rendered;
mod scalar_table;
mod target;
mod tensor;

pub use allocator::{AllocatorStats, CachingAllocator, DeviceBlock};
pub use compiled::{CudaProgram, CudaRunStats, HostStep};
pub use device::{CudaDevice, DeviceBuffer, LoadedKernel};
pub use driver::{CudaDriver, DeviceProperties, SystemDriver, driver_present};
pub use elementwise::ELEMENTWISE_BLOCK;
pub use error::{CudaError, Result};
pub use gemm::{
    ConvBackwardSpec, ConvGradient, ConvSpec, CublasGemm, CublasHandle, GemmImplementation,
    GemmOptions, GemmSpec, MathPath, RenderedGemm, StridedOperand, cublas_plan, cublas_present,
    grad_out_matrix, plan_gemm, render_conv, render_conv_backward, render_gemm, weight_transposed,
};
pub use group::{GroupPartLaunch, RenderedGroup, render_group};
pub use reduce::MAX_REDUCTION_BLOCK;
pub use render::{render, render_with};
pub use rendered::{BLOCKS_PER_MULTIPROCESSOR, RenderedKernel};
pub use target::PtxTarget;
pub use tensor::{
    CudaBackend, CudaStorage, CudaTensorMemory, current_backend, init, init_with_driver,
    with_cuda_memory,
};
