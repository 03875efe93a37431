//! State dicts as safetensors files, keeping key order and module versions in the header's
//! `__metadata__` (safetensors itself sorts tensors by dtype and name).

use std::borrow::Cow;
use std::collections::HashMap;
use std::path::Path;

use safetensors::{Dtype, SafeTensorError, SafeTensors, View};
use tessera_tensor::DType;

use super::CheckpointError;
use super::atomic::{write_atomic, write_bytes};
use super::dtype_bytes::{tensor_from_le_bytes, tensor_to_le_bytes};
use super::file_io::{checkpoint_error, read_file};
use super::safetensors_header::check_header;
use crate::{Result, StateDict};

/// `__metadata__` key holding the state dict's key order as a JSON list of strings.
pub const ORDER_KEY: &str = "tessera.order";
/// `__metadata__` key holding `StateDict::metadata` as a JSON list of `[prefix, version]`.
pub const VERSIONS_KEY: &str = "tessera.versions";

/// One tensor's bytes, ready for `safetensors::serialize`.
struct Encoded {
    dtype: Dtype,
    shape: Vec<usize>,
    bytes: Vec<u8>,
}

impl View for &Encoded {
    fn dtype(&self) -> Dtype {
        self.dtype
    }
    fn shape(&self) -> &[usize] {
        &self.shape
    }
    fn data(&self) -> Cow<'_, [u8]> {
        Cow::Borrowed(&self.bytes)
    }
    fn data_len(&self) -> usize {
        self.bytes.len()
    }
}

fn to_safetensors(dtype: DType) -> Dtype {
    match dtype {
        DType::Bool => Dtype::BOOL,
        DType::U8 => Dtype::U8,
        DType::I8 => Dtype::I8,
        DType::I32 => Dtype::I32,
        DType::I64 => Dtype::I64,
        DType::F16 => Dtype::F16,
        DType::BF16 => Dtype::BF16,
        DType::F32 => Dtype::F32,
        DType::F64 => Dtype::F64,
    }
}

fn from_safetensors(dtype: Dtype) -> Option<DType> {
    Some(match dtype {
        Dtype::BOOL => DType::Bool,
        Dtype::U8 => DType::U8,
        Dtype::I8 => DType::I8,
        Dtype::I32 => DType::I32,
        Dtype::I64 => DType::I64,
        Dtype::F16 => DType::F16,
        Dtype::BF16 => DType::BF16,
        Dtype::F32 => DType::F32,
        Dtype::F64 => DType::F64,
        _ => return None,
    })
}

/// Writes `state` to `path` as safetensors, atomically.
pub fn save_safetensors(state: &StateDict, path: impl AsRef<Path>) -> Result<()> {
    let path = path.as_ref();
    let fail = |source: CheckpointError| checkpoint_error(path, source);
    let mut encoded = Vec::with_capacity(state.len());
    for (key, tensor) in state.iter() {
        let bytes = tensor_to_le_bytes(tensor).map_err(|source| {
            fail(CheckpointError::Tensor {
                key: key.to_string(),
                source,
            })
        })?;
        encoded.push((
            key.to_string(),
            Encoded {
                dtype: to_safetensors(tensor.dtype()),
                shape: tensor.shape(),
                bytes,
            },
        ));
    }
    let order: Vec<&str> = state.keys().collect();
    let versions: Vec<(&String, &i64)> = state.metadata.iter().collect();
    let mut info = HashMap::new();
    info.insert(
        ORDER_KEY.to_string(),
        serde_json::to_string(&order).map_err(|source| {
            fail(CheckpointError::Metadata {
                key: ORDER_KEY,
                source,
            })
        })?,
    );
    if !versions.is_empty() {
        info.insert(
            VERSIONS_KEY.to_string(),
            serde_json::to_string(&versions).map_err(|source| {
                fail(CheckpointError::Metadata {
                    key: VERSIONS_KEY,
                    source,
                })
            })?,
        );
    }
    let bytes = safetensors::serialize(encoded.iter().map(|(k, e)| (k, e)), Some(info))
        .map_err(|source| fail(CheckpointError::SafetensorsWrite { source }))?;
    write_atomic(path, |out| write_bytes(path, out, &bytes))
}

/// Reads a safetensors file into a state dict: in the order saved by
/// [`save_safetensors`] when the file records one, otherwise in data-offset order. A header
/// past the limits (see [`super::CheckpointLimit`]) is refused before it is parsed.
pub fn load_safetensors(path: impl AsRef<Path>) -> Result<StateDict> {
    let path = path.as_ref();
    let fail = |source: CheckpointError| checkpoint_error(path, source);
    let bytes = read_file(path)?;
    check_header(&bytes).map_err(fail)?;
    let (header_len, header) = SafeTensors::read_metadata(&bytes)
        .map_err(|source| fail(CheckpointError::Safetensors { source }))?;
    // `read_metadata` checked that the data section holds every tensor's offsets.
    let data = bytes.get(8 + header_len..).unwrap_or_default();
    let extra = header.metadata().clone().unwrap_or_default();
    let offset_order = header.offset_keys();
    let order = match extra.get(ORDER_KEY) {
        Some(text) => recorded_order(text, &offset_order).map_err(fail)?,
        None => offset_order,
    };
    let mut state = StateDict::new();
    for key in order {
        let info = header.info(&key).ok_or_else(|| {
            fail(CheckpointError::SafetensorsTensor {
                key: key.clone(),
                source: SafeTensorError::TensorNotFound(key.clone()),
            })
        })?;
        let dtype = from_safetensors(info.dtype).ok_or_else(|| {
            fail(CheckpointError::Dtype {
                key: key.clone(),
                dtype: format!("{:?}", info.dtype),
            })
        })?;
        let (start, end) = info.data_offsets;
        let tensor_bytes = data.get(start..end).ok_or_else(|| {
            fail(CheckpointError::SafetensorsTensor {
                key: key.clone(),
                source: SafeTensorError::InvalidOffset(key.clone()),
            })
        })?;
        let numel = tensor_bytes.len() / dtype.size_in_bytes();
        let tensor =
            tensor_from_le_bytes(dtype, tensor_bytes, 0..numel, &info.shape).map_err(|source| {
                fail(CheckpointError::Tensor {
                    key: key.clone(),
                    source,
                })
            })?;
        state.insert(key, tensor);
    }
    if let Some(text) = extra.get(VERSIONS_KEY) {
        let versions: Vec<(String, i64)> = serde_json::from_str(text).map_err(|source| {
            fail(CheckpointError::Metadata {
                key: VERSIONS_KEY,
                source,
            })
        })?;
        state.metadata = versions.into_iter().collect();
    }
    Ok(state)
}

/// The key order recorded under [`ORDER_KEY`], checked to list each tensor exactly once.
fn recorded_order(text: &str, keys: &[String]) -> Result<Vec<String>, CheckpointError> {
    let order: Vec<String> =
        serde_json::from_str(text).map_err(|source| CheckpointError::Metadata {
            key: ORDER_KEY,
            source,
        })?;
    let mut sorted_order: Vec<&String> = order.iter().collect();
    let mut sorted_keys: Vec<&String> = keys.iter().collect();
    sorted_order.sort();
    sorted_keys.sort();
    if sorted_order != sorted_keys {
        return Err(CheckpointError::Order {
            key: ORDER_KEY,
            count: keys.len(),
        });
    }
    Ok(order)
}
