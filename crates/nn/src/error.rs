//! The one error type of `tessera-nn`: every failure names the module path, the key or the
//! file involved.

use crate::checkpoint::CheckpointError;
use tessera_tensor::TensorError;

/// Everything that can go wrong in module, optimizer and checkpoint code.
#[derive(Debug, thiserror::Error)]
pub enum NnError {
    /// A tensor op failed; `context` names the module path (and op) it ran in.
    #[error("{context}: {source}")]
    Tensor {
        context: String,
        source: TensorError,
    },

    /// A tensor op failed outside any module.
    #[error(transparent)]
    Op(#[from] TensorError),

    /// A submodule, parameter or buffer path that does not exist.
    #[error("{0}")]
    NotFound(String),

    /// `load_state_dict` found missing or unexpected keys (strict) or shape mismatches.
    #[error("Error(s) in loading state_dict for {module}:\n\t{}", .errors.join("\n\t"))]
    LoadStateDict { module: String, errors: Vec<String> },

    /// An argument out of range or otherwise invalid.
    #[error("{0}")]
    Invalid(String),

    /// A checkpoint file that cannot be read or written; `source` says what is wrong.
    #[error("{path}: {source}")]
    Checkpoint {
        path: String,
        #[source]
        source: Box<CheckpointError>,
    },

    /// An error of a crate built on this one, kept whole: running a `GraphModule` gives the
    /// graph crate's `FxError` here; downcast `source()` to it to match on what went wrong.
    #[error("{0}")]
    Graph(#[source] Box<dyn std::error::Error + Send + Sync>),

    /// Reading or writing the file `path` failed.
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
}

impl NnError {
    /// Wraps a tensor error with the module path it happened in.
    pub fn in_module(path: &str, source: TensorError) -> Self {
        NnError::Tensor {
            context: if path.is_empty() {
                "<root>".into()
            } else {
                path.to_string()
            },
            source,
        }
    }
}

/// `Result` with [`NnError`].
pub type Result<T, E = NnError> = std::result::Result<T, E>;
