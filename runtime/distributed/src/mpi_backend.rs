//! The MPI backend: collectives of `MPI_COMM_WORLD` through the `mpi` crate (rsmpi), for CPU
//! processes started by `mpirun`. MPI is initialised once per process with
//! `MPI_THREAD_SERIALIZED`: a mutex makes sure one thread at a time calls MPI, so that data
//! parallelism can run its all-reduces on a communication thread.

use crate::communicator::{Communicator, HostBuffer, mixed_dtypes};
use crate::{Backend, DistributedError, Reduction, Result};
use mpi::collective::SystemOperation;
use mpi::environment::{Threading, Universe};
use mpi::topology::SimpleCommunicator;
use mpi::traits::{Communicator as _, CommunicatorCollectives, Root};
use std::sync::Mutex;

/// `MPI_COMM_WORLD` of an initialised MPI; dropping it finalises MPI.
pub(crate) struct MpiCommunicator {
    universe: Mutex<Universe>,
    rank: usize,
    world_size: usize,
}

impl MpiCommunicator {
    /// Initialises MPI (the launcher's rank and world size come from `mpirun`).
    pub(crate) fn initialize() -> Result<MpiCommunicator> {
        let Some((universe, threading)) = mpi::initialize_with_threading(Threading::Serialized)
        else {
            return Err(DistributedError::AlreadyInitialized {
                backend: Backend::Mpi,
            });
        };
        if threading < Threading::Serialized {
            return Err(DistributedError::BackendUnavailable {
                backend: Backend::Mpi,
                reason: format!(
                    "this MPI provides thread level {threading:?}, Tessera needs Serialized"
                ),
            });
        }
        let world = universe.world();
        let (rank, world_size) = (world.rank(), world.size());
        Ok(MpiCommunicator {
            universe: Mutex::new(universe),
            rank: usize::try_from(rank).unwrap_or(0),
            world_size: usize::try_from(world_size).unwrap_or(1),
        })
    }

    /// Runs `f` on the world communicator while holding the lock that serialises MPI calls.
    fn with_world<R>(&self, f: impl FnOnce(&SimpleCommunicator) -> R) -> R {
        let universe = self.universe.lock().unwrap_or_else(|e| e.into_inner());
        f(&universe.world())
    }
}

fn operation(reduction: Reduction) -> SystemOperation {
    match reduction {
        Reduction::Sum => SystemOperation::sum(),
        Reduction::Max => SystemOperation::max(),
        Reduction::Min => SystemOperation::min(),
    }
}

fn root_rank(root: usize, world_size: usize) -> Result<i32> {
    i32::try_from(root)
        .ok()
        .filter(|_| root < world_size)
        .ok_or_else(|| {
            DistributedError::invalid(
                "broadcast",
                format!("root rank {root} is outside a world of {world_size}"),
            )
        })
}

impl Communicator for MpiCommunicator {
    fn backend(&self) -> Backend {
        Backend::Mpi
    }

    fn rank(&self) -> usize {
        self.rank
    }

    fn world_size(&self) -> usize {
        self.world_size
    }

    fn all_reduce(&self, buffer: HostBuffer<'_>, reduction: Reduction) -> Result<()> {
        let op = operation(reduction);
        self.with_world(|world| match buffer {
            HostBuffer::F32(b) => {
                let send = b.to_vec();
                world.all_reduce_into(&send[..], b, op);
            }
            HostBuffer::F64(b) => {
                let send = b.to_vec();
                world.all_reduce_into(&send[..], b, op);
            }
        });
        Ok(())
    }

    fn broadcast(&self, buffer: HostBuffer<'_>, root: usize) -> Result<()> {
        let root = root_rank(root, self.world_size)?;
        self.with_world(|world| {
            let process = world.process_at_rank(root);
            match buffer {
                HostBuffer::F32(b) => process.broadcast_into(b),
                HostBuffer::F64(b) => process.broadcast_into(b),
            }
        });
        Ok(())
    }

    fn all_gather(&self, send: HostBuffer<'_>, recv: HostBuffer<'_>) -> Result<()> {
        crate::communicator::check_gather_lengths(send.len(), recv.len(), self.world_size)?;
        self.with_world(|world| match (send, recv) {
            (HostBuffer::F32(s), HostBuffer::F32(r)) => {
                world.all_gather_into(&s[..], r);
                Ok(())
            }
            (HostBuffer::F64(s), HostBuffer::F64(r)) => {
                world.all_gather_into(&s[..], r);
                Ok(())
            }
            _ => Err(mixed_dtypes("all_gather")),
        })
    }

    fn reduce_scatter(
        &self,
        send: HostBuffer<'_>,
        recv: HostBuffer<'_>,
        reduction: Reduction,
    ) -> Result<()> {
        crate::communicator::check_gather_lengths(recv.len(), send.len(), self.world_size)?;
        let op = operation(reduction);
        self.with_world(|world| match (send, recv) {
            (HostBuffer::F32(s), HostBuffer::F32(r)) => {
                world.reduce_scatter_block_into(&s[..], r, op);
                Ok(())
            }
            (HostBuffer::F64(s), HostBuffer::F64(r)) => {
                world.reduce_scatter_block_into(&s[..], r, op);
                Ok(())
            }
            _ => Err(mixed_dtypes("reduce_scatter")),
        })
    }

    fn barrier(&self) -> Result<()> {
        self.with_world(|world| world.barrier());
        Ok(())
    }

    fn abort(&self, code: i32) -> ! {
        // No lock: another thread may hold it inside a collective that will never finish.
        SimpleCommunicator::world().abort(code)
    }
}
