//! [`QuantizedTensor`]: an int8 tensor with its quantizer, the checkpoint value that stands
//! for one of PyTorch's quantized tensors (`torch.qint8`, per tensor or per channel affine)
//! and that `.pt` files hold as `torch._utils._rebuild_qtensor`.

use crate::{NnError, Result};
use tessera_tensor::{DType, Tensor};

/// How the integers of a [`QuantizedTensor`] map to reals: `real = scale * (q - zero_point)`.
#[derive(Debug, Clone)]
pub enum Quantizer {
    /// `torch.per_tensor_affine`: one scale and zero point.
    PerTensorAffine { scale: f64, zero_point: i64 },
    /// `torch.per_channel_affine`: a scale (f64) and zero point (i64) per index of `axis`,
    /// each a 1-d tensor. PyTorch stores symmetric per-channel weights in this form too.
    PerChannelAffine {
        scales: Tensor,
        zero_points: Tensor,
        axis: usize,
    },
}

/// A `torch.qint8` tensor: its integer values (`int_repr()`, i8) and its quantizer.
#[derive(Debug, Clone)]
pub struct QuantizedTensor {
    int_repr: Tensor,
    quantizer: Quantizer,
}

impl QuantizedTensor {
    /// `int_repr` (i8) quantized by `quantizer`. Per channel, the scales and zero points are
    /// converted to f64 and i64 and must have one entry per index of `axis`.
    pub fn new(int_repr: Tensor, quantizer: Quantizer) -> Result<Self> {
        if int_repr.dtype() != DType::I8 {
            return Err(NnError::Invalid(format!(
                "a qint8 tensor's integer values must be i8, got {:?}",
                int_repr.dtype()
            )));
        }
        let quantizer = match quantizer {
            Quantizer::PerTensorAffine { .. } => quantizer,
            Quantizer::PerChannelAffine {
                scales,
                zero_points,
                axis,
            } => {
                let shape = int_repr.shape();
                let channels = *shape.get(axis).ok_or_else(|| {
                    NnError::Invalid(format!(
                        "per-channel axis {axis} is out of range for shape {shape:?}"
                    ))
                })?;
                for (what, t) in [("scales", &scales), ("zero points", &zero_points)] {
                    if t.shape() != [channels] {
                        return Err(NnError::Invalid(format!(
                            "per-channel {what} must have shape [{channels}] (axis {axis} of {shape:?}), got {:?}",
                            t.shape()
                        )));
                    }
                }
                Quantizer::PerChannelAffine {
                    scales: scales.to_dtype(DType::F64)?,
                    zero_points: zero_points.to_dtype(DType::I64)?,
                    axis,
                }
            }
        };
        Ok(QuantizedTensor {
            int_repr,
            quantizer,
        })
    }

    /// The integer values, as `int_repr()`.
    pub fn int_repr(&self) -> &Tensor {
        &self.int_repr
    }

    pub fn quantizer(&self) -> &Quantizer {
        &self.quantizer
    }
}

/// A `torch.dtype` that checkpoints hold as a value and Tessera's tensors have no dtype
/// for: quantized linears keep theirs in `_packed_params.dtype`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TorchDtype {
    QInt8,
    QUInt8,
}

impl TorchDtype {
    /// The attribute of `torch` that names it (`torch.qint8`).
    pub fn name(self) -> &'static str {
        match self {
            TorchDtype::QInt8 => "qint8",
            TorchDtype::QUInt8 => "quint8",
        }
    }
}
