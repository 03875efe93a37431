//! [`CheckpointError`]: what is wrong inside a checkpoint file, one variant per kind of
//! problem, each keeping the error it comes from; [`crate::NnError::Checkpoint`] adds the path.

use tessera_tensor::TensorError;

use super::limits::CheckpointLimit;

/// Why a `.pt` or safetensors file could not be read or written. Match on the variant to
/// tell a damaged container from a hostile pickle or a tensor that does not fit its storage;
/// `source()` is the underlying zip, I/O, JSON, safetensors or tensor error where there is one.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CheckpointError {
    /// The file is not a zip archive (or its directory cannot be read).
    #[error("not a PyTorch zip checkpoint: {source}")]
    NotAZip {
        #[source]
        source: zip::result::ZipError,
    },
    /// The zip archive has no entries.
    #[error("the zip archive is empty")]
    EmptyArchive,
    /// An entry that is not inside the one archive folder `torch.save` writes.
    #[error("entry {entry:?} is not inside an archive folder")]
    NoArchiveFolder { entry: String },
    /// A `byteorder` record other than `little`.
    #[error("byteorder is {found:?}; only little-endian checkpoints are supported")]
    ByteOrder { found: String },
    /// An entry's name cannot be read.
    #[error("bad entry name: {source}")]
    EntryName {
        #[source]
        source: zip::result::ZipError,
    },
    /// A record the checkpoint needs (`<archive>/data.pkl`, `<archive>/data/<key>`) is absent.
    #[error("no record {name}: {source}")]
    MissingRecord {
        name: String,
        #[source]
        source: zip::result::ZipError,
    },
    /// A compressed record: `torch.save` stores records, so this is not its file.
    #[error("record {name} is compressed; torch.save stores records")]
    CompressedRecord { name: String },
    /// A record that claims more bytes than the whole file holds.
    #[error("record {name} claims {size} bytes in a {file_len}-byte file")]
    RecordTooLarge {
        name: String,
        size: u64,
        file_len: u64,
    },
    /// A record shorter than its zip entry claims.
    #[error("record {name} is truncated: {read} of {size} bytes")]
    TruncatedRecord { name: String, read: u64, size: u64 },
    /// A record whose bytes do not match the CRC-32 the archive records (a flipped bit).
    #[error("record {name}: bad CRC-32 ({actual:08x}, the archive says {expected:08x})")]
    Crc {
        name: String,
        actual: u32,
        expected: u32,
    },
    /// Reading a record's bytes failed.
    #[error("record {name}: {source}")]
    Io {
        name: String,
        #[source]
        source: std::io::Error,
    },
    /// Writing the zip container failed.
    #[error("writing zip: {source}")]
    WriteZip {
        #[source]
        source: zip::result::ZipError,
    },
    /// The pickle program is malformed at byte `offset` (truncated, an unknown opcode, a stack
    /// or memo misuse, arguments of the wrong type).
    #[error("pickle byte {offset}: {problem}")]
    Pickle { offset: usize, problem: String },
    /// The pickle names a Python global that may not be loaded (`os.system`, `builtins.eval`):
    /// only `OrderedDict`, PyTorch's tensor rebuild functions and storage classes are allowed.
    #[error(
        "pickle byte {offset}: refusing to load global {module}.{name}: a checkpoint may only \
         name collections.OrderedDict, torch._utils._rebuild_tensor_v2, \
         torch._utils._rebuild_parameter and torch.*Storage classes"
    )]
    UnsupportedGlobal {
        offset: usize,
        module: String,
        name: String,
    },
    /// The unpickled objects are not what was asked for (a state dict that is a list, a dict
    /// key of another type, nesting or sharing beyond the limits).
    #[error("{problem}")]
    Contents { problem: String },
    /// A storage record whose size disagrees with what its persistent id declares.
    #[error("storage {key:?} {problem}")]
    Storage { key: String, problem: String },
    /// A tensor view that reaches outside its storage or expands beyond the file's size.
    #[error("tensor on storage {key:?}: {problem}")]
    View { key: String, problem: String },
    /// A tensor that cannot be built from its storage's bytes.
    #[error("tensor on storage {key:?}: {source}")]
    Decode {
        key: String,
        #[source]
        source: TensorError,
    },
    /// The tensor `key` cannot be encoded to or decoded from bytes.
    #[error("tensor {key}: {source}")]
    Tensor {
        key: String,
        #[source]
        source: TensorError,
    },
    /// A tensor that cannot be encoded to bytes while pickling.
    #[error("cannot encode a tensor: {source}")]
    Encode {
        #[source]
        source: TensorError,
    },
    /// A tensor of a dtype Tessera has no counterpart for.
    #[error("tensor {key}: dtype {dtype} is not supported")]
    Dtype { key: String, dtype: String },
    /// The safetensors container is malformed.
    #[error("not a valid safetensors file: {source}")]
    Safetensors {
        #[source]
        source: safetensors::SafeTensorError,
    },
    /// The safetensors tensor `key` cannot be read.
    #[error("tensor {key}: {source}")]
    SafetensorsTensor {
        key: String,
        #[source]
        source: safetensors::SafeTensorError,
    },
    /// `safetensors::serialize` refused the tensors.
    #[error("writing safetensors: {source}")]
    SafetensorsWrite {
        #[source]
        source: safetensors::SafeTensorError,
    },
    /// Tessera's own `__metadata__` entries (key order, module versions) are not valid JSON of
    /// the expected form.
    #[error("{key} in __metadata__: {source}")]
    Metadata {
        key: &'static str,
        #[source]
        source: serde_json::Error,
    },
    /// The recorded key order does not list the file's tensors exactly once.
    #[error("{key} in __metadata__ does not list the file's {count} tensors exactly once")]
    Order { key: &'static str, count: usize },
    /// Reading the file would take more memory than its size justifies (a pickle whose tiny
    /// opcodes build huge values, a safetensors header of too many tensors): `limit` says which
    /// limit, `value` what the file needed and `allowed` what it may.
    #[error("{limit} exceeded: {value} > {allowed}")]
    LimitExceeded {
        limit: CheckpointLimit,
        value: u64,
        allowed: u64,
    },
}
