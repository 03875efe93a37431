//! CUDA tensors: CUDA memory behind the tensor crate's device seam. [`init`] (the machine's
//! driver) or [`init_with_driver`] (any [`CudaDriver`](crate::CudaDriver), the tests'
//! emulated one) registers a [`CudaBackend`]; from then on `to_device(Device::Cuda(i))`
//! copies tensors (and, through `Module::to_device`, parameters in place) to device `i`,
//! ops on them run as eager kernels generated from the kernel IR, and `to_vec`, printing and
//! `to_device(Device::Cpu)` copy back.
//!
//! Storage holds any dtype (bytes in a block of the device's caching allocator; copies move
//! bool, integer and float tensors alike). Eager kernels compute on f32, f64, f16 and bf16:
//! what the lowering makes into kernels the PTX renderer generates, and matmul, linear and
//! convolutions as the standalone generated GEMM and convolution kernels. The rest is
//! `TensorError::UnsupportedOnDevice` naming the op.

mod backend;
pub(crate) mod copies;
pub(crate) mod device_state;
pub(crate) mod eager;
mod errors;
mod external_memory;
mod host_bytes;
mod init;
pub(crate) mod storage;

pub use backend::CudaBackend;
pub use external_memory::{CudaTensorMemory, with_cuda_memory};
pub use init::{current_backend, init, init_with_driver};
pub use storage::CudaStorage;
