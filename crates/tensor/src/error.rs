//! The one error type of `tessera-tensor`: every failure names the op and the shapes involved.

use crate::{DType, Device};

/// Everything that can go wrong in tensor code that a caller's input can reach.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TensorError {
    /// Two operands whose shapes do not fit together.
    #[error("{op}: shape mismatch between {lhs:?} and {rhs:?}{}", detail_suffix(.detail))]
    ShapeMismatch {
        op: String,
        lhs: Vec<usize>,
        rhs: Vec<usize>,
        detail: String,
    },

    /// An argument out of range or otherwise invalid for this op.
    #[error("{op}: {msg}")]
    InvalidArgument { op: String, msg: String },

    /// The op has no kernel for this dtype.
    #[error("{op}: unsupported dtype {dtype}")]
    UnsupportedDType { op: String, dtype: DType },

    /// Operands of different dtypes where one dtype is required.
    #[error("{op}: dtype mismatch, expected {expected}, got {got}")]
    DTypeMismatch {
        op: String,
        expected: DType,
        got: DType,
    },

    /// The device does not exist or has no driver on this machine.
    #[error("device {device} is not available: {reason}")]
    DeviceUnavailable { device: Device, reason: String },

    /// The device's backend failed to copy or compute (a driver call failed, the device
    /// rejected a kernel); `source` is the backend's own error.
    #[error("{op}: the {backend} backend failed on {device}")]
    DeviceFailure {
        op: String,
        device: Device,
        backend: String,
        #[source]
        source: crate::backend::BackendError,
    },

    /// Operands on different devices.
    #[error("{op}: expected all tensors on one device, got {lhs} and {rhs}")]
    DeviceMismatch {
        op: String,
        lhs: Device,
        rhs: Device,
    },

    /// The backend of the tensors' device has no kernel for this op (or this copy).
    #[error("{op}: not supported on {device}: the {backend} backend has no kernel for it")]
    UnsupportedOnDevice {
        op: String,
        device: Device,
        backend: String,
    },

    /// The values of a meta (traced) tensor were needed: it has shapes and dtypes only.
    #[error(
        "{op}: the tensor is on the meta device and has no values; reading a traced value (branching on it, item(), to_vec()) cannot be traced"
    )]
    NoData { op: String },

    /// A shape whose element count, or size in bytes, does not fit in memory's address range
    /// (the product of the dimensions overflows).
    #[error("{op}: shape {shape:?} of {dtype} has more elements than memory can address")]
    ShapeOverflow {
        op: String,
        shape: Vec<usize>,
        dtype: DType,
    },

    /// The allocator could not provide a buffer of this size.
    #[error("{op}: cannot allocate {bytes} bytes for shape {shape:?}")]
    OutOfMemory {
        op: String,
        shape: Vec<usize>,
        bytes: usize,
    },

    /// A misuse of autograd (second backward through a freed graph, non-scalar root, ...).
    #[error("autograd: {0}")]
    Autograd(String),

    /// A backward op (the derivative of another op) was itself differentiated with respect to
    /// an input whose second derivative Tessera does not define.
    #[error("{op}: double backward with respect to input {input} is not supported")]
    NoDoubleBackward { op: String, input: usize },

    /// A post-accumulate-grad hook failed during backward; the hook's error is the cause.
    #[error("autograd: a post accumulate grad hook failed")]
    GradHook(#[source] crate::autograd::HookError),
}

fn detail_suffix(detail: &str) -> String {
    if detail.is_empty() {
        String::new()
    } else {
        format!(" ({detail})")
    }
}

impl TensorError {
    pub(crate) fn invalid(op: impl Into<String>, msg: impl Into<String>) -> Self {
        Self::InvalidArgument {
            op: op.into(),
            msg: msg.into(),
        }
    }

    pub(crate) fn shapes(
        op: impl Into<String>,
        lhs: &[usize],
        rhs: &[usize],
        detail: impl Into<String>,
    ) -> Self {
        Self::ShapeMismatch {
            op: op.into(),
            lhs: lhs.to_vec(),
            rhs: rhs.to_vec(),
            detail: detail.into(),
        }
    }

    pub(crate) fn dtype(op: impl Into<String>, dtype: DType) -> Self {
        Self::UnsupportedDType {
            op: op.into(),
            dtype,
        }
    }
}

/// `Result` with [`TensorError`].
pub type Result<T, E = TensorError> = std::result::Result<T, E>;
