//! A check that every file of a crate's `tests/` folder is compiled, for crates whose tests are
//! modules of one binary (`autotests = false`), where an unlisted file would silently never run.

use std::fs;
use std::path::Path;

/// Panics naming each `tests/*.rs` file of the crate at `manifest_dir` that is neither a module
/// of `tests/integration.rs` (`mod name;`) nor the path of a `[[test]]` target in Cargo.toml.
pub fn assert_test_files_registered(manifest_dir: &str) {
    let root = Path::new(manifest_dir);
    let read = |path: &Path| {
        fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
    };
    let integration = read(&root.join("tests/integration.rs"));
    let manifest = read(&root.join("Cargo.toml"));
    let modules: Vec<&str> = integration
        .lines()
        .filter_map(|line| line.strip_prefix("mod ")?.strip_suffix(';'))
        .collect();
    let entries = fs::read_dir(root.join("tests")).expect("the crate has a tests/ folder");
    let mut unregistered = Vec::new();
    for entry in entries {
        let name = entry.expect("a readable tests/ entry").file_name();
        let name = name.to_string_lossy();
        let Some(stem) = name.strip_suffix(".rs") else {
            continue;
        };
        let target = format!("path = \"tests/{name}\"");
        if stem != "integration" && !modules.contains(&stem) && !manifest.contains(&target) {
            unregistered.push(name.into_owned());
        }
    }
    unregistered.sort();
    assert!(
        unregistered.is_empty(),
        "tests/ files never compiled: {unregistered:?}; add `mod NAME;` to tests/integration.rs, \
         or a [[test]] with `path = \"tests/NAME.rs\"` to Cargo.toml"
    );
}
