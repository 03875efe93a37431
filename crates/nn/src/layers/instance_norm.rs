//! `InstanceNorm1d` and `InstanceNorm2d`: per-sample, per-channel normalisation over the
//! spatial dims, with PyTorch's optional affine and running statistics (which it updates but
//! whose `num_batches_tracked` it never increments) and unbatched inputs.

use super::norm::{ChannelState, reset_affine, reset_running_stats};
use super::options::{initialized, options};
use super::python::{py_bool, py_float, py_opt_float};
use crate::{Forward, ModuleCore, ModuleExt, NnError, Parameter, Result};
use tessera_tensor::{DType, Device, Tensor, functional};

options! {
    /// Options of [`InstanceNorm1d`] and [`InstanceNorm2d`] (PyTorch's defaults: no affine,
    /// no running statistics). A `momentum` of `None` leaves the running statistics as they
    /// are (PyTorch passes 0).
    InstanceNormOptions {
        eps: f64 = 1e-5,
        momentum: Option<f64> = Some(0.1),
        /// Learnable per-channel `weight` (ones) and `bias` (zeros).
        affine: bool = false,
        /// With `affine`, whether the layer learns the `bias`.
        bias: bool = true,
        /// Keep running statistics, which normalise in eval mode.
        track_running_stats: bool = false,
        dtype: DType = DType::F32,
        device: Device = Device::Cpu,
    }
}

/// The state and computation InstanceNorm1d and InstanceNorm2d share (PyTorch's
/// `_InstanceNorm`); they differ in the input ranks they accept.
macro_rules! instance_norm_layer {
    ($(#[$doc:meta])* $name:ident, batched_rank: $rank:literal) => {
        $(#[$doc])*
        #[derive(crate::Module)]
        #[module(extra_repr = "repr_args", version = 2)]
        pub struct $name {
            core: ModuleCore,
            pub num_features: usize,
            #[module(skip)]
            pub options: InstanceNormOptions,
            pub weight: Option<Parameter>,
            pub bias: Option<Parameter>,
            #[module(buffer)]
            pub running_mean: Option<Tensor>,
            #[module(buffer)]
            pub running_var: Option<Tensor>,
            /// An i64 scalar kept for PyTorch's state-dict layout; instance norm never counts.
            #[module(buffer)]
            pub num_batches_tracked: Option<Tensor>,
        }

        impl $name {
            pub fn new(num_features: usize) -> Result<Self> {
                Self::with_options(num_features, InstanceNormOptions::default())
            }

            pub fn with_options(num_features: usize, options: InstanceNormOptions) -> Result<Self> {
                let state = ChannelState::new(
                    num_features,
                    options.affine,
                    options.affine && options.bias,
                    options.track_running_stats,
                    (options.dtype, options.device),
                )?;
                let layer = $name {
                    core: ModuleCore::default(),
                    num_features,
                    weight: state.weight,
                    bias: state.bias,
                    running_mean: state.running_mean,
                    running_var: state.running_var,
                    num_batches_tracked: state.num_batches_tracked,
                    options,
                };
                initialized(layer, $name::reset_parameters)
            }

            /// Resets the running statistics and sets the weight to ones, the bias to zeros.
            pub fn reset_parameters(&self) -> Result<()> {
                reset_running_stats(
                    &self.running_mean,
                    &self.running_var,
                    &self.num_batches_tracked,
                )?;
                reset_affine(&self.weight, &self.bias)
            }

            fn repr_args(&self) -> String {
                let o = &self.options;
                format!(
                    "{}, eps={}, momentum={}, affine={}, bias={}, track_running_stats={}",
                    self.num_features,
                    py_float(o.eps),
                    py_opt_float(o.momentum),
                    py_bool(o.affine),
                    py_bool(o.affine && o.bias),
                    py_bool(o.track_running_stats)
                )
            }
        }

        impl Forward for $name {
            type Output = Tensor;
            fn forward(&self, input: Tensor) -> Result<Tensor> {
                let shape = input.shape();
                let unbatched = shape.len() == $rank - 1;
                if shape.len() != $rank && !unbatched {
                    return Err(NnError::Invalid(format!(
                        "{}: expected {}D or {}D input (got {}D input of shape {shape:?})",
                        stringify!($name),
                        $rank - 1,
                        $rank,
                        shape.len(),
                    )));
                }
                let channels = shape[usize::from(!unbatched)];
                let has_state = self.weight.is_some() || self.running_mean.is_some();
                if has_state && channels != self.num_features {
                    return Err(NnError::Invalid(format!(
                        "{}: expected input's size at dim {} to match num_features ({}), but got: {channels} (input of shape {shape:?})",
                        stringify!($name),
                        usize::from(!unbatched),
                        self.num_features,
                    )));
                }
                let batched = if unbatched { input.unsqueeze(0)? } else { input };
                let use_input_stats = self.is_training() || self.running_mean.is_none();
                let output = functional::instance_norm(
                    &batched,
                    self.running_mean.as_ref(),
                    self.running_var.as_ref(),
                    self.weight.as_deref(),
                    self.bias.as_deref(),
                    use_input_stats,
                    self.options.momentum.unwrap_or(0.0),
                    self.options.eps,
                )?;
                Ok(if unbatched { output.squeeze_dim(0)? } else { output })
            }
        }
    };
}

instance_norm_layer! {
    /// Instance normalisation of `[N, C, L]` (or unbatched `[C, L]`) input over `L`.
    InstanceNorm1d, batched_rank: 3
}

instance_norm_layer! {
    /// Instance normalisation of `[N, C, H, W]` (or unbatched `[C, H, W]`) input over `H, W`.
    InstanceNorm2d, batched_rank: 4
}
