//! Distributed data-parallel training for Tessera on the engines clusters already run: MPI
//! (Open MPI, the `mpi` feature) for CPU processes and NCCL (the `nccl` feature, loaded at run
//! time) for GPUs. What PyTorch's `torch.distributed` and `DistributedDataParallel` are for
//! Python.
//!
//! A training script calls [`init_process_group`], wraps its model in
//! [`DistributedDataParallel`], gives each rank its shard of the data with
//! [`DistributedSampler`], and runs as many copies of itself as `mpirun -np N` starts. Without a
//! launcher, [`ProcessGroup::single`] runs the same code as a world of one:
//!
//! ```
//! use tessera_distributed::{DistributedDataParallel, DistributedSampler, ProcessGroup};
//! use tessera_nn::layers::Linear;
//! use tessera_nn::{Call, ModuleExt};
//! use tessera_tensor::{DType, Tensor};
//!
//! let group = ProcessGroup::single();
//! let model = DistributedDataParallel::new(Linear::new(4, 2)?, &group)?;
//! let sampler = DistributedSampler::new(10, &group)?;
//! assert_eq!(sampler.indices().len(), 10);
//! let loss = model.call(Tensor::ones(&[3, 4], DType::F32)?)?.sum_all()?;
//! loss.backward()?;
//! assert!(model.module().weight.tensor().grad().is_some());
//! assert_eq!(model.state_dict()?.keys().next(), Some("module.weight"));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod backend;
mod communicator;
mod ddp;
mod error;
mod host_values;
mod launcher;
#[cfg(feature = "mpi")]
mod mpi_backend;
#[cfg(feature = "nccl")]
mod nccl;
mod process_group;
mod sampler;
mod single;
mod state_dict_prefix;

// tessera-cuda's emulated CUDA driver (PTX run on the CPU, memory bounds-checked), for the unit
// tests of DDP buckets on CUDA tensors where no GPU exists.
#[cfg(all(test, feature = "nccl"))]
#[path = "../../cuda/tests/emulated_driver/mod.rs"]
mod emulated_driver;
#[cfg(all(test, feature = "nccl"))]
#[path = "../../cuda/tests/emulator/mod.rs"]
mod emulator;

pub use backend::{Backend, ReduceOp, Reduction};
pub use communicator::{Communicator, HostBuffer};
pub use ddp::{
    Bucket, DEFAULT_BUCKET_CAP_BYTES, DdpOptions, DistributedDataParallel, NoSyncGuard, SyncStats,
    plan_buckets,
};
pub use error::{DistributedError, Result};
pub use launcher::LaunchInfo;
pub use process_group::{ProcessGroup, init_process_group};
pub use sampler::DistributedSampler;
pub use state_dict_prefix::consume_prefix_in_state_dict_if_present;
