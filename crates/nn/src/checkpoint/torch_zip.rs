//! PyTorch's `.pt` checkpoint container: a stored zip holding `<stem>/data.pkl` and one
//! record per storage, read through the restricted unpickler and written in the entry
//! order and 64-byte record alignment of `torch.save`.

use std::collections::HashMap;
use std::fs::File;
use std::hash::{BuildHasher, Hasher};
use std::io::{BufReader, Read, Seek};
use std::path::Path;

use zip::{CompressionMethod, ZipArchive};

use super::CheckpointError;
use super::atomic::write_atomic;
use super::file_io::{checkpoint_error, io_error};
use super::pickle_read::{Pickle, StorageRef, unpickle};
use super::pickle_write::{Pickled, pickle_state_dict, pickle_value, pickle_value_state_dict};
use super::rebuild::{Rebuilder, StorageSource};
use super::zip_writer::write_zip;
use crate::{Result, StateDict, Value, ValueStateDict};

/// Reads a `.pt` file written by `torch.save` (or [`save_pt`]) as a value. Dicts and
/// `OrderedDict`s both become [`Value::Dict`]; tensors are contiguous copies.
pub fn load_pt(path: impl AsRef<Path>) -> Result<Value> {
    rebuild(path.as_ref(), |r| r.value())
}

/// Reads a `.pt` file holding a state dict (`torch.save(model.state_dict(), path)`), with
/// its `_metadata` versions.
pub fn load_pt_state_dict(path: impl AsRef<Path>) -> Result<StateDict> {
    rebuild(path.as_ref(), |r| r.state_dict())
}

/// Reads a `.pt` file holding a state dict of any values (`torch.save(quantized.state_dict(),
/// path)` after `convert_fx`: quantized tensors, packed-parameter tuples, dtypes), with its
/// `_metadata` versions.
pub fn load_pt_value_state_dict(path: impl AsRef<Path>) -> Result<ValueStateDict> {
    rebuild(path.as_ref(), |r| r.value_state_dict())
}

/// Writes `value` as `torch.save(value, path)` would, atomically. Dicts are written as
/// plain `dict`s.
pub fn save_pt(value: &Value, path: impl AsRef<Path>) -> Result<()> {
    let path = path.as_ref();
    let pickled = pickle_value(value).map_err(|e| checkpoint_error(path, e))?;
    write_archive(path, &pickled)
}

/// Writes `state` as `torch.save(model.state_dict(), path)` would: an `OrderedDict` with
/// `_metadata`, atomically.
pub fn save_pt_state_dict(state: &StateDict, path: impl AsRef<Path>) -> Result<()> {
    let path = path.as_ref();
    let pickled = pickle_state_dict(state).map_err(|e| checkpoint_error(path, e))?;
    write_archive(path, &pickled)
}

/// Writes a state dict of any values (quantized tensors, packed-parameter tuples, dtypes)
/// as `torch.save(model.state_dict(), path)` would for a PyTorch model holding them, with
/// `_metadata`, atomically.
pub fn save_pt_value_state_dict(state: &ValueStateDict, path: impl AsRef<Path>) -> Result<()> {
    let path = path.as_ref();
    let pickled = pickle_value_state_dict(state).map_err(|e| checkpoint_error(path, e))?;
    write_archive(path, &pickled)
}

// ----- reading -----

/// The storage records of an open archive, read on first use.
struct ZipStorages {
    archive: ZipArchive<BufReader<File>>,
    prefix: String,
    file_len: u64,
    cache: HashMap<String, Vec<u8>>,
}

/// Opens the archive at `path` and rebuilds what `read` takes from its pickle.
fn rebuild<T>(
    path: &Path,
    read: impl FnOnce(&mut Rebuilder<'_, ZipStorages>) -> std::result::Result<T, CheckpointError>,
) -> Result<T> {
    let (pickle, mut storages) = open(path)?;
    read(&mut Rebuilder::new(&pickle, &mut storages)).map_err(|e| checkpoint_error(path, e))
}

fn open(path: &Path) -> Result<(Pickle, ZipStorages)> {
    let fail = |source: CheckpointError| checkpoint_error(path, source);
    let file = File::open(path).map_err(|e| io_error(path, e))?;
    let file_len = file.metadata().map_err(|e| io_error(path, e))?.len();
    let mut archive = ZipArchive::new(BufReader::new(file))
        .map_err(|source| fail(CheckpointError::NotAZip { source }))?;
    let first = archive
        .file_names()
        .next()
        .ok_or_else(|| fail(CheckpointError::EmptyArchive))?
        .map_err(|source| fail(CheckpointError::EntryName { source }))?;
    let prefix = match first.split_once('/') {
        Some((prefix, _)) => prefix.to_string(),
        None => {
            return Err(fail(CheckpointError::NoArchiveFolder {
                entry: first.into_owned(),
            }));
        }
    };
    // Old archives have no byteorder record; they are little-endian.
    if let Ok(order) = read_record(&mut archive, &format!("{prefix}/byteorder"), file_len)
        && order != b"little"
    {
        return Err(fail(CheckpointError::ByteOrder {
            found: String::from_utf8_lossy(&order).into_owned(),
        }));
    }
    let data = read_record(&mut archive, &format!("{prefix}/data.pkl"), file_len).map_err(fail)?;
    let pickle = unpickle(&data).map_err(fail)?;
    Ok((
        pickle,
        ZipStorages {
            archive,
            prefix,
            file_len,
            cache: HashMap::new(),
        },
    ))
}

/// The bytes of entry `name`, refusing compressed entries, sizes the file cannot hold and
/// contents whose CRC-32 differs from the archive's.
fn read_record<R: Read + Seek>(
    archive: &mut ZipArchive<R>,
    name: &str,
    file_len: u64,
) -> Result<Vec<u8>, CheckpointError> {
    let entry = archive
        .by_name(name)
        .map_err(|source| CheckpointError::MissingRecord {
            name: name.into(),
            source,
        })?;
    if entry.compression() != CompressionMethod::Stored {
        return Err(CheckpointError::CompressedRecord { name: name.into() });
    }
    let size = entry.size();
    let expected_crc = entry.crc32();
    if size > file_len {
        return Err(CheckpointError::RecordTooLarge {
            name: name.into(),
            size,
            file_len,
        });
    }
    let mut bytes = Vec::with_capacity(size as usize);
    entry
        .take(size)
        .read_to_end(&mut bytes)
        .map_err(|source| CheckpointError::Io {
            name: name.into(),
            source,
        })?;
    if bytes.len() as u64 != size {
        return Err(CheckpointError::TruncatedRecord {
            name: name.into(),
            read: bytes.len() as u64,
            size,
        });
    }
    // Reading exactly `size` bytes stops before the zip reader's own check at end of entry, so
    // the checksum is compared here: a flipped bit is an error, as in Python's zipfile.
    let actual = crc32fast::hash(&bytes);
    if actual != expected_crc {
        return Err(CheckpointError::Crc {
            name: name.into(),
            actual,
            expected: expected_crc,
        });
    }
    Ok(bytes)
}

impl StorageSource for ZipStorages {
    fn storage(&mut self, storage: &StorageRef) -> Result<&[u8], CheckpointError> {
        let name = format!("{}/data/{}", self.prefix, storage.key);
        if !self.cache.contains_key(&storage.key) {
            let bytes = read_record(&mut self.archive, &name, self.file_len)?;
            self.cache.insert(storage.key.clone(), bytes);
        }
        let bytes = &self.cache[&storage.key];
        let expected = storage
            .numel
            .checked_mul(storage.dtype.size_in_bytes() as u64)
            .ok_or_else(|| CheckpointError::Storage {
                key: storage.key.clone(),
                problem: "size overflows".into(),
            })?;
        if bytes.len() as u64 != expected {
            return Err(CheckpointError::Storage {
                key: storage.key.clone(),
                problem: format!(
                    "declares {} {} elements ({expected} bytes) but record {name} holds {} bytes",
                    storage.numel,
                    storage.dtype,
                    bytes.len()
                ),
            });
        }
        Ok(bytes)
    }

    fn total_bytes(&self) -> u64 {
        self.file_len
    }
}

// ----- writing -----

fn write_archive(path: &Path, pickled: &Pickled) -> Result<()> {
    let stem = path
        .file_stem()
        .and_then(|s| s.to_str())
        .filter(|s| !s.is_empty())
        .unwrap_or("archive");
    let serialization_id = serialization_id();
    let mut records: Vec<(String, &[u8])> = vec![
        (format!("{stem}/data.pkl"), &pickled.pickle),
        (format!("{stem}/.format_version"), b"1"),
        (format!("{stem}/.storage_alignment"), b"64"),
        (format!("{stem}/byteorder"), b"little"),
    ];
    for storage in &pickled.storages {
        records.push((format!("{stem}/data/{}", storage.key), &storage.bytes));
    }
    records.push((format!("{stem}/version"), b"3\n"));
    records.push((
        format!("{stem}/.data/serialization_id"),
        serialization_id.as_bytes(),
    ));
    write_atomic(path, |out| {
        write_zip(out, &records)
            .map_err(|source| checkpoint_error(path, CheckpointError::WriteZip { source }))
    })
}

/// 40 decimal digits, like PyTorch's: unique per save, never interpreted.
fn serialization_id() -> String {
    let random = std::hash::RandomState::new();
    let mut a = random.build_hasher();
    a.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    let mut b = random.build_hasher();
    b.write_u32(std::process::id());
    format!(
        "{:020}{:020}",
        a.finish() % 10u64.pow(19),
        b.finish() % 10u64.pow(19)
    )
}
