//! Modules for Tessera: what PyTorch's `torch.nn` and `torch.optim` are for Python.

mod error;
pub mod optim;
mod state_dict;
mod value;

pub use error::{NnError, Result};
pub use state_dict::StateDict;
pub use value::{Key, Value};
