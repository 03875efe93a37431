//! Data-parallel training across processes: each test starts `mpirun -np 2 --oversubscribe`
//! on the `ddp_scenarios` binary with one scenario and a time limit. Without the `mpi`
//! feature or without `mpirun` the tests print why they skip, unless `TESSERA_REQUIRE_MPI=1`
//! (set by `.ci/run`) makes that a failure.

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Long enough for a debug build of every scenario on a loaded 2-core machine; a rank that
/// waits for a failed one would never end.
const LIMIT: Duration = Duration::from_secs(240);

/// The scenario binary, built by cargo for this test when the `mpi` feature is on.
const SCENARIOS: Option<&str> = option_env!("CARGO_BIN_EXE_ddp_scenarios");

/// Runs `scenario` on two ranks, or returns `None` after printing why it cannot run here.
fn launch(scenario: &str) -> Option<Output> {
    // Cargo names the binary even when its required feature is off (and a stale build of it
    // may lie there): the feature decides.
    let (true, Some(binary)) = (cfg!(feature = "mpi"), SCENARIOS) else {
        return skip("tessera-distributed was built without the `mpi` feature");
    };
    if Command::new("mpirun").arg("--version").output().is_err() {
        return skip("mpirun is not installed (apt-get install openmpi-bin libopenmpi-dev)");
    }
    let mut child = Command::new("mpirun")
        .args(["--oversubscribe", "-np", "2", binary, scenario])
        // Open MPI refuses to run as root without these (CI runs as root).
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("mpirun starts");
    let start = Instant::now();
    while child.try_wait().expect("mpirun can be polled").is_none() {
        if start.elapsed() > LIMIT {
            let _ = child.kill();
            let output = child.wait_with_output().expect("mpirun output");
            panic!(
                "{scenario}: still running after {LIMIT:?} (a rank hangs)\n{}",
                text(&output)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Some(child.wait_with_output().expect("mpirun output"))
}

fn skip(reason: &str) -> Option<Output> {
    if std::env::var("TESSERA_REQUIRE_MPI").as_deref() == Ok("1") {
        panic!("TESSERA_REQUIRE_MPI=1 but the MPI tests cannot run: {reason}");
    }
    eprintln!("skipped: {reason}");
    None
}

fn text(output: &Output) -> String {
    format!(
        "stdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// Runs `scenario` and checks that both ranks report it passed.
fn passes_on_two_ranks(scenario: &str) {
    let Some(output) = launch(scenario) else {
        return;
    };
    let stdout = String::from_utf8_lossy(&output.stdout);
    for rank in 0..2 {
        assert!(
            stdout.contains(&format!("rank {rank}: {scenario} ok")),
            "{scenario} failed on rank {rank}\n{}",
            text(&output)
        );
    }
    assert!(output.status.success(), "{}", text(&output));
}

#[test]
fn two_ranks_on_half_batches_match_one_process_after_20_sgd_steps() {
    passes_on_two_ranks("sgd_matches_one_process");
}

#[test]
fn two_ranks_on_half_batches_match_one_process_after_20_adam_steps() {
    passes_on_two_ranks("adam_matches_one_process");
}

#[test]
fn buckets_are_all_reduced_in_order_while_backward_runs() {
    passes_on_two_ranks("buckets_in_order");
}

#[test]
fn distributed_sampler_gives_disjoint_shards_reshuffled_per_epoch() {
    passes_on_two_ranks("sampler");
}

#[test]
fn state_dict_keys_carry_module_prefix_and_load_into_the_bare_module() {
    passes_on_two_ranks("state_dict");
}

#[test]
fn no_sync_accumulates_locally_until_the_next_synchronised_backward() {
    passes_on_two_ranks("no_sync");
}

#[test]
fn agree_gives_every_rank_an_error_when_one_rank_failed() {
    passes_on_two_ranks("agree");
}

#[test]
fn an_error_on_one_rank_ends_every_rank_with_an_error() {
    let Some(output) = launch("rank_error") else {
        return;
    };
    assert!(!output.status.success(), "{}", text(&output));
    let all = text(&output);
    assert!(all.contains("rank 1: error:"), "{all}");
    assert!(!all.contains("rank_error ok"), "a rank finished: {all}");
}
