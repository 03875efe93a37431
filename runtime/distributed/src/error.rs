//! The one error type of `tessera-distributed`: every failure names the backend or the
//! collective and the rank involved, and keeps its cause.

use crate::Backend;
use tessera_nn::NnError;
use tessera_tensor::{DType, TensorError};

/// Everything that can go wrong in process groups and distributed data parallelism.
#[derive(Debug, thiserror::Error)]
pub enum DistributedError {
    /// The backend's engine was left out of this build (its cargo feature is off).
    #[error(
        "the {backend} backend is not built in: rebuild tessera-distributed with the `{feature}` feature"
    )]
    FeatureDisabled {
        backend: Backend,
        feature: &'static str,
    },

    /// The backend's library or device cannot be used on this machine.
    #[error("the {backend} backend is unavailable: {reason}")]
    BackendUnavailable { backend: Backend, reason: String },

    /// A process group already exists in this process (MPI initialises once per process).
    #[error("a {backend} process group is already initialised in this process")]
    AlreadyInitialized { backend: Backend },

    /// The launcher's environment (rank, world size) is missing or inconsistent.
    #[error("launcher environment: {0}")]
    Launcher(String),

    /// A collective was given tensors it cannot work on (dtype, device, shapes, root rank).
    #[error("{op}: {reason}")]
    Invalid { op: &'static str, reason: String },

    /// A collective cannot reduce this dtype.
    #[error("{op}: unsupported dtype {dtype} (float32 and float64 are reduced)")]
    UnsupportedDType { op: &'static str, dtype: DType },

    /// A tensor operation inside a collective failed.
    #[error("{op}: {source}")]
    Tensor {
        op: &'static str,
        #[source]
        source: TensorError,
    },

    /// The ranks' models differ, so their gradients cannot be averaged.
    #[error("DistributedDataParallel: rank {rank} {detail}")]
    ModelMismatch { rank: usize, detail: String },

    /// Gradient synchronisation was used out of order (a backward that did not finish
    /// reducing, a gradient ready twice).
    #[error("DistributedDataParallel: {0}")]
    Reducer(String),

    /// The communication thread stopped (after a failed collective, or at shutdown).
    #[error("DistributedDataParallel: the communication thread has stopped")]
    CommunicationStopped,

    /// Another rank reported an error, so this rank stops too instead of waiting for it.
    #[error("rank {rank}: stopping because rank(s) {failed:?} failed")]
    RemoteFailure { rank: usize, failed: Vec<usize> },
}

/// `Result` with [`DistributedError`].
pub type Result<T, E = DistributedError> = std::result::Result<T, E>;

impl DistributedError {
    pub(crate) fn tensor(op: &'static str) -> impl FnOnce(TensorError) -> Self {
        move |source| DistributedError::Tensor { op, source }
    }

    pub(crate) fn invalid(op: &'static str, reason: impl Into<String>) -> Self {
        DistributedError::Invalid {
            op,
            reason: reason.into(),
        }
    }
}

/// A distributed error met inside a module's forward, kept whole as the cause.
impl From<DistributedError> for NnError {
    fn from(e: DistributedError) -> Self {
        NnError::Graph(Box::new(e))
    }
}
