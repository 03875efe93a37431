//! The CPU backend's one error type: what went wrong building the ISA, rendering, verifying or
//! JIT-compiling a kernel, naming the kernel and keeping the cause.

/// Errors of the CPU backend.
#[derive(Debug, thiserror::Error)]
pub enum CpuError {
    /// The host ISA could not be detected or configured.
    #[error("the host ISA is not supported by cranelift: {message}")]
    Isa { message: String },
    /// A cranelift setting was refused.
    #[error("cranelift setting: {source}")]
    Setting {
        #[source]
        source: cranelift_codegen::settings::SetError,
    },
    /// Cranelift's verifier rejected a generated function: a bug of the renderer, reported
    /// with every verifier message and the function's text.
    #[error(
        "kernel {kernel}: the cranelift verifier rejected the generated code:\n{errors}\n{clif}"
    )]
    Verifier {
        kernel: String,
        errors: String,
        clif: String,
    },
    /// Declaring, defining or finalizing a function in the JIT module failed.
    #[error("kernel {kernel}: {source}")]
    Module {
        kernel: String,
        #[source]
        source: Box<cranelift_module::ModuleError>,
    },
    /// The kernel is invalid (its verifier), or running the program failed.
    #[error(transparent)]
    Kernel(#[from] tessera_kernel::KernelError),
}

/// Results of this crate.
pub type Result<T, E = CpuError> = std::result::Result<T, E>;
