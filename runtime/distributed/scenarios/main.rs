//! Multi-process checks of data-parallel training, one scenario per launch: tests/mpi.rs runs
//! `mpirun -np 2 ddp_scenarios SCENARIO` and expects every rank to print `SCENARIO ok` (or, for
//! `rank_error`, every rank to end with an error). Each rank also trains a one-process
//! reference on the whole batch, so equality is checked on every rank.

mod net;
mod scenarios;

use tessera_distributed::{Backend, init_process_group};

fn main() -> std::process::ExitCode {
    let scenario = std::env::args().nth(1).unwrap_or_default();
    let group = match init_process_group(Backend::Mpi) {
        Ok(group) => group,
        Err(e) => {
            eprintln!("error: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    let result = scenarios::run(&scenario, &group);
    group.exit_on_error(result);
    println!("rank {}: {scenario} ok", group.rank());
    std::process::ExitCode::SUCCESS
}
