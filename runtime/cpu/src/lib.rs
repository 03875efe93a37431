//! Tessera's CPU backend: [`tessera_kernel::Kernel`]s rendered to cranelift IR ([`render`])
//! and JIT-compiled for the host ([`JitProgram`]); a [`JitProgram`] runs its program's kernels
//! as a [`tessera_kernel::KernelExecutor`]. There is no lowering logic here: what a kernel
//! computes is decided in `tessera-kernel`, and this crate only translates its primitives.

mod error;
mod jit;
mod parallel;
pub mod render;
mod render_columns;
mod render_exp;
mod render_gemm;
mod render_half;
mod render_interior;
mod render_reduce;

pub use error::{CpuError, Result};
pub use jit::{CompiledKernel, JitProgram};
