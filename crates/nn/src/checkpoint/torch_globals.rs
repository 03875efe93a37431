//! The only Python globals a checkpoint may name: `OrderedDict`, PyTorch's tensor rebuild
//! functions and its typed storage classes. Everything else (`os.system`, `builtins.eval`)
//! is refused, which is what makes unpickling an untrusted file safe. Quantized tensors add
//! their rebuild function, storage classes, quantization schemes and dtypes.

use crate::TorchDtype;
use tessera_tensor::DType;

/// A Python global that the unpickler accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Global {
    /// `collections.OrderedDict`: state dicts, `_metadata` and tensors' backward hooks.
    OrderedDict,
    /// `torch._utils._rebuild_tensor_v2(storage, offset, size, stride, requires_grad, hooks)`.
    RebuildTensorV2,
    /// `torch._utils._rebuild_parameter(data, requires_grad, hooks)`.
    RebuildParameter,
    /// `torch.FloatStorage` and friends: only ever the type tag of a persistent id.
    Storage(DType),
    /// `torch._utils._rebuild_qtensor(storage, offset, size, stride, quantizer_params,
    /// requires_grad, hooks)`.
    RebuildQTensor,
    /// `torch.QInt8Storage` and `torch.QUInt8Storage`: a quantized tensor's storage type tag.
    QStorage(TorchDtype),
    /// `torch.per_tensor_affine`, the first of a per-tensor quantizer's parameters.
    PerTensorAffine,
    /// `torch.per_channel_affine`, the first of a per-channel quantizer's parameters.
    PerChannelAffine,
    /// A `torch.dtype` object (`torch.qint8`).
    Dtype(TorchDtype),
}

impl Global {
    /// The allowed global `module.name`; `None` for every other global.
    pub(crate) fn resolve(module: &str, name: &str) -> Option<Global> {
        match (module, name) {
            ("collections", "OrderedDict") => Some(Global::OrderedDict),
            ("torch._utils", "_rebuild_tensor_v2") => Some(Global::RebuildTensorV2),
            ("torch._utils", "_rebuild_parameter") => Some(Global::RebuildParameter),
            ("torch._utils", "_rebuild_qtensor") => Some(Global::RebuildQTensor),
            ("torch", "QInt8Storage") => Some(Global::QStorage(TorchDtype::QInt8)),
            ("torch", "QUInt8Storage") => Some(Global::QStorage(TorchDtype::QUInt8)),
            ("torch", "per_tensor_affine") => Some(Global::PerTensorAffine),
            ("torch", "per_channel_affine") => Some(Global::PerChannelAffine),
            ("torch", "qint8") => Some(Global::Dtype(TorchDtype::QInt8)),
            ("torch", "quint8") => Some(Global::Dtype(TorchDtype::QUInt8)),
            ("torch", class) => DType::ALL
                .into_iter()
                .find(|&d| storage_class(d) == class)
                .map(Global::Storage),
            _ => None,
        }
    }

    /// `(module, name)` as a pickle `GLOBAL` spells it.
    pub(crate) fn path(self) -> (&'static str, &'static str) {
        match self {
            Global::OrderedDict => ("collections", "OrderedDict"),
            Global::RebuildTensorV2 => ("torch._utils", "_rebuild_tensor_v2"),
            Global::RebuildParameter => ("torch._utils", "_rebuild_parameter"),
            Global::Storage(dtype) => ("torch", storage_class(dtype)),
            Global::RebuildQTensor => ("torch._utils", "_rebuild_qtensor"),
            Global::QStorage(TorchDtype::QInt8) => ("torch", "QInt8Storage"),
            Global::QStorage(TorchDtype::QUInt8) => ("torch", "QUInt8Storage"),
            Global::PerTensorAffine => ("torch", "per_tensor_affine"),
            Global::PerChannelAffine => ("torch", "per_channel_affine"),
            Global::Dtype(dtype) => ("torch", dtype.name()),
        }
    }
}

/// The storage class `torch.save` names for `dtype`: `FloatStorage` for f32, and so on.
pub(crate) fn storage_class(dtype: DType) -> &'static str {
    match dtype {
        DType::F32 => "FloatStorage",
        DType::F64 => "DoubleStorage",
        DType::F16 => "HalfStorage",
        DType::BF16 => "BFloat16Storage",
        DType::I64 => "LongStorage",
        DType::I32 => "IntStorage",
        DType::I8 => "CharStorage",
        DType::U8 => "ByteStorage",
        DType::Bool => "BoolStorage",
    }
}
