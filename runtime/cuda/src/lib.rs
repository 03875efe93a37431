//! Tessera's GPU backend (work in progress).

mod emit;
mod error;
#[cfg(test)]
mod math_accuracy;
pub mod math_fns;
pub mod math_ir;

pub use error::{CudaError, Result};
