//! More convolution layers: `Conv3d` (over `functional::conv3d`, composed from conv2d) and
//! `ConvTranspose1d` (the gradient of a conv1d with respect to its input); parameters,
//! initialisation and reprs as PyTorch's.

use super::conv::{ConvConfig, check_rank};
use super::conv_layer::conv_layer_methods;
use super::options::options;
use crate::{Forward, ModuleCore, NnError, Parameter, Result};
use tessera_tensor::{DType, Device, Tensor, functional};

options! {
    /// Options of [`Conv3d`]; sizes are `[depth, height, width]`.
    Conv3dOptions {
        stride: [usize; 3] = [1, 1, 1],
        padding: [usize; 3] = [0, 0, 0],
        dilation: [usize; 3] = [1, 1, 1],
        groups: usize = 1,
        bias: bool = true,
        dtype: DType = DType::F32,
        device: Device = Device::Cpu,
    }
}

/// 3-D convolution over `[N, C_in, D, H, W]` (or unbatched `[C_in, D, H, W]`); `weight` is
/// `[out_channels, in_channels / groups, kD, kH, kW]`.
#[derive(crate::Module)]
#[module(extra_repr = "repr_args")]
pub struct Conv3d {
    core: ModuleCore,
    pub in_channels: usize,
    pub out_channels: usize,
    pub kernel_size: [usize; 3],
    #[module(skip)]
    pub options: Conv3dOptions,
    pub weight: Parameter,
    pub bias: Option<Parameter>,
}

conv_layer_methods!(Conv3d {
    options: Conv3dOptions,
    kernel: [usize; 3] => [usize; 3] = std::convert::identity,
    config: conv3d_config,
    transposed: false,
});

fn conv3d_config(cin: usize, cout: usize, k: [usize; 3], o: &Conv3dOptions) -> ConvConfig {
    ConvConfig {
        in_channels: cin,
        out_channels: cout,
        kernel_size: k.to_vec(),
        stride: o.stride.to_vec(),
        padding: o.padding.to_vec(),
        dilation: o.dilation.to_vec(),
        output_padding: vec![0; 3],
        groups: o.groups,
    }
}

impl Forward for Conv3d {
    type Output = Tensor;
    fn forward(&self, input: Tensor) -> Result<Tensor> {
        check_rank("Conv3d", &input, 5)?;
        let o = &self.options;
        Ok(functional::conv3d(
            &input,
            &self.weight,
            self.bias.as_deref(),
            o.stride,
            o.padding,
            o.dilation,
            o.groups,
        )?)
    }
}

options! {
    /// Options of [`ConvTranspose1d`]; `output_padding` adds length at the end of the output
    /// and must be smaller than the stride or the dilation.
    ConvTranspose1dOptions {
        stride: usize = 1,
        padding: usize = 0,
        output_padding: usize = 0,
        groups: usize = 1,
        bias: bool = true,
        dilation: usize = 1,
        dtype: DType = DType::F32,
        device: Device = Device::Cpu,
    }
}

/// Transposed 1-D convolution over `[N, C_in, L]` or unbatched `[C_in, L]`; `weight` is
/// `[in_channels, out_channels / groups, kernel_size]` as PyTorch's.
#[derive(crate::Module)]
#[module(extra_repr = "repr_args")]
pub struct ConvTranspose1d {
    core: ModuleCore,
    pub in_channels: usize,
    pub out_channels: usize,
    pub kernel_size: usize,
    #[module(skip)]
    pub options: ConvTranspose1dOptions,
    pub weight: Parameter,
    pub bias: Option<Parameter>,
}

/// PyTorch's check that the output padding is smaller than the stride or the dilation.
fn check_transpose1d_output_padding(o: &ConvTranspose1dOptions) -> Result<()> {
    if o.output_padding >= o.stride.max(o.dilation) {
        return Err(NnError::Invalid(format!(
            "ConvTranspose1d: output_padding ({}) must be smaller than either stride ({}) or dilation ({})",
            o.output_padding, o.stride, o.dilation
        )));
    }
    Ok(())
}

conv_layer_methods!(ConvTranspose1d {
    options: ConvTranspose1dOptions,
    kernel: usize => usize = std::convert::identity,
    config: transpose1d_config,
    transposed: true,
    extra_check: check_transpose1d_output_padding,
});

fn transpose1d_config(cin: usize, cout: usize, k: usize, o: &ConvTranspose1dOptions) -> ConvConfig {
    ConvConfig {
        in_channels: cin,
        out_channels: cout,
        kernel_size: vec![k],
        stride: vec![o.stride],
        padding: vec![o.padding],
        dilation: vec![o.dilation],
        output_padding: vec![o.output_padding],
        groups: o.groups,
    }
}

impl Forward for ConvTranspose1d {
    type Output = Tensor;
    fn forward(&self, input: Tensor) -> Result<Tensor> {
        check_rank("ConvTranspose1d", &input, 3)?;
        let channels = input.shape()[input.ndim() - 2];
        if channels != self.in_channels {
            return Err(NnError::Invalid(format!(
                "ConvTranspose1d: expected input with {} channels, but got input of size {:?}",
                self.in_channels,
                input.shape()
            )));
        }
        let o = &self.options;
        Ok(functional::conv_transpose1d(
            &input,
            &self.weight,
            self.bias.as_deref(),
            o.stride,
            o.padding,
            o.output_padding,
            o.groups,
            o.dilation,
        )?)
    }
}
