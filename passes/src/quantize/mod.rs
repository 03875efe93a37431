//! Int8 quantization for inference, as PyTorch's `quantize_dynamic` and FX post-training
//! static quantization. Dynamic: [`QuantizeDynamic`] swaps every `call_module` Linear for a
//! `DynamicQuantizedLinear` the graph module owns. Static, in three steps:
//! [`InsertObservers`] puts `MinMaxObserver` modules on the input and output of each
//! conv(+ReLU) and linear(+ReLU) block, [`calibrate`] runs representative batches through
//! them, and [`ConvertStatic`] replaces each block by `quantize -> quantized module ->
//! dequantize` with the observed parameters and removes the observers. A block fed by another
//! only through pooling or flatten takes the producer's output parameters as its input ones
//! (PyTorch's shared qparams), and the dequantize/quantize pair around those ops is removed,
//! so that they run on u8 (average pools as `quantized_avg_pool2d` with the zero point). The
//! traced model's modules are never changed; every new module is owned by the graph module.
//! Quantization-aware training: [`PrepareQat`] swaps each block's layer for a QAT layer
//! fake-quantizing its weight and puts `FakeQuantize` modules where the observers would go;
//! after training, [`ConvertStatic`] converts it as a calibrated graph.

mod blocks;
mod calibrate;
mod convert;
mod dynamic;
mod hoist_dequantize;
mod observers;
mod prepare_qat;
mod quantized_adds;
mod round_trips;
mod shared_qparams;
mod u8_average;

pub use blocks::{Block, find_blocks};
pub use calibrate::calibrate;
pub use convert::ConvertStatic;
pub use dynamic::QuantizeDynamic;
pub use observers::InsertObservers;
pub use prepare_qat::PrepareQat;

use crate::PassError;
use crate::lookup::module_at;

/// A module that could not be built, as the pass's error.
fn build_error(pass: &str, target: &str, e: impl std::fmt::Display) -> PassError {
    PassError::Unsupported(format!("{pass}: quantizing call_module[{target}]: {e}"))
}
