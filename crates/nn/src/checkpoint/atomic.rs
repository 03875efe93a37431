//! Atomic file replacement: write a temporary file beside the target, fsync it, rename it
//! over the target; a failure at any step leaves the old file untouched.

use std::fs::{self, File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::Path;

use super::file_io::io_error;
use super::temp_files::{remove_stale_temps, sync_parent, temp_path};
use crate::Result;

/// Writes `path` through `write`, atomically: readers see the old file or the new one,
/// never a partial one. `write` gets a buffered writer positioned at the file's start.
/// Temporary files that killed saves to `path` left behind are removed first.
pub(crate) fn write_atomic(
    path: &Path,
    write: impl FnOnce(&mut BufWriter<File>) -> Result<()>,
) -> Result<()> {
    let io_err = |source| io_error(path, source);
    remove_stale_temps(path);
    let tmp = temp_path(path);
    let file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&tmp)
        .map_err(io_err)?;
    let result = (|| {
        let mut out = BufWriter::new(file);
        write(&mut out)?;
        let file = out.into_inner().map_err(|e| io_err(e.into_error()))?;
        file.sync_all().map_err(io_err)?;
        drop(file);
        fs::rename(&tmp, path).map_err(io_err)
    })();
    match result {
        Ok(()) => {
            sync_parent(path);
            Ok(())
        }
        Err(e) => {
            // The temporary file is ours and unfinished; the target was never touched.
            let _ = fs::remove_file(&tmp);
            Err(e)
        }
    }
}

/// Writes all of `bytes` to `out`, naming `path` in the error.
pub(crate) fn write_bytes(path: &Path, out: &mut impl Write, bytes: &[u8]) -> Result<()> {
    out.write_all(bytes)
        .map_err(|source| io_error(path, source))
}
