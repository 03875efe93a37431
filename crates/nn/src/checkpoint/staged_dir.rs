//! A folder written as a unit: its files are written into a temporary sibling folder, which
//! then replaces the target in one atomic exchange, so readers (and a save killed at any
//! point) see the whole old folder or the whole new one, never a mix.
//!
//! ```
//! use tessera_nn::checkpoint::StagedDir;
//!
//! let root = tempfile::tempdir()?;
//! let target = root.path().join("artifact");
//! let staged = StagedDir::new(&target)?;
//! std::fs::write(staged.path().join("a.txt"), "new")?;
//! staged.commit()?;
//! assert_eq!(std::fs::read_to_string(target.join("a.txt"))?, "new");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};

use super::temp_files::{remove_stale_temps, sync_parent, temp_path};

/// A temporary folder beside `target` (named `.<name>.tessera-tmp-<pid>-<n>`) that
/// [`StagedDir::commit`] puts in `target`'s place. Dropped without a commit, it is removed
/// and `target` is untouched; if the process is killed first, the next save to `target`
/// removes it.
#[derive(Debug)]
pub struct StagedDir {
    target: PathBuf,
    path: PathBuf,
    committed: bool,
}

impl StagedDir {
    /// Creates the temporary folder for `target` (and `target`'s parent folders), after
    /// removing the leftovers of killed saves to `target`.
    pub fn new(target: impl AsRef<Path>) -> io::Result<Self> {
        let target = target.as_ref().to_path_buf();
        if let Some(parent) = target.parent().filter(|p| !p.as_os_str().is_empty()) {
            fs::create_dir_all(parent)?;
        }
        remove_stale_temps(&target);
        let path = temp_path(&target);
        fs::create_dir(&path)?;
        Ok(StagedDir {
            target,
            path,
            committed: false,
        })
    }

    /// The temporary folder to write the files into.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Makes the staged folder durable and puts it in the target's place. An existing target
    /// (which must be a folder) is exchanged with it in one step where the platform can
    /// (Linux, macOS), then removed.
    pub fn commit(mut self) -> io::Result<()> {
        File::open(&self.path)?.sync_all()?;
        match fs::symlink_metadata(&self.target) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                fs::rename(&self.path, &self.target)?;
                self.committed = true;
            }
            Err(e) => return Err(e),
            Ok(meta) if !meta.is_dir() => {
                return Err(io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    format!("{} exists and is not a folder", self.target.display()),
                ));
            }
            Ok(_) => {
                replace_folder(&self.path, &self.target)?;
                self.committed = true;
                // `self.path` now holds the old folder: ours to remove. A failure leaves it
                // as a recognisable leftover for the next save.
                let _ = fs::remove_dir_all(&self.path);
            }
        }
        sync_parent(&self.target);
        Ok(())
    }
}

impl Drop for StagedDir {
    fn drop(&mut self) {
        if !self.committed {
            let _ = fs::remove_dir_all(&self.path);
        }
    }
}

/// Puts the folder `staged` in place of the existing folder `target`, leaving the old one
/// at `staged`: one atomic exchange where the platform has it, otherwise (or where the file
/// system refuses it) two renames, with a moment between them when `target` is absent.
fn replace_folder(staged: &Path, target: &Path) -> io::Result<()> {
    #[cfg(any(target_os = "linux", target_os = "android", target_vendor = "apple"))]
    {
        use rustix::fs::{CWD, RenameFlags, renameat_with};
        match renameat_with(CWD, staged, CWD, target, RenameFlags::EXCHANGE) {
            Ok(()) => return Ok(()),
            Err(e) if e == rustix::io::Errno::INVAL || e == rustix::io::Errno::NOSYS => {}
            Err(e) => return Err(e.into()),
        }
    }
    let aside = temp_path(target);
    fs::rename(target, &aside)?;
    if let Err(e) = fs::rename(staged, target) {
        let _ = fs::rename(&aside, target);
        return Err(e);
    }
    fs::rename(&aside, staged)
}
