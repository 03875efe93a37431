//! Every file of the fuzz corpus and every crash the fuzzers ever found, replayed through the
//! same entry points as the cargo-fuzz targets, so `cargo test` on stable keeps them fixed.

use tessera_fuzz_entries::{PeakAlloc, TARGETS, corpus_files};

#[global_allocator]
static ALLOC: PeakAlloc = PeakAlloc;

/// One target at a time: the heap counters are global, so a target replayed on another test
/// thread would count towards this one's peaks.
static ONE_TARGET_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn replay(name: &str) {
    let _alone = ONE_TARGET_AT_A_TIME
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let target = TARGETS
        .iter()
        .find(|t| t.name == name)
        .expect("a known target");
    let files = corpus_files(name);
    assert!(!files.is_empty(), "fuzz/corpus/{name} holds no files");
    let mut failures = Vec::new();
    let mut worst = (0.0f64, 0usize, 0usize);
    for file in &files {
        let bytes = std::fs::read(file).expect("a readable corpus file");
        match std::panic::catch_unwind(|| (target.entry)(&bytes)) {
            Ok(peak) => {
                let ratio = peak as f64 / bytes.len().max(1) as f64;
                if ratio > worst.0 {
                    worst = (ratio, peak, bytes.len());
                }
            }
            Err(panic) => {
                let message = panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                failures.push(format!("{}: {message}", file.display()));
            }
        }
    }
    // The figure README's "Fuzzing" section quotes (`--nocapture` shows it).
    println!(
        "{name}: {} inputs, largest heap peak per input byte {:.1} ({} bytes for {} bytes)",
        files.len(),
        worst.0,
        worst.1,
        worst.2
    );
    assert!(
        failures.is_empty(),
        "{} of {} inputs of {name} failed:\n{}",
        failures.len(),
        files.len(),
        failures.join("\n")
    );
}

#[test]
fn every_pt_corpus_file_and_crash_loads_or_errors_within_bounds() {
    replay("pt");
}

#[test]
fn every_safetensors_corpus_file_and_crash_loads_or_errors_within_bounds() {
    replay("safetensors");
}

#[test]
fn every_graph_text_corpus_file_and_crash_parses_or_errors_within_bounds() {
    replay("graph_text");
}

#[test]
fn every_artifact_corpus_file_and_crash_loads_or_errors_within_bounds() {
    replay("artifact");
}

#[test]
fn every_target_has_a_replay_test() {
    let names: Vec<&str> = TARGETS.iter().map(|t| t.name).collect();
    assert_eq!(names, ["pt", "safetensors", "graph_text", "artifact"]);
}
