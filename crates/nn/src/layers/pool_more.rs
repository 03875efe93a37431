//! More pooling layers: `MaxPool1d` and `AvgPool1d` over `[N, C, L]` or unbatched `[C, L]`
//! (pooling over planes of one row), and `AdaptiveMaxPool2d` (the op table's adaptive max
//! with indices); each prints as PyTorch's.

use super::options::{Size2, options};
use super::pool::max_pool_repr;
use super::python::py_tuple;
use crate::{Forward, ModuleCore, Result};
use tessera_tensor::{Tensor, functional};

options! {
    /// Options of [`MaxPool1d`]; `stride` defaults to the kernel size.
    MaxPool1dOptions {
        stride: Option<usize> = None,
        padding: usize = 0,
        dilation: usize = 1,
        ceil_mode: bool = false,
    }
}

/// The largest value of each window along `L`; padding counts as -inf and the first maximum
/// of a window wins (and receives its gradient).
#[derive(crate::Module)]
#[module(extra_repr = "repr_args")]
pub struct MaxPool1d {
    core: ModuleCore,
    pub kernel_size: usize,
    pub stride: usize,
    pub padding: usize,
    pub dilation: usize,
    pub ceil_mode: bool,
}

impl MaxPool1d {
    pub fn new(kernel_size: usize) -> Self {
        Self::with_options(kernel_size, MaxPool1dOptions::default())
    }

    pub fn with_options(kernel_size: usize, options: MaxPool1dOptions) -> Self {
        MaxPool1d {
            core: ModuleCore::default(),
            kernel_size,
            stride: options.stride.unwrap_or(kernel_size),
            padding: options.padding,
            dilation: options.dilation,
            ceil_mode: options.ceil_mode,
        }
    }

    /// The pooled values and the i64 index along `L` of each maximum (PyTorch's
    /// `return_indices=True`).
    pub fn forward_with_indices(&self, input: &Tensor) -> Result<(Tensor, Tensor)> {
        Ok(functional::max_pool1d_with_indices(
            input,
            self.kernel_size,
            self.stride,
            self.padding,
            self.dilation,
            self.ceil_mode,
        )?)
    }

    fn repr_args(&self) -> String {
        max_pool_repr(
            [self.kernel_size, self.stride, self.padding, self.dilation],
            self.ceil_mode,
        )
    }
}

impl Forward for MaxPool1d {
    type Output = Tensor;
    fn forward(&self, input: Tensor) -> Result<Tensor> {
        Ok(functional::max_pool1d(
            &input,
            self.kernel_size,
            self.stride,
            self.padding,
            self.dilation,
            self.ceil_mode,
        )?)
    }
}

options! {
    /// Options of [`AvgPool1d`]; `stride` defaults to the kernel size.
    AvgPool1dOptions {
        stride: Option<usize> = None,
        padding: usize = 0,
        ceil_mode: bool = false,
        /// Count padded zeros in the divisor.
        count_include_pad: bool = true,
    }
}

/// The mean of each window along `L`.
#[derive(crate::Module)]
#[module(extra_repr = "repr_args")]
pub struct AvgPool1d {
    core: ModuleCore,
    pub kernel_size: usize,
    pub stride: usize,
    pub padding: usize,
    pub ceil_mode: bool,
    pub count_include_pad: bool,
}

impl AvgPool1d {
    pub fn new(kernel_size: usize) -> Self {
        Self::with_options(kernel_size, AvgPool1dOptions::default())
    }

    pub fn with_options(kernel_size: usize, options: AvgPool1dOptions) -> Self {
        AvgPool1d {
            core: ModuleCore::default(),
            kernel_size,
            stride: options.stride.unwrap_or(kernel_size),
            padding: options.padding,
            ceil_mode: options.ceil_mode,
            count_include_pad: options.count_include_pad,
        }
    }

    /// PyTorch stores the sizes as 1-tuples, so they print as `(3,)`.
    fn repr_args(&self) -> String {
        format!(
            "kernel_size={}, stride={}, padding={}",
            py_tuple(&[self.kernel_size]),
            py_tuple(&[self.stride]),
            py_tuple(&[self.padding])
        )
    }
}

impl Forward for AvgPool1d {
    type Output = Tensor;
    fn forward(&self, input: Tensor) -> Result<Tensor> {
        Ok(functional::avg_pool1d(
            &input,
            self.kernel_size,
            self.stride,
            self.padding,
            self.ceil_mode,
            self.count_include_pad,
        )?)
    }
}

/// The largest value over PyTorch's adaptive bins `[floor(i * In / Out), ceil((i + 1) * In /
/// Out))`, which overlap when the sizes do not divide.
#[derive(crate::Module)]
#[module(extra_repr = "repr_args")]
pub struct AdaptiveMaxPool2d {
    core: ModuleCore,
    #[module(skip)]
    pub output_size: Size2,
}

impl AdaptiveMaxPool2d {
    pub fn new(output_size: impl Into<Size2>) -> Self {
        AdaptiveMaxPool2d {
            core: ModuleCore::default(),
            output_size: output_size.into(),
        }
    }

    /// The pooled values and the i64 index of each maximum in its flattened `H * W` plane
    /// (PyTorch's `return_indices=True`).
    pub fn forward_with_indices(&self, input: &Tensor) -> Result<(Tensor, Tensor)> {
        Ok(functional::adaptive_max_pool2d_with_indices(
            input,
            self.output_size.pair(),
        )?)
    }

    fn repr_args(&self) -> String {
        format!("output_size={}", self.output_size)
    }
}

impl Forward for AdaptiveMaxPool2d {
    type Output = Tensor;
    fn forward(&self, input: Tensor) -> Result<Tensor> {
        Ok(self.forward_with_indices(&input)?.0)
    }
}
