//! Checkpoint files: state dicts as safetensors, and PyTorch's own `.pt` zip format read
//! and written for state dicts and whole training checkpoints. Every save is atomic;
//! every load refuses malformed or hostile files with an error that names the file.
//!
//! ```
//! use tessera_nn::checkpoint::{load_pt_state_dict, save_pt_state_dict};
//! use tessera_nn::StateDict;
//! use tessera_tensor::Tensor;
//!
//! let dir = tempfile::tempdir()?;
//! let path = dir.path().join("model.pt");
//! let mut state = StateDict::new();
//! state.insert("linear.weight", Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], &[2, 2])?);
//! state.metadata.insert("linear".into(), 1);
//! save_pt_state_dict(&state, &path)?; // torch.load(path, weights_only=True) reads this
//! let loaded = load_pt_state_dict(&path)?;
//! assert_eq!(loaded.get("linear.weight").unwrap().to_vec::<f32>()?, vec![1.0, 2.0, 3.0, 4.0]);
//! assert_eq!(loaded.metadata["linear"], 1);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod atomic;
mod dtype_bytes;
mod error;
mod file_io;
mod limits;
mod pickle_ops;
mod pickle_read;
mod pickle_write;
mod rebuild;
mod safetensors_format;
mod safetensors_header;
mod staged_dir;
mod state_dict_value;
mod temp_files;
mod torch_globals;
mod torch_zip;
mod zip_writer;

use std::path::Path;

pub use error::CheckpointError;
pub use limits::{
    CheckpointLimit, PICKLE_BYTES_BASE, PICKLE_BYTES_PER_INPUT_BYTE, SAFETENSORS_BYTES_PER_TENSOR,
    SAFETENSORS_MAX_HEADER_BYTES, SAFETENSORS_TENSORS_BASE,
};
pub use safetensors_format::{ORDER_KEY, VERSIONS_KEY, load_safetensors, save_safetensors};
pub use staged_dir::StagedDir;
pub use temp_files::TEMP_MARKER;
pub use torch_zip::{
    load_pt, load_pt_state_dict, load_pt_value_state_dict, save_pt, save_pt_state_dict,
    save_pt_value_state_dict,
};

use crate::{Result, Value};

/// Saves a training checkpoint (a dict such as `{"epoch", "model_state_dict",
/// "optimizer_state_dict", "loss"}`) as a `.pt` file PyTorch can `torch.load`.
pub fn save_checkpoint(path: impl AsRef<Path>, checkpoint: &Value) -> Result<()> {
    save_pt(checkpoint, path)
}

/// Loads a training checkpoint written by [`save_checkpoint`] or `torch.save`.
pub fn load_checkpoint(path: impl AsRef<Path>) -> Result<Value> {
    load_pt(path)
}
