//! A check that every file of a crate's `tests/` folder is compiled, for crates whose tests are
//! modules of one binary (`autotests = false`), where an unlisted file would silently never run.

use std::fs;
use std::path::Path;

/// Panics naming each `tests/*.rs` file of the crate at `manifest_dir` that is neither a module
/// of `tests/integration.rs` (`mod name;`) nor the path of a `[[test]]` target in Cargo.toml.
pub fn assert_test_files_registered(manifest_dir: &str) {
    assert_test_files_registered_in(manifest_dir, "tests");
}

/// [`assert_test_files_registered`] for a crate whose tests live in `tests_dir`, a folder given
/// relative to the crate's manifest (`../../tests` for the facade's workspace-level tests), with
/// `integration.rs` there and `[[test]]` paths written `tests_dir/NAME.rs`.
pub fn assert_test_files_registered_in(manifest_dir: &str, tests_dir: &str) {
    let root = Path::new(manifest_dir);
    let tests = root.join(tests_dir);
    let read = |path: &Path| {
        fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
    };
    let integration = read(&tests.join("integration.rs"));
    let manifest = read(&root.join("Cargo.toml"));
    let modules: Vec<&str> = integration
        .lines()
        .filter_map(|line| line.strip_prefix("mod ")?.strip_suffix(';'))
        .collect();
    let entries = fs::read_dir(&tests)
        .unwrap_or_else(|e| panic!("reading the tests folder {}: {e}", tests.display()));
    let mut unregistered = Vec::new();
    for entry in entries {
        let name = entry.expect("a readable tests/ entry").file_name();
        let name = name.to_string_lossy();
        let Some(stem) = name.strip_suffix(".rs") else {
            continue;
        };
        let target = format!("path = \"{tests_dir}/{name}\"");
        if stem != "integration" && !modules.contains(&stem) && !manifest.contains(&target) {
            unregistered.push(name.into_owned());
        }
    }
    unregistered.sort();
    assert!(
        unregistered.is_empty(),
        "{tests_dir}/ files never compiled: {unregistered:?}; add `mod NAME;` to \
         {tests_dir}/integration.rs, or a [[test]] with `path = \"{tests_dir}/NAME.rs\"` to Cargo.toml"
    );
}
