//! Where device implementations of the steps the PTX renderer does not generate plug in: a
//! kernel that starts with an external GEMM or convolution call ([`tessera_kernel::GemmCall`],
//! [`tessera_kernel::ConvCall`]), and an external step that runs an op's eager kernel. Today
//! there is none, so an op whose program has such a step is unsupported on the device. A
//! device GEMM (the generated PTX GEMM of `gemm*`, or cuBLAS) becomes an arm here returning
//! the launches that compute the call into the kernel's scratch buffer, after which the
//! kernel's rendered epilogue runs as usual.

use tessera_kernel::{Kernel, Step};

/// Why `step` cannot run as rendered kernels alone (its external part), or `None` when it
/// can.
pub(crate) fn external_part(step: &Step) -> Option<String> {
    match step {
        Step::Kernel { kernel, .. } => external_call(kernel),
        Step::External { node, call, .. } => {
            Some(format!("%{node} runs an eager kernel ({call:?})"))
        }
    }
}

fn external_call(kernel: &Kernel) -> Option<String> {
    if kernel.gemm.is_some() {
        return Some(format!("{} starts with an external GEMM call", kernel.name));
    }
    if kernel.conv.is_some() {
        return Some(format!(
            "{} starts with an external convolution call",
            kernel.name
        ));
    }
    None
}
