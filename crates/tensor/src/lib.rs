//! Tensors, the op table, eager CPU kernels and autograd: the foundation of Tessera.
//!
//! ```
//! use tessera_tensor::{DType, Tensor};
//!
//! let x = Tensor::from_vec(vec![1.0f32, -2.0, 3.0], &[3])?.requires_grad_(true)?;
//! let y = x.relu()?.mul_scalar(2.0)?.sum_all()?;
//! y.backward()?;
//! assert_eq!(x.grad().unwrap().to_vec::<f32>()?, vec![2.0, 0.0, 2.0]);
//! assert_eq!(y.dtype(), DType::F32);
//! # Ok::<(), tessera_tensor::TensorError>(())
//! ```

mod allocated;
mod autograd;
pub mod backend;
mod buffer_cache;
mod cpu;
mod creation;
mod derived;
mod device;
mod device_memory;
mod display;
mod dtype;
mod error;
pub mod exp_poly;
pub mod functional;
pub mod layout;
mod methods;
pub mod op;
mod random;
mod restore;
mod simd;
pub mod size;
pub mod storage;
mod tensor;
mod tensor_storage;
mod threads;
pub mod trace;

pub use allocated::allocated_bytes;
pub use autograd::{
    GradHookHandle, GradcheckOptions, HookError, HookResult, NoGradGuard, PostAccumulateGradHook,
    backward, gradcheck, gradcheck_vjp, is_grad_enabled, no_grad, set_grad_enabled,
};
pub use buffer_cache::{cached_bytes, empty_cache, recycle, try_uninit_buffer};
pub use device::{Device, DeviceKind};
pub use dtype::{DType, Element, Float};
pub use error::{Result, TensorError};
pub use layout::Layout;
pub use op::Op;
pub use random::{Generator, manual_seed, with_global_generator};
pub use restore::{Restore, SwapSlot};
pub use tensor::{Tensor, TensorId, TensorMeta};
pub use threads::{num_threads, set_num_threads};
