//! Process groups: the world of processes a launcher started, and the collectives on tensors
//! (`all_reduce`, `broadcast`, `all_gather`, `reduce_scatter`, `barrier`) that every rank calls
//! in the same order, as `torch.distributed` does.

use crate::communicator::Communicator;
use crate::host_values::HostValues;
use crate::{Backend, DistributedError, LaunchInfo, ReduceOp, Result};
use std::sync::Arc;
use tessera_tensor::{Device, Tensor};

/// A handle on this process's world; clones share it. The engine shuts down (MPI finalises)
/// when the last handle is dropped.
#[derive(Clone)]
pub struct ProcessGroup {
    communicator: Arc<dyn Communicator>,
    /// The NCCL communicator behind `communicator`, whose collectives on CUDA tensors run on
    /// the device; `None` for the other backends.
    #[cfg(feature = "nccl")]
    nccl: Option<Arc<crate::nccl::NcclCommunicator>>,
}

/// Joins the world the launcher started, on `backend` (PyTorch's `init_process_group`). MPI
/// takes rank and world size from `mpirun` (and checks them against any launcher variables
/// that are set). A backend whose feature is off, or whose library or device is missing, is a
/// typed error. NCCL takes rank, world size and local rank (its GPU, `cuda:LOCAL_RANK`) from
/// the launcher's variables and the NCCL unique id from rank 0 at `MASTER_ADDR:MASTER_PORT`;
/// its collectives take CUDA tensors.
pub fn init_process_group(backend: Backend) -> Result<ProcessGroup> {
    let group = match backend {
        Backend::Mpi => ProcessGroup::host(mpi_communicator()?),
        Backend::Nccl => nccl_group()?,
        Backend::Single => ProcessGroup::single(),
    };
    group.check_launcher_agrees()?;
    Ok(group)
}

#[cfg(feature = "nccl")]
fn nccl_group() -> Result<ProcessGroup> {
    let nccl = crate::nccl::communicator()?;
    Ok(ProcessGroup {
        communicator: nccl.clone(),
        nccl: Some(nccl),
    })
}

#[cfg(not(feature = "nccl"))]
fn nccl_group() -> Result<ProcessGroup> {
    Err(DistributedError::FeatureDisabled {
        backend: Backend::Nccl,
        feature: "nccl",
    })
}

#[cfg(feature = "mpi")]
fn mpi_communicator() -> Result<Arc<dyn Communicator>> {
    Ok(Arc::new(crate::mpi_backend::MpiCommunicator::initialize()?))
}

#[cfg(not(feature = "mpi"))]
fn mpi_communicator() -> Result<Arc<dyn Communicator>> {
    Err(DistributedError::FeatureDisabled {
        backend: Backend::Mpi,
        feature: "mpi",
    })
}

impl ProcessGroup {
    /// A world of this one process, where every collective keeps the data as it is.
    pub fn single() -> ProcessGroup {
        Self::host(Arc::new(crate::single::SingleProcess))
    }

    /// A group whose collectives run on host buffers.
    fn host(communicator: Arc<dyn Communicator>) -> ProcessGroup {
        ProcessGroup {
            communicator,
            #[cfg(feature = "nccl")]
            nccl: None,
        }
    }

    /// Where this group's collectives take their tensors: `cuda:LOCAL_RANK` for NCCL, the
    /// CPU for the others.
    pub fn device(&self) -> Device {
        #[cfg(feature = "nccl")]
        if let Some(nccl) = &self.nccl {
            return nccl.device();
        }
        Device::Cpu
    }

    pub fn backend(&self) -> Backend {
        self.communicator.backend()
    }

    /// This process's rank, `0..world_size`.
    pub fn rank(&self) -> usize {
        self.communicator.rank()
    }

    pub fn world_size(&self) -> usize {
        self.communicator.world_size()
    }

    /// Refuses a world whose size differs from what the launcher's variables say (a process
    /// started outside `mpirun` while `torchrun` variables are set, for instance).
    fn check_launcher_agrees(&self) -> Result<()> {
        if self.backend() == Backend::Single {
            return Ok(());
        }
        if let Some(launch) = LaunchInfo::from_env()?
            && (launch.rank, launch.world_size) != (self.rank(), self.world_size())
        {
            return Err(DistributedError::Launcher(format!(
                "the {} world has this process as rank {} of {}, the launcher's variables say {} of {}",
                self.backend(),
                self.rank(),
                self.world_size(),
                launch.rank,
                launch.world_size
            )));
        }
        Ok(())
    }

    /// Combines `tensor` across ranks in place (float32 or float64; on NCCL also float16 and
    /// integers); every rank ends with the result.
    pub fn all_reduce(&self, tensor: &Tensor, op: ReduceOp) -> Result<()> {
        #[cfg(feature = "nccl")]
        if let Some(nccl) = &self.nccl {
            return nccl.all_reduce_tensor(tensor, op);
        }
        let mut values = HostValues::read_reducible(tensor, "all_reduce")?;
        self.all_reduce_values(&mut values, op)?;
        values.write_into(tensor, 0, "all_reduce")
    }

    /// [`ProcessGroup::all_reduce`] on host values (what gradient buckets reduce).
    pub(crate) fn all_reduce_values(&self, values: &mut HostValues, op: ReduceOp) -> Result<()> {
        self.communicator
            .all_reduce(values.buffer(), op.reduction())?;
        if op == ReduceOp::Average {
            values.scale(1.0 / self.world_size() as f64);
        }
        Ok(())
    }

    /// Copies rank `root`'s `tensor` into every rank's `tensor`, in place (any dtype).
    pub fn broadcast(&self, tensor: &Tensor, root: usize) -> Result<()> {
        #[cfg(feature = "nccl")]
        if let Some(nccl) = &self.nccl {
            return nccl.broadcast_tensor(tensor, root);
        }
        let mut values = HostValues::read(tensor, "broadcast")?;
        self.communicator.broadcast(values.buffer(), root)?;
        values.write_into(tensor, 0, "broadcast")
    }

    /// Every rank's `tensor`, in rank order (all ranks pass the same shape and dtype).
    pub fn all_gather(&self, tensor: &Tensor) -> Result<Vec<Tensor>> {
        #[cfg(feature = "nccl")]
        if let Some(nccl) = &self.nccl {
            return nccl.all_gather_tensor(tensor);
        }
        let mut send = HostValues::read(tensor, "all_gather")?;
        let mut recv = HostValues::zeros(tensor.dtype(), send.len() * self.world_size());
        self.communicator.all_gather(send.buffer(), recv.buffer())?;
        let shape = tensor.shape();
        (0..self.world_size())
            .map(|rank| {
                recv.slice_to_tensor(rank * send.len(), &shape, tensor.dtype(), "all_gather")
            })
            .collect()
    }

    /// Reduces `tensor` across ranks and returns this rank's block of the result: the first
    /// dimension is split into `world_size` equal blocks (PyTorch's `reduce_scatter_tensor`).
    pub fn reduce_scatter(&self, tensor: &Tensor, op: ReduceOp) -> Result<Tensor> {
        let shape = tensor.shape();
        let world = self.world_size();
        let Some(&rows) = shape.first().filter(|&&rows| rows.is_multiple_of(world)) else {
            return Err(DistributedError::invalid(
                "reduce_scatter",
                format!(
                    "the first dimension of shape {shape:?} does not split into {world} equal blocks"
                ),
            ));
        };
        let mut block_shape = shape.clone();
        block_shape[0] = rows / world;
        #[cfg(feature = "nccl")]
        if let Some(nccl) = &self.nccl {
            return nccl.reduce_scatter_tensor(tensor, &block_shape, op);
        }
        let mut send = HostValues::read_reducible(tensor, "reduce_scatter")?;
        let mut recv = HostValues::zeros(tensor.dtype(), send.len() / world);
        self.communicator
            .reduce_scatter(send.buffer(), recv.buffer(), op.reduction())?;
        if op == ReduceOp::Average {
            recv.scale(1.0 / world as f64);
        }
        recv.slice_to_tensor(0, &block_shape, tensor.dtype(), "reduce_scatter")
    }

    /// Returns once every rank has reached it.
    pub fn barrier(&self) -> Result<()> {
        self.communicator.barrier()
    }

    /// Ends every rank of the world with exit status `code` (MPI_Abort), so that the others do
    /// not wait forever in a collective this rank will never join.
    pub fn abort(&self, code: i32) -> ! {
        self.communicator.abort(code)
    }

    /// Tells every rank whether any rank failed: each rank passes its own outcome, and every
    /// rank gets an error when one of them did (an error all-reduce). Call it where all ranks
    /// meet, to stop together instead of leaving the others waiting.
    pub fn agree<T>(&self, outcome: Result<T>) -> Result<T> {
        let mut failed = HostValues::F64(vec![0.0; self.world_size()]);
        if outcome.is_err()
            && let HostValues::F64(flags) = &mut failed
        {
            flags[self.rank()] = 1.0;
        }
        self.all_reduce_values(&mut failed, ReduceOp::Max)?;
        let HostValues::F64(flags) = failed else {
            return outcome;
        };
        let failed: Vec<usize> = (0..flags.len()).filter(|&r| flags[r] > 0.0).collect();
        match outcome {
            Err(e) => Err(e),
            Ok(_) if !failed.is_empty() => Err(DistributedError::RemoteFailure {
                rank: self.rank(),
                failed,
            }),
            ok => ok,
        }
    }

    /// The value of `result`, or, on an error, the error printed with this rank and every rank
    /// of the world ended with status 1 (a distributed program's `main` wraps its run in it).
    pub fn exit_on_error<T, E: std::fmt::Display>(&self, result: std::result::Result<T, E>) -> T {
        match result {
            Ok(value) => value,
            Err(e) => {
                eprintln!("rank {}: error: {e}", self.rank());
                self.abort(1)
            }
        }
    }
}
