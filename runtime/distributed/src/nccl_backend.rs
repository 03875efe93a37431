//! The NCCL backend's entry: finds libnccl and the CUDA driver at run time (cudarc loads both
//! dynamically), and reports a typed error where either is missing or the feature is off.

use crate::communicator::Communicator;
use crate::{Backend, DistributedError, Result};
use std::sync::Arc;

#[cfg(not(feature = "nccl"))]
pub(crate) fn communicator() -> Result<Arc<dyn Communicator>> {
    Err(DistributedError::FeatureDisabled {
        backend: Backend::Nccl,
        feature: "nccl",
    })
}

#[cfg(feature = "nccl")]
pub(crate) fn communicator() -> Result<Arc<dyn Communicator>> {
    let unavailable = |reason: &str| DistributedError::BackendUnavailable {
        backend: Backend::Nccl,
        reason: reason.into(),
    };
    // cudarc panics when a library it loads is absent: check for both first.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return Err(unavailable("the CUDA driver (libcuda) cannot be loaded"));
    }
    if !unsafe { cudarc::nccl::sys::is_culib_present() } {
        return Err(unavailable(
            "libnccl cannot be loaded (install NCCL or put it on LD_LIBRARY_PATH)",
        ));
    }
    Err(unavailable(
        "NCCL collectives on Tessera tensors need CUDA tensors, which this build does not have yet",
    ))
}
