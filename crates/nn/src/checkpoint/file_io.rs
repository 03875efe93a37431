//! Reading checkpoint files and naming them in errors.

use std::path::Path;

use crate::{NnError, Result};

use super::CheckpointError;

/// A [`NnError::Checkpoint`] naming `path` and what is wrong with it.
pub(crate) fn checkpoint_error(path: &Path, source: CheckpointError) -> NnError {
    NnError::Checkpoint {
        path: path.display().to_string(),
        source: Box::new(source),
    }
}

/// An I/O error on `path`.
pub(crate) fn io_error(path: &Path, source: std::io::Error) -> NnError {
    NnError::Io {
        path: path.display().to_string(),
        source,
    }
}

/// The whole file.
pub(crate) fn read_file(path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|e| io_error(path, e))
}
