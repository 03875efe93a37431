//! A fresh temporary folder per input, for loaders that read files by path.

use std::path::{Path, PathBuf};

/// A temporary folder removed when dropped.
pub(crate) struct Scratch {
    dir: tempfile::TempDir,
}

impl Scratch {
    /// A new empty folder; panics only if the machine cannot create one (not an input's fault).
    pub(crate) fn new() -> Scratch {
        Scratch {
            dir: tempfile::tempdir().expect("a temporary folder for the fuzz input"),
        }
    }

    /// Writes `bytes` to `name` in the folder and returns its path.
    pub(crate) fn file(&self, name: &str, bytes: &[u8]) -> PathBuf {
        let path = self.path(name);
        std::fs::write(&path, bytes).expect("writing the fuzz input to a temporary file");
        path
    }

    /// The path of `name` in the folder.
    pub(crate) fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    pub(crate) fn root(&self) -> &Path {
        self.dir.path()
    }
}
