//! The narrow seam between process groups and engines: collectives on flat host buffers.
//! Each backend (MPI, NCCL, a world of one) implements it; tensors never reach it.

use crate::{Backend, Reduction, Result};

/// A flat host buffer of one element type that collectives reduce and move; other dtypes
/// travel as float64 (exact for every float32, float16 and integer up to 2^53).
pub enum HostBuffer<'a> {
    F32(&'a mut [f32]),
    F64(&'a mut [f64]),
}

impl HostBuffer<'_> {
    pub fn len(&self) -> usize {
        match self {
            HostBuffer::F32(b) => b.len(),
            HostBuffer::F64(b) => b.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Collectives over every rank of one world. Calls are blocking and every rank must make the
/// same calls in the same order, as in MPI.
pub trait Communicator: Send + Sync {
    fn backend(&self) -> Backend;
    fn rank(&self) -> usize;
    fn world_size(&self) -> usize;
    /// Combines `buffer` element-wise across ranks; every rank ends with the result.
    fn all_reduce(&self, buffer: HostBuffer<'_>, reduction: Reduction) -> Result<()>;
    /// Copies `root`'s buffer into every rank's `buffer` (all ranks pass the same length).
    fn broadcast(&self, buffer: HostBuffer<'_>, root: usize) -> Result<()>;
    /// Concatenates every rank's `send` in rank order into `recv` (`world_size * send.len()`).
    fn all_gather(&self, send: HostBuffer<'_>, recv: HostBuffer<'_>) -> Result<()>;
    /// Reduces `send` (`world_size` equal blocks) across ranks and leaves block `rank` of the
    /// result in `recv`.
    fn reduce_scatter(
        &self,
        send: HostBuffer<'_>,
        recv: HostBuffer<'_>,
        reduction: Reduction,
    ) -> Result<()>;
    /// Returns once every rank has called it.
    fn barrier(&self) -> Result<()>;
    /// Ends every rank of the world with `code`, so that no rank waits forever for one that
    /// failed.
    fn abort(&self, code: i32) -> !;
}

/// Checks that a gather's receive buffer holds one send buffer per rank.
pub(crate) fn check_gather_lengths(send: usize, recv: usize, world_size: usize) -> Result<()> {
    if send.checked_mul(world_size) == Some(recv) {
        Ok(())
    } else {
        Err(crate::DistributedError::invalid(
            "gather",
            format!("{recv} elements received cannot hold {world_size} ranks of {send}"),
        ))
    }
}

/// The error of a collective given buffers of two element types.
pub(crate) fn mixed_dtypes(op: &'static str) -> crate::DistributedError {
    crate::DistributedError::invalid(op, "send and receive buffers have different dtypes")
}
