//! The fuzz targets by name, with their entry points, and the files of their corpus and crash
//! folders under `fuzz/` that the replay test runs.

use std::path::PathBuf;

/// One fuzz target: its cargo-fuzz name and the entry point it calls, which returns the
/// peak heap bytes of the load it checked.
#[derive(Clone, Copy)]
pub struct Target {
    pub name: &'static str,
    pub entry: fn(&[u8]) -> usize,
}

/// Every fuzz target, in the order `.ci/run` runs them.
pub const TARGETS: [Target; 4] = [
    Target {
        name: "pt",
        entry: crate::pt,
    },
    Target {
        name: "safetensors",
        entry: crate::safetensors,
    },
    Target {
        name: "graph_text",
        entry: crate::graph_text,
    },
    Target {
        name: "artifact",
        entry: crate::artifact,
    },
];

/// The repository's `fuzz/` folder.
pub fn fuzz_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz")
}

/// Every file of `fuzz/corpus/<target>` and `fuzz/crashes/<target>`, sorted by path.
pub fn corpus_files(target: &str) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for kind in ["corpus", "crashes"] {
        let Ok(entries) = std::fs::read_dir(fuzz_dir().join(kind).join(target)) else {
            continue;
        };
        files.extend(
            entries
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.is_file()),
        );
    }
    files.sort();
    files
}
