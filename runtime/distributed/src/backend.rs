//! The engines a process group can run on, and the reductions collectives apply.

/// Which engine carries a process group's collectives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Backend {
    /// MPI (Open MPI through the `mpi` crate) for CPU processes started by `mpirun`.
    Mpi,
    /// NCCL (loaded at run time through cudarc) for GPU processes.
    Nccl,
    /// A world of one process: every collective is the identity. For running distributed
    /// code without a launcher.
    Single,
}

impl std::fmt::Display for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Backend::Mpi => "mpi",
            Backend::Nccl => "nccl",
            Backend::Single => "single",
        })
    }
}

/// How `all_reduce` and `reduce_scatter` combine the ranks' values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    Sum,
    /// The sum divided by the world size (what gradient averaging needs).
    Average,
    Max,
    Min,
}

/// What a communicator applies: averaging is a sum the process group then divides.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reduction {
    Sum,
    Max,
    Min,
}

impl ReduceOp {
    pub(crate) fn reduction(self) -> Reduction {
        match self {
            ReduceOp::Sum | ReduceOp::Average => Reduction::Sum,
            ReduceOp::Max => Reduction::Max,
            ReduceOp::Min => Reduction::Min,
        }
    }
}
