//! Normalisation layers: `BatchNorm1d` and `BatchNorm2d` (with running statistics and
//! `num_batches_tracked`, state-dict version 2), `LayerNorm` and `GroupNorm`.

use super::options::{initialized, options, parameter, zeros};
use super::python::{py_bool, py_float, py_opt_float, py_tuple};
use crate::init;
use crate::{Forward, ModuleCore, ModuleExt, NnError, Parameter, Result};
use tessera_tensor::{DType, Device, Tensor, functional, no_grad};

options! {
    /// Options of [`BatchNorm1d`] and [`BatchNorm2d`]. A `momentum` of `None` averages the
    /// running statistics cumulatively (weight `1 / num_batches_tracked`).
    BatchNormOptions {
        eps: f64 = 1e-5,
        momentum: Option<f64> = Some(0.1),
        /// Learnable per-channel `weight` and `bias`.
        affine: bool = true,
        /// With `affine`, whether the layer learns the `bias` (the weight is kept).
        bias: bool = true,
        /// Keep running statistics (used outside training); without them the batch's own
        /// statistics normalise in eval mode too.
        track_running_stats: bool = true,
        dtype: DType = DType::F32,
        device: Device = Device::Cpu,
    }
}

/// The state and computation BatchNorm1d and BatchNorm2d share (PyTorch's `_BatchNorm`);
/// the two layers differ only in the input ranks they accept.
macro_rules! batch_norm_layer {
    ($(#[$doc:meta])* $name:ident, ranks: $ranks:expr, expected: $expected:literal) => {
        $(#[$doc])*
        #[derive(crate::Module)]
        #[module(extra_repr = "repr_args", version = 2)]
        pub struct $name {
            core: ModuleCore,
            pub num_features: usize,
            #[module(skip)]
            pub options: BatchNormOptions,
            pub weight: Option<Parameter>,
            pub bias: Option<Parameter>,
            #[module(buffer)]
            pub running_mean: Option<Tensor>,
            #[module(buffer)]
            pub running_var: Option<Tensor>,
            /// An i64 scalar counting the training batches seen.
            #[module(buffer)]
            pub num_batches_tracked: Option<Tensor>,
        }

        impl $name {
            pub fn new(num_features: usize) -> Result<Self> {
                Self::with_options(num_features, BatchNormOptions::default())
            }

            pub fn with_options(num_features: usize, options: BatchNormOptions) -> Result<Self> {
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
                initialized(layer, |l| reset_affine(&l.weight, &l.bias))
            }

            /// Zeroes the running mean and `num_batches_tracked`, sets the running variance to one.
            pub fn reset_running_stats(&self) -> Result<()> {
                reset_running_stats(
                    &self.running_mean,
                    &self.running_var,
                    &self.num_batches_tracked,
                )
            }

            /// Resets the running statistics and sets the weight to ones, the bias to zeros.
            pub fn reset_parameters(&self) -> Result<()> {
                self.reset_running_stats()?;
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
                    py_bool(o.bias),
                    py_bool(o.track_running_stats)
                )
            }
        }

        impl Forward for $name {
            type Output = Tensor;
            fn forward(&self, input: Tensor) -> Result<Tensor> {
                let rank = input.ndim();
                if !$ranks.contains(&rank) {
                    return Err(NnError::Invalid(format!(
                        "{}: expected {} input (got {}D input of shape {:?})",
                        stringify!($name),
                        $expected,
                        rank,
                        input.shape()
                    )));
                }
                let state = BatchNormState {
                    options: &self.options,
                    weight: self.weight.as_deref(),
                    bias: self.bias.as_deref(),
                    running_mean: self.running_mean.as_ref(),
                    running_var: self.running_var.as_ref(),
                    num_batches_tracked: self.num_batches_tracked.as_ref(),
                    training: self.is_training(),
                };
                state.forward(&input)
            }
        }
    };
}

batch_norm_layer! {
    /// Batch normalisation over the channels of `[N, C]` or `[N, C, L]` input.
    BatchNorm1d, ranks: [2, 3], expected: "2D or 3D"
}

batch_norm_layer! {
    /// Batch normalisation over the channels of `[N, C, H, W]` input.
    BatchNorm2d, ranks: [4], expected: "4D"
}

/// The per-channel state of batch and instance norm: optional affine parameters and
/// optional running statistics with their batch counter.
pub(super) struct ChannelState {
    pub weight: Option<Parameter>,
    pub bias: Option<Parameter>,
    pub running_mean: Option<Tensor>,
    pub running_var: Option<Tensor>,
    pub num_batches_tracked: Option<Tensor>,
}

impl ChannelState {
    pub fn new(
        num_features: usize,
        weight: bool,
        bias: bool,
        tracked: bool,
        (dtype, device): (DType, Device),
    ) -> Result<Self> {
        let channel = || parameter(&[num_features], dtype, device);
        Ok(ChannelState {
            weight: weight.then(channel).transpose()?,
            bias: bias.then(channel).transpose()?,
            running_mean: tracked
                .then(|| zeros(&[num_features], dtype, device))
                .transpose()?,
            running_var: tracked
                .then(|| Ok::<_, NnError>(Tensor::ones(&[num_features], dtype)?.to_device(device)?))
                .transpose()?,
            num_batches_tracked: tracked
                .then(|| zeros(&[], DType::I64, device))
                .transpose()?,
        })
    }
}

pub(super) fn reset_affine(weight: &Option<Parameter>, bias: &Option<Parameter>) -> Result<()> {
    if let Some(w) = weight {
        init::ones_(w)?;
    }
    if let Some(b) = bias {
        init::zeros_(b)?;
    }
    Ok(())
}

pub(super) fn reset_running_stats(
    mean: &Option<Tensor>,
    var: &Option<Tensor>,
    count: &Option<Tensor>,
) -> Result<()> {
    let _guard = no_grad();
    for (t, value) in [(mean, 0.0), (var, 1.0), (count, 0.0)] {
        if let Some(t) = t {
            t.fill_(value)?;
        }
    }
    Ok(())
}

/// One BatchNorm call's view of the layer.
struct BatchNormState<'a> {
    options: &'a BatchNormOptions,
    weight: Option<&'a Tensor>,
    bias: Option<&'a Tensor>,
    running_mean: Option<&'a Tensor>,
    running_var: Option<&'a Tensor>,
    num_batches_tracked: Option<&'a Tensor>,
    training: bool,
}

impl BatchNormState<'_> {
    /// PyTorch's `_BatchNorm.forward`: in training with tracked statistics, count the batch
    /// and blend the running statistics (with `momentum`, or `1 / count` when it is `None`),
    /// through the one update op eager and traced graphs share; batch statistics normalise in
    /// training and whenever no running statistics exist.
    fn forward(&self, input: &Tensor) -> Result<Tensor> {
        let o = self.options;
        let use_batch_stats =
            self.training || (self.running_mean.is_none() && self.running_var.is_none());
        let running = if !self.training || o.track_running_stats {
            functional::RunningStats {
                mean: self.running_mean,
                var: self.running_var,
                num_batches_tracked: self.num_batches_tracked.filter(|_| self.training),
            }
        } else {
            functional::RunningStats::default()
        };
        Ok(functional::batch_norm_tracked(
            input,
            running,
            self.weight,
            self.bias,
            use_batch_stats,
            o.momentum,
            o.eps,
        )?)
    }
}

options! {
    /// Options of [`LayerNorm`].
    LayerNormOptions {
        eps: f64 = 1e-5,
        /// Learnable `weight` (ones) and `bias` (zeros) of the normalised shape.
        elementwise_affine: bool = true,
        /// With `elementwise_affine`, whether the layer learns the `bias`.
        bias: bool = true,
        dtype: DType = DType::F32,
        device: Device = Device::Cpu,
    }
}

/// Normalises over the trailing `normalized_shape` dimensions.
#[derive(crate::Module)]
#[module(extra_repr = "repr_args")]
pub struct LayerNorm {
    core: ModuleCore,
    pub normalized_shape: Vec<usize>,
    #[module(skip)]
    pub options: LayerNormOptions,
    pub weight: Option<Parameter>,
    pub bias: Option<Parameter>,
}

impl LayerNorm {
    pub fn new(normalized_shape: &[usize]) -> Result<Self> {
        Self::with_options(normalized_shape, LayerNormOptions::default())
    }

    pub fn with_options(normalized_shape: &[usize], options: LayerNormOptions) -> Result<Self> {
        let (dtype, device) = (options.dtype, options.device);
        let affine = || parameter(normalized_shape, dtype, device);
        let layer = LayerNorm {
            core: ModuleCore::default(),
            normalized_shape: normalized_shape.to_vec(),
            weight: options.elementwise_affine.then(affine).transpose()?,
            bias: (options.elementwise_affine && options.bias)
                .then(affine)
                .transpose()?,
            options,
        };
        initialized(layer, LayerNorm::reset_parameters)
    }

    pub fn reset_parameters(&self) -> Result<()> {
        reset_affine(&self.weight, &self.bias)
    }

    fn repr_args(&self) -> String {
        format!(
            "{}, eps={}, elementwise_affine={}, bias={}",
            py_tuple(&self.normalized_shape),
            py_float(self.options.eps),
            py_bool(self.options.elementwise_affine),
            py_bool(self.bias.is_some())
        )
    }
}

impl Forward for LayerNorm {
    type Output = Tensor;
    fn forward(&self, input: Tensor) -> Result<Tensor> {
        Ok(functional::layer_norm(
            &input,
            &self.normalized_shape,
            self.weight.as_deref(),
            self.bias.as_deref(),
            self.options.eps,
        )?)
    }
}

options! {
    /// Options of [`GroupNorm`].
    GroupNormOptions {
        eps: f64 = 1e-5,
        /// Learnable per-channel `weight` (ones) and `bias` (zeros).
        affine: bool = true,
        dtype: DType = DType::F32,
        device: Device = Device::Cpu,
    }
}

/// Normalises each sample over `num_groups` groups of channels of `[N, C, ...]` input.
#[derive(crate::Module)]
#[module(extra_repr = "repr_args")]
pub struct GroupNorm {
    core: ModuleCore,
    pub num_groups: usize,
    pub num_channels: usize,
    #[module(skip)]
    pub options: GroupNormOptions,
    pub weight: Option<Parameter>,
    pub bias: Option<Parameter>,
}

impl GroupNorm {
    pub fn new(num_groups: usize, num_channels: usize) -> Result<Self> {
        Self::with_options(num_groups, num_channels, GroupNormOptions::default())
    }

    pub fn with_options(
        num_groups: usize,
        num_channels: usize,
        options: GroupNormOptions,
    ) -> Result<Self> {
        if num_groups == 0 || !num_channels.is_multiple_of(num_groups) {
            return Err(NnError::Invalid(format!(
                "GroupNorm: num_channels ({num_channels}) must be divisible by num_groups ({num_groups})"
            )));
        }
        let (dtype, device) = (options.dtype, options.device);
        let affine = || parameter(&[num_channels], dtype, device);
        let layer = GroupNorm {
            core: ModuleCore::default(),
            num_groups,
            num_channels,
            weight: options.affine.then(affine).transpose()?,
            bias: options.affine.then(affine).transpose()?,
            options,
        };
        initialized(layer, GroupNorm::reset_parameters)
    }

    pub fn reset_parameters(&self) -> Result<()> {
        reset_affine(&self.weight, &self.bias)
    }

    fn repr_args(&self) -> String {
        format!(
            "{}, {}, eps={}, affine={}",
            self.num_groups,
            self.num_channels,
            py_float(self.options.eps),
            py_bool(self.options.affine)
        )
    }
}

impl Forward for GroupNorm {
    type Output = Tensor;
    fn forward(&self, input: Tensor) -> Result<Tensor> {
        let shape = input.shape();
        if shape.len() < 2 || shape[1] != self.num_channels {
            return Err(NnError::Invalid(format!(
                "GroupNorm: expected input of shape [N, {}, *], got {shape:?}",
                self.num_channels
            )));
        }
        Ok(functional::group_norm(
            &input,
            self.num_groups,
            self.weight.as_deref(),
            self.bias.as_deref(),
            self.options.eps,
        )?)
    }
}
