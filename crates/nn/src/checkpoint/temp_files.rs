//! Names of the temporary files and folders a save writes beside its target, and the
//! removal of those a killed save left behind.
//!
//! A save to `dir/name` stages its output as `dir/.name.tessera-tmp-<pid>-<n>` and renames it
//! into place. The pattern is fixed, so a save that was killed before its rename leaves a
//! recognisable leftover; the next save to the same target removes every leftover whose
//! process is no longer running (a running process may be saving there right now).

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// What follows `.<name>` in every temporary name: `.<name>.tessera-tmp-<pid>-<n>`.
pub const TEMP_MARKER: &str = ".tessera-tmp-";

/// Distinguishes temporary files of concurrent saves within one process.
static COUNTER: AtomicU64 = AtomicU64::new(0);

/// The file name of `target`, or `checkpoint` for a path without one (`/`, `..`).
fn target_name(target: &Path) -> String {
    target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "checkpoint".into())
}

/// A fresh temporary path beside `target` (`.<name>.tessera-tmp-<pid>-<n>`), in the same
/// folder so the final rename never crosses a file system.
pub fn temp_path(target: &Path) -> PathBuf {
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    target.with_file_name(format!(
        ".{}{TEMP_MARKER}{}-{n}",
        target_name(target),
        std::process::id()
    ))
}

/// The process id in a temporary name of `target`, or `None` if `file_name` is not one.
fn temp_owner(target_name: &str, file_name: &str) -> Option<u32> {
    let rest = file_name
        .strip_prefix('.')?
        .strip_prefix(target_name)?
        .strip_prefix(TEMP_MARKER)?;
    let (pid, n) = rest.split_once('-')?;
    n.parse::<u64>().ok()?;
    pid.parse().ok()
}

/// Removes the temporary files and folders of saves to `target` whose process has ended,
/// returning how many were removed. Best effort: what cannot be listed or removed stays, and
/// the save goes on.
pub fn remove_stale_temps(target: &Path) -> usize {
    let name = target_name(target);
    let dir = match target.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let Ok(entries) = fs::read_dir(dir) else {
        return 0;
    };
    let mut removed = 0;
    for entry in entries.flatten() {
        let file_name = entry.file_name();
        let Some(pid) = file_name.to_str().and_then(|f| temp_owner(&name, f)) else {
            continue;
        };
        if process_is_running(pid) {
            continue;
        }
        let path = entry.path();
        let gone = match entry.file_type() {
            Ok(t) if t.is_dir() => fs::remove_dir_all(&path),
            _ => fs::remove_file(&path),
        };
        removed += usize::from(gone.is_ok());
    }
    removed
}

/// Whether process `pid` may still be writing: this process, or one that exists (or that
/// cannot be asked about). Where processes cannot be asked about, every owner counts as running.
fn process_is_running(pid: u32) -> bool {
    if pid == std::process::id() {
        return true;
    }
    #[cfg(unix)]
    {
        let Some(pid) = i32::try_from(pid)
            .ok()
            .and_then(rustix::process::Pid::from_raw)
        else {
            return false;
        };
        !matches!(
            rustix::process::test_kill_process(pid),
            Err(rustix::io::Errno::SRCH)
        )
    }
    #[cfg(not(unix))]
    {
        true
    }
}

/// Makes a rename inside `path`'s folder durable where the platform allows syncing a folder.
pub(crate) fn sync_parent(path: &Path) {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    if let Ok(d) = fs::File::open(dir) {
        let _ = d.sync_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn temp_names_are_recognised_only_for_their_target() {
        let target = Path::new("/some/dir/model.pt");
        let temp = temp_path(target);
        let name = temp.file_name().unwrap().to_str().unwrap();
        assert_eq!(temp_owner("model.pt", name), Some(std::process::id()));
        assert_eq!(temp_owner("model", name), None);
        assert_eq!(temp_owner("model.pt", "model.pt"), None);
        assert_eq!(temp_owner("model.pt", ".model.pt.tessera-tmp-12-x"), None);
    }
}
