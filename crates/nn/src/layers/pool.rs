//! Pooling layers: `MaxPool2d`, `AvgPool2d` and `AdaptiveAvgPool2d` over `[N, C, H, W]` or
//! unbatched `[C, H, W]` input; sizes print as given (`kernel_size=2` or `(2, 3)`).

use super::options::{Size2, options};
use super::python::py_bool;
use crate::{Forward, ModuleCore, NnError, Result};
use tessera_tensor::{Tensor, functional};

fn check_rank(layer: &str, input: &Tensor) -> Result<()> {
    match input.ndim() {
        3 | 4 => Ok(()),
        _ => Err(NnError::Invalid(format!(
            "{layer}: expected 3D or 4D input, but got input of size {:?}",
            input.shape()
        ))),
    }
}

options! {
    /// Options of [`MaxPool2d`]; `stride` defaults to the kernel size.
    MaxPool2dOptions {
        stride: Option<Size2> = None,
        padding: Size2 = Size2::Int(0),
        dilation: Size2 = Size2::Int(1),
        ceil_mode: bool = false,
    }
}

/// The largest value of each window; padding counts as -inf.
#[derive(crate::Module)]
#[module(extra_repr = "repr_args")]
pub struct MaxPool2d {
    core: ModuleCore,
    #[module(skip)]
    pub kernel_size: Size2,
    #[module(skip)]
    pub stride: Size2,
    #[module(skip)]
    pub padding: Size2,
    #[module(skip)]
    pub dilation: Size2,
    pub ceil_mode: bool,
}

impl MaxPool2d {
    pub fn new(kernel_size: impl Into<Size2>) -> Self {
        Self::with_options(kernel_size, MaxPool2dOptions::default())
    }

    pub fn with_options(kernel_size: impl Into<Size2>, options: MaxPool2dOptions) -> Self {
        let kernel_size = kernel_size.into();
        MaxPool2d {
            core: ModuleCore::default(),
            kernel_size,
            stride: options.stride.unwrap_or(kernel_size),
            padding: options.padding,
            dilation: options.dilation,
            ceil_mode: options.ceil_mode,
        }
    }

    fn repr_args(&self) -> String {
        max_pool_repr(
            [self.kernel_size, self.stride, self.padding, self.dilation],
            self.ceil_mode,
        )
    }
}

/// PyTorch's `_MaxPoolNd.extra_repr`; `sizes` are kernel, stride, padding and dilation.
pub(super) fn max_pool_repr(sizes: [impl std::fmt::Display; 4], ceil_mode: bool) -> String {
    let [kernel, stride, padding, dilation] = sizes;
    format!(
        "kernel_size={kernel}, stride={stride}, padding={padding}, dilation={dilation}, ceil_mode={}",
        py_bool(ceil_mode)
    )
}

impl Forward for MaxPool2d {
    type Output = Tensor;
    fn forward(&self, input: Tensor) -> Result<Tensor> {
        check_rank("MaxPool2d", &input)?;
        Ok(functional::max_pool2d(
            &input,
            self.kernel_size.pair(),
            self.stride.pair(),
            self.padding.pair(),
            self.dilation.pair(),
            self.ceil_mode,
        )?)
    }
}

options! {
    /// Options of [`AvgPool2d`]; `stride` defaults to the kernel size.
    AvgPool2dOptions {
        stride: Option<Size2> = None,
        padding: Size2 = Size2::Int(0),
        ceil_mode: bool = false,
        /// Count padded zeros in the divisor.
        count_include_pad: bool = true,
    }
}

/// The mean of each window.
#[derive(crate::Module)]
#[module(extra_repr = "repr_args")]
pub struct AvgPool2d {
    core: ModuleCore,
    #[module(skip)]
    pub kernel_size: Size2,
    #[module(skip)]
    pub stride: Size2,
    #[module(skip)]
    pub padding: Size2,
    pub ceil_mode: bool,
    pub count_include_pad: bool,
}

impl AvgPool2d {
    pub fn new(kernel_size: impl Into<Size2>) -> Self {
        Self::with_options(kernel_size, AvgPool2dOptions::default())
    }

    pub fn with_options(kernel_size: impl Into<Size2>, options: AvgPool2dOptions) -> Self {
        let kernel_size = kernel_size.into();
        AvgPool2d {
            core: ModuleCore::default(),
            kernel_size,
            stride: options.stride.unwrap_or(kernel_size),
            padding: options.padding,
            ceil_mode: options.ceil_mode,
            count_include_pad: options.count_include_pad,
        }
    }

    fn repr_args(&self) -> String {
        format!(
            "kernel_size={}, stride={}, padding={}",
            self.kernel_size, self.stride, self.padding
        )
    }
}

impl Forward for AvgPool2d {
    type Output = Tensor;
    fn forward(&self, input: Tensor) -> Result<Tensor> {
        check_rank("AvgPool2d", &input)?;
        Ok(functional::avg_pool2d(
            &input,
            self.kernel_size.pair(),
            self.stride.pair(),
            self.padding.pair(),
            self.ceil_mode,
            self.count_include_pad,
        )?)
    }
}

/// The mean over PyTorch's adaptive bins, giving an `output_size` plane whatever the input's.
#[derive(crate::Module)]
#[module(extra_repr = "repr_args")]
pub struct AdaptiveAvgPool2d {
    core: ModuleCore,
    #[module(skip)]
    pub output_size: Size2,
}

impl AdaptiveAvgPool2d {
    pub fn new(output_size: impl Into<Size2>) -> Self {
        AdaptiveAvgPool2d {
            core: ModuleCore::default(),
            output_size: output_size.into(),
        }
    }

    fn repr_args(&self) -> String {
        format!("output_size={}", self.output_size)
    }
}

impl Forward for AdaptiveAvgPool2d {
    type Output = Tensor;
    fn forward(&self, input: Tensor) -> Result<Tensor> {
        check_rank("AdaptiveAvgPool2d", &input)?;
        Ok(functional::adaptive_avg_pool2d(
            &input,
            self.output_size.pair(),
        )?)
    }
}
