//! Convolution layers: `Conv1d`, `Conv2d` and `ConvTranspose2d` (the gradient of a conv2d
//! with respect to its input, run through the tensor crate's `ConvOp::BackwardInput`).

use super::conv_layer::conv_layer_methods;
use super::options::{Size2, options};
use super::python::py_tuple;
use crate::{Forward, ModuleCore, NnError, Parameter, Result};
use tessera_tensor::op::{ConvOp, ConvParams};
use tessera_tensor::{DType, Device, Op, Tensor, functional};

options! {
    /// Options of [`Conv1d`].
    Conv1dOptions {
        stride: usize = 1,
        padding: usize = 0,
        dilation: usize = 1,
        groups: usize = 1,
        bias: bool = true,
        dtype: DType = DType::F32,
        device: Device = Device::Cpu,
    }
}

options! {
    /// Options of [`Conv2d`]; sizes are an `int` or a `(height, width)` pair.
    Conv2dOptions {
        stride: Size2 = Size2::Int(1),
        padding: Size2 = Size2::Int(0),
        dilation: Size2 = Size2::Int(1),
        groups: usize = 1,
        bias: bool = true,
        dtype: DType = DType::F32,
        device: Device = Device::Cpu,
    }
}

options! {
    /// Options of [`ConvTranspose2d`]; `output_padding` adds rows and columns on one side of
    /// the output and must be smaller than the stride.
    ConvTranspose2dOptions {
        stride: Size2 = Size2::Int(1),
        padding: Size2 = Size2::Int(0),
        output_padding: Size2 = Size2::Int(0),
        groups: usize = 1,
        bias: bool = true,
        dilation: Size2 = Size2::Int(1),
        dtype: DType = DType::F32,
        device: Device = Device::Cpu,
    }
}

/// Hyper-parameters every convolution prints, as tuples (PyTorch's `_ConvNd`).
#[derive(Debug, Clone, PartialEq)]
pub(super) struct ConvConfig {
    pub(super) in_channels: usize,
    pub(super) out_channels: usize,
    pub(super) kernel_size: Vec<usize>,
    pub(super) stride: Vec<usize>,
    pub(super) padding: Vec<usize>,
    pub(super) dilation: Vec<usize>,
    pub(super) output_padding: Vec<usize>,
    pub(super) groups: usize,
}

impl ConvConfig {
    /// Checks channels against groups and that no size is zero; `layer` names the error.
    pub(super) fn check(&self, layer: &str) -> Result<()> {
        let invalid = |msg: String| Err(NnError::Invalid(format!("{layer}: {msg}")));
        if self.groups == 0 {
            return invalid("groups must be a positive integer".into());
        }
        if !self.in_channels.is_multiple_of(self.groups) {
            return invalid(format!(
                "in_channels ({}) must be divisible by groups ({})",
                self.in_channels, self.groups
            ));
        }
        if !self.out_channels.is_multiple_of(self.groups) {
            return invalid(format!(
                "out_channels ({}) must be divisible by groups ({})",
                self.out_channels, self.groups
            ));
        }
        if self.kernel_size.contains(&0) || self.stride.contains(&0) || self.dilation.contains(&0) {
            return invalid(format!(
                "kernel_size {:?}, stride {:?} and dilation {:?} must be positive",
                self.kernel_size, self.stride, self.dilation
            ));
        }
        Ok(())
    }

    /// The weight's shape: `[out, in / groups, k...]`, or `[in, out / groups, k...]` when
    /// `transposed`.
    pub(super) fn weight_shape(&self, transposed: bool) -> Vec<usize> {
        let (first, second) = if transposed {
            (self.in_channels, self.out_channels)
        } else {
            (self.out_channels, self.in_channels)
        };
        let mut shape = vec![first, second / self.groups];
        shape.extend_from_slice(&self.kernel_size);
        shape
    }

    /// PyTorch's `_ConvNd.extra_repr`: defaults other than kernel size and stride are omitted.
    pub(super) fn repr(&self, has_bias: bool) -> String {
        let mut s = format!(
            "{}, {}, kernel_size={}, stride={}",
            self.in_channels,
            self.out_channels,
            py_tuple(&self.kernel_size),
            py_tuple(&self.stride)
        );
        if self.padding.iter().any(|&p| p != 0) {
            s += &format!(", padding={}", py_tuple(&self.padding));
        }
        if self.dilation.iter().any(|&d| d != 1) {
            s += &format!(", dilation={}", py_tuple(&self.dilation));
        }
        if self.output_padding.iter().any(|&p| p != 0) {
            s += &format!(", output_padding={}", py_tuple(&self.output_padding));
        }
        if self.groups != 1 {
            s += &format!(", groups={}", self.groups);
        }
        if !has_bias {
            s += ", bias=False";
        }
        s
    }
}

/// The input rank a layer accepts, batched or not; otherwise an error naming the layer.
pub(super) fn check_rank(layer: &str, input: &Tensor, batched: usize) -> Result<()> {
    let rank = input.ndim();
    if rank == batched || rank + 1 == batched {
        return Ok(());
    }
    Err(NnError::Invalid(format!(
        "{layer}: expected {}D (unbatched) or {batched}D (batched) input, but got input of size {:?}",
        batched - 1,
        input.shape()
    )))
}

/// 1-D convolution over `[N, C_in, L]` (or unbatched `[C_in, L]`); `weight` is
/// `[out_channels, in_channels / groups, kernel_size]`.
#[derive(crate::Module)]
#[module(extra_repr = "repr_args")]
pub struct Conv1d {
    core: ModuleCore,
    pub in_channels: usize,
    pub out_channels: usize,
    pub kernel_size: usize,
    #[module(skip)]
    pub options: Conv1dOptions,
    pub weight: Parameter,
    pub bias: Option<Parameter>,
}

conv_layer_methods!(Conv1d {
    options: Conv1dOptions,
    kernel: usize => usize = std::convert::identity,
    config: conv1d_config,
    transposed: false,
});

fn conv1d_config(cin: usize, cout: usize, k: usize, o: &Conv1dOptions) -> ConvConfig {
    ConvConfig {
        in_channels: cin,
        out_channels: cout,
        kernel_size: vec![k],
        stride: vec![o.stride],
        padding: vec![o.padding],
        dilation: vec![o.dilation],
        output_padding: vec![0],
        groups: o.groups,
    }
}

impl Forward for Conv1d {
    type Output = Tensor;
    fn forward(&self, input: Tensor) -> Result<Tensor> {
        check_rank("Conv1d", &input, 3)?;
        let o = &self.options;
        Ok(functional::conv1d(
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

/// 2-D convolution over `[N, C_in, H, W]` (or unbatched `[C_in, H, W]`); `weight` is
/// `[out_channels, in_channels / groups, kH, kW]`.
#[derive(crate::Module)]
#[module(extra_repr = "repr_args")]
pub struct Conv2d {
    core: ModuleCore,
    pub in_channels: usize,
    pub out_channels: usize,
    pub kernel_size: [usize; 2],
    #[module(skip)]
    pub options: Conv2dOptions,
    pub weight: Parameter,
    pub bias: Option<Parameter>,
}

/// The config of a 2-D convolution; `sizes` are stride, padding, dilation, output padding.
fn conv2d_config(
    cin: usize,
    cout: usize,
    k: [usize; 2],
    sizes: [Size2; 4],
    groups: usize,
) -> ConvConfig {
    let [stride, padding, dilation, output_padding] = sizes;
    ConvConfig {
        in_channels: cin,
        out_channels: cout,
        kernel_size: k.to_vec(),
        stride: stride.pair().to_vec(),
        padding: padding.pair().to_vec(),
        dilation: dilation.pair().to_vec(),
        output_padding: output_padding.pair().to_vec(),
        groups,
    }
}

/// The config of a [`Conv2d`]: no output padding.
fn conv2d_layer_config(cin: usize, cout: usize, k: [usize; 2], o: &Conv2dOptions) -> ConvConfig {
    let sizes = [o.stride, o.padding, o.dilation, Size2::Int(0)];
    conv2d_config(cin, cout, k, sizes, o.groups)
}

/// A 2-D kernel size given as one size or a pair, as `[height, width]`.
fn kernel_pair(kernel_size: impl Into<Size2>) -> [usize; 2] {
    kernel_size.into().pair()
}

conv_layer_methods!(Conv2d {
    options: Conv2dOptions,
    kernel: impl Into<Size2> => [usize; 2] = kernel_pair,
    config: conv2d_layer_config,
    transposed: false,
});

impl Forward for Conv2d {
    type Output = Tensor;
    fn forward(&self, input: Tensor) -> Result<Tensor> {
        check_rank("Conv2d", &input, 4)?;
        let o = &self.options;
        Ok(functional::conv2d(
            &input,
            &self.weight,
            self.bias.as_deref(),
            o.stride.pair(),
            o.padding.pair(),
            o.dilation.pair(),
            o.groups,
        )?)
    }
}

/// Transposed 2-D convolution (the gradient of a conv2d with respect to its input) over
/// `[N, C_in, H, W]` or unbatched `[C_in, H, W]`; `weight` is
/// `[in_channels, out_channels / groups, kH, kW]` as PyTorch's. The output size is
/// `(H - 1) * stride - 2 * padding + dilation * (k - 1) + output_padding + 1`.
#[derive(crate::Module)]
#[module(extra_repr = "repr_args")]
pub struct ConvTranspose2d {
    core: ModuleCore,
    pub in_channels: usize,
    pub out_channels: usize,
    pub kernel_size: [usize; 2],
    #[module(skip)]
    pub options: ConvTranspose2dOptions,
    pub weight: Parameter,
    pub bias: Option<Parameter>,
}

/// The config of a [`ConvTranspose2d`].
fn transpose2d_config(
    cin: usize,
    cout: usize,
    k: [usize; 2],
    o: &ConvTranspose2dOptions,
) -> ConvConfig {
    let sizes = [o.stride, o.padding, o.dilation, o.output_padding];
    conv2d_config(cin, cout, k, sizes, o.groups)
}

/// PyTorch's check that each output padding is smaller than its stride.
fn check_transpose2d_output_padding(o: &ConvTranspose2dOptions) -> Result<()> {
    let (stride, output_padding) = (o.stride.pair(), o.output_padding.pair());
    if output_padding[0] >= stride[0] || output_padding[1] >= stride[1] {
        return Err(NnError::Invalid(format!(
            "ConvTranspose2d: output_padding {output_padding:?} must be smaller than stride {stride:?}"
        )));
    }
    Ok(())
}

conv_layer_methods!(ConvTranspose2d {
    options: ConvTranspose2dOptions,
    kernel: impl Into<Size2> => [usize; 2] = kernel_pair,
    config: transpose2d_config,
    transposed: true,
    extra_check: check_transpose2d_output_padding,
});

impl ConvTranspose2d {
    /// `[H_out, W_out]` for an input plane of `[h, w]`, or an error when it is not positive.
    fn output_size(&self, input: &Tensor, [h, w]: [usize; 2]) -> Result<[usize; 2]> {
        let o = &self.options;
        let (s, p, d, op) = (
            o.stride.pair(),
            o.padding.pair(),
            o.dilation.pair(),
            o.output_padding.pair(),
        );
        let size = |i: usize, n: usize| {
            let full = (n as i64 - 1) * s[i] as i64
                + (d[i] * (self.kernel_size[i] - 1)) as i64
                + op[i] as i64
                + 1;
            full - 2 * p[i] as i64
        };
        let (oh, ow) = (size(0, h), size(1, w));
        if h == 0 || w == 0 || oh <= 0 || ow <= 0 {
            return Err(NnError::Invalid(format!(
                "ConvTranspose2d: input of size {:?} gives a non-positive output size ({oh} x {ow})",
                input.shape()
            )));
        }
        Ok([oh as usize, ow as usize])
    }
}

impl Forward for ConvTranspose2d {
    type Output = Tensor;
    fn forward(&self, input: Tensor) -> Result<Tensor> {
        check_rank("ConvTranspose2d", &input, 4)?;
        let unbatched = input.ndim() == 3;
        let x = if unbatched {
            input.unsqueeze(0)?
        } else {
            input.clone()
        };
        let shape = x.shape();
        if shape[1] != self.in_channels {
            return Err(NnError::Invalid(format!(
                "ConvTranspose2d: expected input with {} channels, but got input of size {:?}",
                self.in_channels,
                input.shape()
            )));
        }
        let o = &self.options;
        let input_size = self.output_size(&input, [shape[2], shape[3]])?;
        let params = ConvParams::conv2d(
            o.stride.pair(),
            o.padding.pair(),
            o.dilation.pair(),
            o.groups,
        );
        let op = Op::Conv(ConvOp::BackwardInput { params, input_size });
        let mut y = op.apply1(&[&x, &self.weight])?;
        if let Some(bias) = &self.bias {
            y = y.add(&bias.reshape(&[1, self.out_channels, 1, 1])?)?;
        }
        Ok(if unbatched { y.squeeze_dim(0)? } else { y })
    }
}
