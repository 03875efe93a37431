//! The memory a reader may spend on a file, in proportion to the file: the unpickler's
//! budget for the values it builds, and the safetensors header's size and tensor count.
//! Past a limit, reading stops with [`CheckpointError::LimitExceeded`] naming the limit.

use std::fmt;

use super::CheckpointError;

/// Bytes of unpickled values allowed per byte of pickle (`data.pkl`).
pub const PICKLE_BYTES_PER_INPUT_BYTE: u64 = 32;
/// Bytes of unpickled values allowed whatever the pickle's size.
pub const PICKLE_BYTES_BASE: u64 = 1 << 20;
/// Largest safetensors header, in bytes (the safetensors crate's own limit).
pub const SAFETENSORS_MAX_HEADER_BYTES: u64 = 100_000_000;
/// Tensors a safetensors file may hold whatever its size.
pub const SAFETENSORS_TENSORS_BASE: u64 = 1 << 16;
/// Bytes of file per tensor allowed beyond [`SAFETENSORS_TENSORS_BASE`].
pub const SAFETENSORS_BYTES_PER_TENSOR: u64 = 256;

/// Which limit a [`CheckpointError::LimitExceeded`] hit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CheckpointLimit {
    /// Bytes of values the unpickler built: at most [`PICKLE_BYTES_PER_INPUT_BYTE`] per byte of
    /// pickle plus [`PICKLE_BYTES_BASE`].
    PickleMemory,
    /// Bytes of a safetensors header: at most [`SAFETENSORS_MAX_HEADER_BYTES`].
    SafetensorsHeader,
    /// Tensors in a safetensors file: at most [`SAFETENSORS_TENSORS_BASE`] plus one per
    /// [`SAFETENSORS_BYTES_PER_TENSOR`] bytes of file.
    SafetensorsTensors,
}

impl fmt::Display for CheckpointLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CheckpointLimit::PickleMemory => {
                "the pickle's memory budget (32 bytes per pickle byte + 1 MiB), in bytes"
            }
            CheckpointLimit::SafetensorsHeader => "the safetensors header size limit, in bytes",
            CheckpointLimit::SafetensorsTensors => {
                "the safetensors tensor count limit (65536 + one per 256 bytes of file)"
            }
        })
    }
}

/// `value` against `allowed`: a [`CheckpointError::LimitExceeded`] past it.
pub(crate) fn check(
    limit: CheckpointLimit,
    value: u64,
    allowed: u64,
) -> Result<(), CheckpointError> {
    if value > allowed {
        return Err(CheckpointError::LimitExceeded {
            limit,
            value,
            allowed,
        });
    }
    Ok(())
}

/// Bytes still allowed for the values built from one pickle.
pub(crate) struct MemoryBudget {
    used: u64,
    allowed: u64,
}

impl MemoryBudget {
    /// The budget for a pickle of `input_len` bytes.
    pub(crate) fn for_pickle(input_len: usize) -> Self {
        MemoryBudget {
            used: 0,
            allowed: (input_len as u64)
                .saturating_mul(PICKLE_BYTES_PER_INPUT_BYTE)
                .saturating_add(PICKLE_BYTES_BASE),
        }
    }

    /// Counts `bytes` more, refusing them past the budget.
    pub(crate) fn charge(&mut self, bytes: usize) -> Result<(), CheckpointError> {
        self.used = self.used.saturating_add(bytes as u64);
        check(CheckpointLimit::PickleMemory, self.used, self.allowed)
    }

    /// The bytes counted so far.
    pub(crate) fn used(&self) -> u64 {
        self.used
    }
}

/// Tensors allowed in a safetensors file of `file_len` bytes.
pub(crate) fn safetensors_tensors_allowed(file_len: u64) -> u64 {
    SAFETENSORS_TENSORS_BASE.saturating_add(file_len / SAFETENSORS_BYTES_PER_TENSOR)
}
