//! A world of one process: every collective leaves its data as it is. Distributed code runs
//! unchanged without a launcher, and it is the one-process baseline of scaling measurements.

use crate::communicator::{Communicator, HostBuffer, check_gather_lengths, mixed_dtypes};
use crate::{Backend, DistributedError, Reduction, Result};

/// The communicator of [`ProcessGroup::single`](crate::ProcessGroup::single).
pub(crate) struct SingleProcess;

impl Communicator for SingleProcess {
    fn backend(&self) -> Backend {
        Backend::Single
    }

    fn rank(&self) -> usize {
        0
    }

    fn world_size(&self) -> usize {
        1
    }

    fn all_reduce(&self, _buffer: HostBuffer<'_>, _reduction: Reduction) -> Result<()> {
        Ok(())
    }

    fn broadcast(&self, _buffer: HostBuffer<'_>, root: usize) -> Result<()> {
        if root == 0 {
            Ok(())
        } else {
            Err(DistributedError::invalid(
                "broadcast",
                format!("root rank {root} is outside a world of 1"),
            ))
        }
    }

    fn all_gather(&self, send: HostBuffer<'_>, recv: HostBuffer<'_>) -> Result<()> {
        check_gather_lengths(send.len(), recv.len(), 1)?;
        copy(send, recv, "all_gather")
    }

    fn reduce_scatter(
        &self,
        send: HostBuffer<'_>,
        recv: HostBuffer<'_>,
        _reduction: Reduction,
    ) -> Result<()> {
        check_gather_lengths(recv.len(), send.len(), 1)?;
        copy(send, recv, "reduce_scatter")
    }

    fn barrier(&self) -> Result<()> {
        Ok(())
    }

    fn abort(&self, code: i32) -> ! {
        std::process::exit(code)
    }
}

/// What a one-rank gather or scatter does: copies its own data.
fn copy(send: HostBuffer<'_>, recv: HostBuffer<'_>, op: &'static str) -> Result<()> {
    match (send, recv) {
        (HostBuffer::F32(s), HostBuffer::F32(r)) => r.copy_from_slice(s),
        (HostBuffer::F64(s), HostBuffer::F64(r)) => r.copy_from_slice(s),
        _ => return Err(mixed_dtypes(op)),
    }
    Ok(())
}
