//! Writing the stored zip of a `.pt` file so that every failure comes back as a `Result`.
//!
//! `zip::ZipWriter` finalizes the archive again when it is dropped unfinished and prints
//! `ZipWriter::drop: failed to finalize archive` on stderr when that fails too. Here the
//! writer underneath it turns into a sink after the first failure (or when the save is
//! abandoned), so the finalization in `drop` succeeds against nothing and prints nothing;
//! the temporary file it was writing is removed by the caller.

use std::cell::Cell;
use std::io::{self, Seek, SeekFrom, Write};

use zip::write::SimpleFileOptions;
use zip::{CompressionMethod, DateTime, ZipWriter};

/// `torch.save`'s record alignment (`.storage_alignment`).
const ALIGNMENT: u16 = 64;

/// A stored zip of `records` in order, each record's data 64-byte aligned.
pub(crate) fn write_zip<W: Write + Seek>(
    out: W,
    records: &[(String, &[u8])],
) -> zip::result::ZipResult<()> {
    let abandoned = Cell::new(false);
    let mut zip = ZipWriter::new(SinkOnFailure::new(out, &abandoned));
    if let Err(e) = write_records(&mut zip, records) {
        abandoned.set(true);
        drop(zip);
        return Err(e);
    }
    // A failing `finish` drops the writer inside it; the writer underneath is a sink by then.
    zip.finish().map(drop)
}

fn write_records<W: Write + Seek>(
    zip: &mut ZipWriter<W>,
    records: &[(String, &[u8])],
) -> zip::result::ZipResult<()> {
    for (name, bytes) in records {
        let options = SimpleFileOptions::default()
            .compression_method(CompressionMethod::Stored)
            .last_modified_time(DateTime::default())
            .with_alignment(ALIGNMENT)
            .large_file(bytes.len() as u64 >= u64::from(u32::MAX));
        zip.start_file(name.as_str(), options)?;
        zip.write_all(bytes)?;
    }
    Ok(())
}

/// Passes writes and seeks to `inner` until one fails or `abandoned` is set; from then on
/// it accepts everything and writes nothing, keeping a consistent position and length so
/// the zip writer's own bookkeeping stays sound.
struct SinkOnFailure<'a, W> {
    inner: W,
    abandoned: &'a Cell<bool>,
    position: u64,
    len: u64,
}

impl<'a, W: Seek> SinkOnFailure<'a, W> {
    fn new(inner: W, abandoned: &'a Cell<bool>) -> Self {
        SinkOnFailure {
            inner,
            abandoned,
            position: 0,
            len: 0,
        }
    }

    /// Records a result of `inner`: a failure makes this writer a sink.
    fn watch<T>(&self, result: io::Result<T>) -> io::Result<T> {
        if result.is_err() {
            self.abandoned.set(true);
        }
        result
    }

    fn moved_to(&mut self, position: u64) -> u64 {
        self.position = position;
        self.len = self.len.max(position);
        position
    }
}

impl<W: Write + Seek> Write for SinkOnFailure<'_, W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let written = if self.abandoned.get() {
            buf.len()
        } else {
            let result = self.inner.write(buf);
            self.watch(result)?
        };
        self.moved_to(self.position.saturating_add(written as u64));
        Ok(written)
    }

    fn flush(&mut self) -> io::Result<()> {
        if self.abandoned.get() {
            return Ok(());
        }
        let result = self.inner.flush();
        self.watch(result)
    }
}

impl<W: Write + Seek> Seek for SinkOnFailure<'_, W> {
    fn seek(&mut self, to: SeekFrom) -> io::Result<u64> {
        if !self.abandoned.get() {
            let result = self.inner.seek(to);
            let position = self.watch(result)?;
            return Ok(self.moved_to(position));
        }
        let base = match to {
            SeekFrom::Start(n) => return Ok(self.moved_to(n)),
            SeekFrom::End(d) => (self.len, d),
            SeekFrom::Current(d) => (self.position, d),
        };
        let position = base
            .0
            .checked_add_signed(base.1)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "seek out of range"))?;
        Ok(self.moved_to(position))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;
    use std::process::Command;

    /// A file that fails every write after its first `capacity` bytes.
    struct FullDisk {
        data: Cursor<Vec<u8>>,
        capacity: u64,
    }

    impl Write for FullDisk {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            if self.data.position() + buf.len() as u64 > self.capacity {
                return Err(io::Error::new(io::ErrorKind::StorageFull, "disk full"));
            }
            self.data.write(buf)
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    impl Seek for FullDisk {
        fn seek(&mut self, to: SeekFrom) -> io::Result<u64> {
            self.data.seek(to)
        }
    }

    fn records(payload: &[u8]) -> Vec<(String, &[u8])> {
        vec![
            ("m/data.pkl".to_string(), payload),
            ("m/data/0".to_string(), payload),
        ]
    }

    /// Fails a save at every byte it writes, so every step of the writer fails once.
    fn fail_at_every_byte() {
        let payload = vec![7u8; 300];
        let mut whole = Cursor::new(Vec::new());
        write_zip(&mut whole, &records(&payload)).unwrap();
        let size = whole.into_inner().len() as u64;
        for capacity in 0..size {
            let disk = FullDisk {
                data: Cursor::new(Vec::new()),
                capacity,
            };
            let err = write_zip(disk, &records(&payload)).unwrap_err();
            assert!(
                err.to_string().contains("disk full"),
                "capacity {capacity}: {err}"
            );
        }
    }

    #[test]
    fn a_failing_zip_save_returns_the_io_error_and_prints_nothing() {
        const CHILD: &str = "TESSERA_ZIP_WRITER_CHILD";
        if std::env::var_os(CHILD).is_some() {
            fail_at_every_byte();
            return;
        }
        // The message would go straight to file descriptor 2, past the test harness's
        // capture, so the failing saves run in a child process whose stderr is read here.
        let test = "checkpoint::zip_writer::tests::a_failing_zip_save_returns_the_io_error_and_prints_nothing";
        let output = Command::new(std::env::current_exe().unwrap())
            .args([test, "--exact", "--nocapture", "--test-threads=1"])
            .env(CHILD, "1")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(output.status.success(), "child failed: {stdout}\n{stderr}");
        assert!(
            stdout.contains("1 passed"),
            "the child ran the test: {stdout}"
        );
        assert!(!stderr.contains("ZipWriter"), "stderr: {stderr}");
    }
}
