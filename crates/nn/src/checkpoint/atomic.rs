//! Atomic file replacement: write a temporary file beside the target, fsync it, rename it
//! over the target; a failure at any step leaves the old file untouched.

use std::fs::{self, File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use super::file_io::io_error;
use crate::Result;

/// Distinguishes temporary files of concurrent saves within one process.
static COUNTER: AtomicU64 = AtomicU64::new(0);

/// Writes `path` through `write`, atomically: readers see the old file or the new one,
/// never a partial one. `write` gets a buffered writer positioned at the file's start.
pub(crate) fn write_atomic(
    path: &Path,
    write: impl FnOnce(&mut BufWriter<File>) -> Result<()>,
) -> Result<()> {
    let io_err = |source| io_error(path, source);
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

/// `.<name>.tmp-<pid>-<n>` in the target's directory, so the rename never crosses a
/// file system.
fn temp_path(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "checkpoint".into());
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    path.with_file_name(format!(".{name}.tmp-{}-{n}", std::process::id()))
}

/// Makes the rename itself durable where the platform allows syncing a directory.
fn sync_parent(path: &Path) {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
}

/// Writes all of `bytes` to `out`, naming `path` in the error.
pub(crate) fn write_bytes(path: &Path, out: &mut impl Write, bytes: &[u8]) -> Result<()> {
    out.write_all(bytes)
        .map_err(|source| io_error(path, source))
}
