//! Tessera's GPU backend (work in progress).

mod body;
mod device;
mod elementwise;
mod emit;
mod error;
mod guarded;
mod index;
#[cfg(test)]
mod math_accuracy;
pub mod math_fns;
pub mod math_ir;
mod reduce;
mod render;
mod rendered;
mod scalar_table;
mod target;

pub use device::{CudaDevice, DeviceBuffer, LoadedKernel, driver_present};
pub use error::{CudaError, Result};
pub use render::render;
pub use rendered::{BLOCKS_PER_MULTIPROCESSOR, RenderedKernel};
pub use target::PtxTarget;
