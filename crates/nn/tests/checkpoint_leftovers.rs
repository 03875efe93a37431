//! A save killed before its rename leaves a temporary file named
//! `.<name>.tessera-tmp-<pid>-<n>` beside its target; the next save to that target removes
//! it, and leaves the temporaries of running processes and of other targets alone.

use std::path::Path;
use std::process::Command;
use tessera_nn::checkpoint::{TEMP_MARKER, save_pt_state_dict, save_safetensors};
use tessera_nn::{Result, StateDict};
use tessera_tensor::Tensor;

/// The id of a process that has ended.
fn dead_pid() -> u32 {
    let mut child = Command::new("true").spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();
    pid
}

fn state() -> StateDict {
    let mut state = StateDict::new();
    state.insert("w", Tensor::from_vec(vec![1.0f32, 2.0], &[2]).unwrap());
    state
}

fn check_cleanup(name: &str, save: impl Fn(&StateDict, &Path) -> Result<()>) {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join(name);
    let stale = dir
        .path()
        .join(format!(".{name}{TEMP_MARKER}{}-3", dead_pid()));
    std::fs::write(&stale, vec![0u8; 4096]).unwrap();
    let live = dir.path().join(format!(
        ".{name}{TEMP_MARKER}{}-0",
        std::os::unix::process::parent_id()
    ));
    std::fs::write(&live, "a save in progress").unwrap();
    let other = dir
        .path()
        .join(format!(".other.pt{TEMP_MARKER}{}-0", dead_pid()));
    std::fs::write(&other, "another target's").unwrap();

    save(&state(), &target).unwrap();

    assert!(target.exists());
    assert!(
        !stale.exists(),
        "{name}: the killed save's temporary file was removed"
    );
    assert!(
        live.exists(),
        "{name}: a running process's temporary file stays"
    );
    assert!(
        other.exists(),
        "{name}: another target's temporary file stays"
    );
}

#[test]
fn a_pt_save_removes_the_temporary_files_of_killed_saves_to_the_same_path() {
    check_cleanup("model.pt", |s, p| save_pt_state_dict(s, p));
}

#[test]
fn a_safetensors_save_removes_the_temporary_files_of_killed_saves_to_the_same_path() {
    check_cleanup("model.safetensors", |s, p| save_safetensors(s, p));
}
