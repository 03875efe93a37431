//! The NCCL backend (the `nccl` feature): collectives on CUDA tensors between the GPUs of
//! every rank, with libnccl and libcuda loaded at run time by cudarc.
//!
//! `init_process_group(Backend::Nccl)` takes rank, world size and local rank from the
//! launcher's variables (`torchrun`'s `RANK`/`WORLD_SIZE`/`LOCAL_RANK`, or `mpirun`'s), uses
//! the GPU `cuda:LOCAL_RANK`, and agrees on the NCCL unique id through a TCP store at
//! `MASTER_ADDR:MASTER_PORT` served by rank 0 ([`store`]), as torchrun does. Where libcuda,
//! libnccl or the GPU is missing it is [`DistributedError::BackendUnavailable`], never a panic.

mod communicator;
mod launch;
mod operand;
mod store;
mod types;

pub(crate) use communicator::NcclCommunicator;

use crate::{Backend, DistributedError, Result};
use std::sync::Arc;
use std::time::Duration;
use tessera_cuda::{CudaDriver, SystemDriver};
use tessera_tensor::DeviceKind;
use tessera_tensor::backend::registered_backend;

/// How long ranks wait for each other to exchange the unique id.
const STORE_TIMEOUT: Duration = Duration::from_secs(300);

fn unavailable(reason: impl Into<String>) -> DistributedError {
    DistributedError::BackendUnavailable {
        backend: Backend::Nccl,
        reason: reason.into(),
    }
}

/// This rank's NCCL communicator.
pub(crate) fn communicator() -> Result<Arc<NcclCommunicator>> {
    // cudarc panics when a library it loads is absent: check for both first.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return Err(unavailable("the CUDA driver (libcuda) cannot be loaded"));
    }
    if !unsafe { cudarc::nccl::sys::is_culib_present() } {
        return Err(unavailable(
            "libnccl cannot be loaded (install NCCL or put it on LD_LIBRARY_PATH)",
        ));
    }
    let launch = launch::nccl_launch(|name| std::env::var(name).ok())?;
    let launch_info = launch.info;
    let driver = SystemDriver::new().map_err(|e| unavailable(e.to_string()))?;
    if launch_info.local_rank >= driver.device_count() {
        return Err(unavailable(format!(
            "local rank {} has no GPU: this host has {} (one process per GPU)",
            launch_info.local_rank,
            driver.device_count()
        )));
    }
    // CUDA tensors need the backend registered; keep one the program registered itself.
    if registered_backend(DeviceKind::Cuda).is_none() {
        tessera_cuda::init().map_err(|e| unavailable(e.to_string()))?;
    }
    let id = if launch_info.rank == 0 {
        let id = cudarc::nccl::result::get_uniqueid()
            .map_err(|e| unavailable(format!("ncclGetUniqueId: {e:?}")))?;
        let bytes: [u8; store::ID_BYTES] = id.internal.map(|c| c as u8);
        // A world of one has no one to tell: no port is opened.
        if launch_info.world_size > 1 {
            store::IdServer::bind(&launch.store)?.serve(
                &bytes,
                launch_info.world_size,
                STORE_TIMEOUT,
            )?;
        }
        bytes
    } else {
        store::fetch_id(&launch.store, STORE_TIMEOUT)?
    };
    Ok(Arc::new(NcclCommunicator::join(
        Box::new(driver),
        id,
        launch_info.rank,
        launch_info.world_size,
        launch_info.local_rank,
    )?))
}
