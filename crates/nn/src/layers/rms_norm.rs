//! `RMSNorm`: divides by the root mean square over the trailing `normalized_shape` dims and
//! scales by a learnable weight; `eps` of `None` is the input dtype's machine epsilon.

use super::norm::reset_affine;
use super::options::{initialized, options, parameter};
use super::python::{py_bool, py_opt_float, py_tuple};
use crate::{Forward, ModuleCore, Parameter, Result};
use tessera_tensor::{DType, Device, Tensor, functional};

options! {
    /// Options of [`RMSNorm`].
    RMSNormOptions {
        /// `None` (PyTorch's default) uses `torch.finfo(input.dtype).eps`.
        eps: Option<f64> = None,
        /// A learnable `weight` (ones) of the normalised shape.
        elementwise_affine: bool = true,
        dtype: DType = DType::F32,
        device: Device = Device::Cpu,
    }
}

/// `y = x / sqrt(mean(x^2) + eps) * weight` over the trailing `normalized_shape` dims.
#[derive(crate::Module)]
#[module(extra_repr = "repr_args")]
pub struct RMSNorm {
    core: ModuleCore,
    pub normalized_shape: Vec<usize>,
    #[module(skip)]
    pub options: RMSNormOptions,
    pub weight: Option<Parameter>,
}

impl RMSNorm {
    pub fn new(normalized_shape: &[usize]) -> Result<Self> {
        Self::with_options(normalized_shape, RMSNormOptions::default())
    }

    pub fn with_options(normalized_shape: &[usize], options: RMSNormOptions) -> Result<Self> {
        let (dtype, device) = (options.dtype, options.device);
        let layer = RMSNorm {
            core: ModuleCore::default(),
            normalized_shape: normalized_shape.to_vec(),
            weight: options
                .elementwise_affine
                .then(|| parameter(normalized_shape, dtype, device))
                .transpose()?,
            options,
        };
        initialized(layer, RMSNorm::reset_parameters)
    }

    /// Sets the weight to ones.
    pub fn reset_parameters(&self) -> Result<()> {
        reset_affine(&self.weight, &None)
    }

    fn repr_args(&self) -> String {
        format!(
            "{}, eps={}, elementwise_affine={}",
            py_tuple(&self.normalized_shape),
            py_opt_float(self.options.eps),
            py_bool(self.options.elementwise_affine)
        )
    }
}

impl Forward for RMSNorm {
    type Output = Tensor;
    fn forward(&self, input: Tensor) -> Result<Tensor> {
        Ok(functional::rms_norm(
            &input,
            &self.normalized_shape,
            self.weight.as_deref(),
            self.options.eps,
        )?)
    }
}
