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

#[cfg(test)]
mod tests {
    use super::assert_test_files_registered_in;
    use std::fs;
    use std::panic::catch_unwind;
    use std::path::PathBuf;

    /// A crate folder `krate/` whose tests live in the sibling `shared/` (as the facade's do):
    /// `a.rs` is a module of `shared/integration.rs`, `b.rs` a `[[test]]`, plus `extra`.
    fn layout(name: &str, extra: Option<&str>) -> PathBuf {
        let root =
            std::env::temp_dir().join(format!("tessera-test-files-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        fs::create_dir_all(root.join("krate")).unwrap();
        fs::create_dir_all(root.join("shared/helpers")).unwrap();
        fs::write(
            root.join("krate/Cargo.toml"),
            "[[test]]\nname = \"b\"\npath = \"../shared/b.rs\"\n",
        )
        .unwrap();
        fs::write(root.join("shared/integration.rs"), "mod a;\n").unwrap();
        for file in ["a.rs", "b.rs"].into_iter().chain(extra) {
            fs::write(root.join("shared").join(file), "").unwrap();
        }
        root
    }

    #[test]
    fn files_that_are_modules_or_test_targets_pass_in_a_folder_outside_the_crate() {
        let root = layout("registered", None);
        let krate = root.join("krate");
        assert_test_files_registered_in(krate.to_str().unwrap(), "../shared");
        fs::remove_dir_all(root).unwrap();
    }

    #[test]
    fn an_unlisted_file_fails_naming_it() {
        let root = layout("unlisted", Some("c.rs"));
        let krate = root.join("krate").to_str().unwrap().to_owned();
        let panic = catch_unwind(|| assert_test_files_registered_in(&krate, "../shared"))
            .expect_err("c.rs is neither a module nor a [[test]]");
        let message = panic.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(message.contains("[\"c.rs\"]"), "{message}");
        fs::remove_dir_all(root).unwrap();
    }
}
