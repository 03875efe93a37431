//! The CUDA backend's one error type: what could not be rendered, found, loaded or launched,
//! naming the kernel and keeping the driver's message.

/// Errors of the CUDA backend.
#[derive(Debug, thiserror::Error)]
pub enum CudaError {
    /// The kernel uses something the PTX renderer does not render yet (an external GEMM or
    /// convolution call, a bool buffer, a domain too large for the index arithmetic).
    #[error("kernel {kernel}: the PTX renderer does not support {what} yet")]
    Unsupported { kernel: String, what: String },
    /// No usable CUDA driver or device: libcuda is absent, or the driver found no device.
    #[error("no CUDA device available: {reason}")]
    DeviceUnavailable { reason: String },
    /// A driver call failed.
    #[error("CUDA driver call {call} failed: {code}")]
    Driver { call: &'static str, code: String },
    /// The driver's JIT rejected a kernel's PTX; `log` is its error log, which names the line.
    #[error("kernel {kernel}: the CUDA driver rejected its PTX ({code}):\n{log}")]
    ModuleRejected {
        kernel: String,
        code: String,
        log: String,
    },
    /// A launch was given buffers that do not match the kernel's parameters.
    #[error("kernel {kernel}: {message}")]
    Launch { kernel: String, message: String },
    /// The driver could not allocate `bytes` bytes on device `device`, even after the caching
    /// allocator returned its cached blocks.
    #[error("cuda:{device}: out of memory allocating {bytes} bytes ({code})")]
    OutOfMemory {
        device: usize,
        bytes: usize,
        code: String,
    },
    /// A handle (device pointer, module, function) the driver does not know, or a copy or
    /// launch outside the memory it allocated.
    #[error("{call}: {message}")]
    InvalidUse { call: &'static str, message: String },
    /// The one-op graph of an eager op could not be built.
    #[error("building the graph of {op}")]
    OpGraph {
        op: String,
        #[source]
        source: tessera_fx::FxError,
    },
    /// A tensor-level failure (registering the backend, building an op's graph).
    #[error(transparent)]
    Tensor(#[from] tessera_tensor::TensorError),
    /// The kernel is invalid (its verifier).
    #[error(transparent)]
    Kernel(#[from] tessera_kernel::KernelError),
}

/// Results of this crate.
pub type Result<T, E = CudaError> = std::result::Result<T, E>;
