//! The crate's error type, [`PassError`], and its [`Result`] alias.

use tessera_fx::{FxError, VerifyErrors};

/// Everything that can go wrong while running passes.
#[derive(Debug, thiserror::Error)]
pub enum PassError {
    /// An editing or interpreter call of the graph crate failed inside a pass.
    #[error(transparent)]
    Fx(#[from] FxError),
    /// The IR failed verification after `pass` ran; every problem is listed.
    #[error("the IR is invalid after pass `{pass}`:\n{source}")]
    Verify {
        pass: String,
        #[source]
        source: VerifyErrors,
    },
    /// A pass failed; `pass` names it.
    #[error("pass `{pass}` failed: {source}")]
    InPass {
        pass: String,
        #[source]
        source: Box<PassError>,
    },
    /// A pass name that the registry does not know.
    #[error("no pass named `{name}`; known passes: {}", .known.join(", "))]
    UnknownPass { name: String, known: Vec<String> },
    /// An inference-only pass given a graph that runs in training mode.
    #[error("{pass} refuses a training-mode graph: {reason}")]
    TrainingMode { pass: String, reason: String },
    /// Static quantization met an observer that never saw a value.
    #[error(
        "observer `{observer}` ({node}) has not observed any value: run calibrate() with representative batches before convert_static"
    )]
    NotCalibrated { observer: String, node: String },
    /// A graph a pass cannot handle, with the reason.
    #[error("{0}")]
    Unsupported(String),
}

/// `Result` with [`PassError`].
pub type Result<T, E = PassError> = std::result::Result<T, E>;
