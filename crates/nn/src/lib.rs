//! Modules for Tessera: what PyTorch's `torch.nn` and `torch.optim` are for Python.

pub mod checkpoint;
mod error;
mod state_dict;
mod value;

pub use checkpoint::{
    load_checkpoint, load_pt, load_pt_state_dict, load_safetensors, save_checkpoint, save_pt,
    save_pt_state_dict, save_safetensors,
};
pub use error::{NnError, Result};
pub use state_dict::StateDict;
pub use value::{Key, Value};
