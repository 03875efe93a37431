//! What an NCCL rank reads from its launcher's environment: its rank, the world size and its
//! GPU (`LOCAL_RANK`), and where rank 0 serves the unique id (`MASTER_ADDR:MASTER_PORT`).
//! Every missing or malformed variable is [`DistributedError::Launcher`] naming it.

use super::store::store_address;
use crate::{DistributedError, LaunchInfo, Result};

/// This rank's place in the NCCL world and the address of the unique-id store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NcclLaunch {
    pub(crate) info: LaunchInfo,
    /// `MASTER_ADDR:MASTER_PORT`; unused in a world of one.
    pub(crate) store: String,
}

/// Reads the launch of this rank through `lookup` (the process environment, or a map in
/// tests).
pub(crate) fn nccl_launch(lookup: impl Fn(&str) -> Option<String>) -> Result<NcclLaunch> {
    let info = LaunchInfo::from_lookup(&lookup)?.ok_or_else(|| {
        DistributedError::Launcher(
            "RANK and WORLD_SIZE are not set: the nccl backend runs one process per GPU started \
             by a launcher (torchrun's RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT, \
             or mpirun's OMPI_COMM_WORLD_* variables)"
                .into(),
        )
    })?;
    let store = store_address(&lookup)?;
    Ok(NcclLaunch { info, store })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |name| map.get(name).cloned()
    }

    fn launcher_error(vars: &[(&str, &str)]) -> String {
        match nccl_launch(env(vars)) {
            Err(e @ DistributedError::Launcher(_)) => e.to_string(),
            other => panic!("{vars:?}: expected a launcher error, got {other:?}"),
        }
    }

    #[test]
    fn torchrun_variables_give_rank_gpu_and_store() {
        let launch = nccl_launch(env(&[
            ("RANK", "5"),
            ("WORLD_SIZE", "8"),
            ("LOCAL_RANK", "1"),
            ("MASTER_ADDR", "node0"),
            ("MASTER_PORT", "29400"),
        ]))
        .unwrap();
        let info = LaunchInfo {
            rank: 5,
            world_size: 8,
            local_rank: 1,
        };
        assert_eq!(
            launch,
            NcclLaunch {
                info,
                store: "node0:29400".into()
            }
        );
    }

    #[test]
    fn mpirun_variables_work_with_the_default_store() {
        let launch = nccl_launch(env(&[
            ("OMPI_COMM_WORLD_RANK", "1"),
            ("OMPI_COMM_WORLD_SIZE", "2"),
            ("OMPI_COMM_WORLD_LOCAL_RANK", "1"),
        ]))
        .unwrap();
        assert_eq!((launch.info.rank, launch.info.local_rank), (1, 1));
        assert_eq!(launch.store, "127.0.0.1:29500");
    }

    #[test]
    fn missing_or_malformed_variables_are_errors_naming_them() {
        assert!(launcher_error(&[]).contains("RANK and WORLD_SIZE are not set"));
        assert!(launcher_error(&[("RANK", "0")]).contains("WORLD_SIZE is not"));
        assert!(launcher_error(&[("WORLD_SIZE", "2")]).contains("RANK is not"));
        let text = launcher_error(&[("RANK", "one"), ("WORLD_SIZE", "2")]);
        assert!(text.contains("RANK=\"one\""), "{text}");
        let text = launcher_error(&[("RANK", "0"), ("WORLD_SIZE", "0")]);
        assert!(text.contains("WORLD_SIZE=0"), "{text}");
        let text = launcher_error(&[("RANK", "0"), ("WORLD_SIZE", "2"), ("LOCAL_RANK", "x")]);
        assert!(text.contains("LOCAL_RANK=\"x\""), "{text}");
        let text = launcher_error(&[("RANK", "0"), ("WORLD_SIZE", "2"), ("MASTER_PORT", "")]);
        assert!(text.contains("MASTER_PORT"), "{text}");
    }
}
