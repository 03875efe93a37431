//! The rank and world size a launcher gives a process: `mpirun` (Open MPI's `OMPI_COMM_WORLD_*`,
//! MPICH's `PMI_*`) or `torchrun`'s `RANK` / `WORLD_SIZE` / `LOCAL_RANK`.

use crate::{DistributedError, Result};

/// Where this process sits in the world, as its launcher says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaunchInfo {
    pub rank: usize,
    pub world_size: usize,
    /// The rank among the processes of this host (which GPU a process takes).
    pub local_rank: usize,
}

/// Variable names per launcher: rank, world size, local rank.
const LAUNCHERS: [(&str, &str, &str); 3] = [
    (
        "OMPI_COMM_WORLD_RANK",
        "OMPI_COMM_WORLD_SIZE",
        "OMPI_COMM_WORLD_LOCAL_RANK",
    ),
    ("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"),
    ("RANK", "WORLD_SIZE", "LOCAL_RANK"),
];

impl LaunchInfo {
    /// Reads the first launcher's variables that are set; `None` when no launcher started this
    /// process. A variable that is set but malformed, or a rank without its world size (or
    /// the reverse), is [`DistributedError::Launcher`] naming the variable.
    pub fn from_env() -> Result<Option<LaunchInfo>> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// [`LaunchInfo::from_env`] over any variable lookup (tests pass a map).
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Option<LaunchInfo>> {
        for (rank_var, size_var, local_var) in LAUNCHERS {
            let (rank, size) = match (lookup(rank_var), lookup(size_var)) {
                (Some(rank), Some(size)) => (rank, size),
                (None, None) => continue,
                (Some(_), None) => return Err(half_set(rank_var, size_var)),
                (None, Some(_)) => return Err(half_set(size_var, rank_var)),
            };
            let rank = parse(rank_var, &rank)?;
            let world_size = parse(size_var, &size)?;
            if world_size == 0 || rank >= world_size {
                return Err(DistributedError::Launcher(format!(
                    "{rank_var}={rank} is outside {size_var}={world_size}"
                )));
            }
            let local_rank = match lookup(local_var) {
                Some(local) => parse(local_var, &local)?,
                None => rank,
            };
            return Ok(Some(LaunchInfo {
                rank,
                world_size,
                local_rank,
            }));
        }
        Ok(None)
    }
}

/// One of a launcher's pair of variables without the other: a launch set up by hand that
/// forgot one, which would otherwise silently run as a world of one.
fn half_set(set: &str, missing: &str) -> DistributedError {
    DistributedError::Launcher(format!(
        "{set} is set but {missing} is not: a launcher sets both"
    ))
}

fn parse(name: &str, value: &str) -> Result<usize> {
    value.trim().parse().map_err(|e| {
        DistributedError::Launcher(format!("{name}={value:?} is not a rank count: {e}"))
    })
}
