//! The kernel crate's one error type: what went wrong lowering or running a program, with the
//! node, kernel or slot it concerns and the cause kept.

use tessera_tensor::{DType, TensorError};

/// Errors of lowering, checking and running kernel programs.
#[derive(Debug, thiserror::Error)]
pub enum KernelError {
    /// The graph could not be read (a dangling operand, a node without a value).
    #[error("lowering {node}: {source}")]
    Graph {
        node: String,
        #[source]
        source: Box<tessera_fx::FxError>,
    },
    /// Fusion grouping failed on the graph.
    #[error("fusion grouping: {source}")]
    Grouping {
        #[source]
        source: Box<tessera_passes::PassError>,
    },
    /// A graph node's value was needed before it was defined.
    #[error("lowering: {node} has no value yet (the graph is not in topological order)")]
    Undefined { node: String },
    /// A kernel reads or writes outside a buffer, or has a type error: the lowering is wrong.
    #[error("kernel {kernel} is invalid: {message}")]
    Invalid { kernel: String, message: String },
    /// A program was run with the wrong number of inputs.
    #[error("the program takes {expected} inputs, got {got}")]
    InputCount { expected: usize, got: usize },
    /// An input's shape or dtype differs from the one the program was lowered for.
    #[error(
        "input {index} is {got_dtype:?}{got_shape:?}, the program was compiled for {dtype:?}{shape:?}"
    )]
    InputMeta {
        index: usize,
        shape: Vec<usize>,
        dtype: DType,
        got_shape: Vec<usize>,
        got_dtype: DType,
    },
    /// An input is strided differently from the example it was compiled for, and the compiled
    /// layout is not the packed one a copy could produce.
    #[error(
        "input {index} has strides {got:?} and offset {got_offset}; the program was compiled for strides {expected:?} and offset {offset}"
    )]
    InputLayout {
        index: usize,
        expected: Vec<usize>,
        offset: usize,
        got: Vec<usize>,
        got_offset: usize,
    },
    /// A slot holds a tensor of another shape or dtype than the program expects (an attribute
    /// changed shape after compiling).
    #[error("slot {slot} ({name}) holds {got_dtype:?}{got_shape:?}, expected {dtype:?}{shape:?}")]
    SlotMeta {
        slot: String,
        name: String,
        shape: Vec<usize>,
        dtype: DType,
        got_shape: Vec<usize>,
        got_dtype: DType,
    },
    /// A step of a program failed: a fallback op, an attribute read or a view.
    #[error("step {step} ({what}): {source}")]
    Step {
        step: usize,
        what: String,
        #[source]
        source: Box<TensorError>,
    },
    /// Computing a derived constant (a convolution's transformed weights) failed.
    #[error("deriving {what} for slot {slot}: {source}")]
    Derive {
        slot: String,
        what: String,
        #[source]
        source: Box<TensorError>,
    },
    /// Reading an attribute or calling a module through the environment failed.
    #[error("{what}: {source}")]
    Environment {
        what: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A run into caller buffers got another number of outputs than the program returns.
    #[error("the program returns {expected} outputs, {got} output tensors were given")]
    OutputCount { expected: usize, got: usize },
    /// A caller's output tensor differs in shape or dtype from the program's output.
    #[error(
        "output {index} is {got_dtype:?}{got_shape:?}, the program returns {dtype:?}{shape:?} there"
    )]
    OutputMeta {
        index: usize,
        shape: Vec<usize>,
        dtype: DType,
        got_shape: Vec<usize>,
        got_dtype: DType,
    },
    /// A caller's output tensor is not packed row-major in CPU storage.
    #[error(
        "output {index} (shape {shape:?}) has strides {strides:?} on {device:?}: outputs must be \
         contiguous CPU tensors"
    )]
    OutputLayout {
        index: usize,
        shape: Vec<usize>,
        strides: Vec<usize>,
        device: tessera_tensor::Device,
    },
    /// A caller's output tensor shares storage with something the run reads or writes.
    #[error("output {index} shares storage with {other}; give each output storage of its own")]
    OutputShares { index: usize, other: String },
    /// Writing into a caller's output tensor failed.
    #[error("writing output {index}: {source}")]
    Output {
        index: usize,
        #[source]
        source: Box<TensorError>,
    },
    /// A kernel's data-dependent load ([`crate::Expr::Gather`]) met an index outside its dim
    /// (a class target past the class count, a token id past the vocabulary): nothing was
    /// read there, and the run's outputs are not valid.
    #[error("kernel {kernel}: index {index} is out of bounds for a dimension of size {size}")]
    IndexOutOfRange {
        kernel: String,
        index: i64,
        size: usize,
    },
    /// A backend failed to execute a kernel.
    #[error("kernel {kernel}: {message}")]
    Backend { kernel: String, message: String },
}

/// Results of this crate.
pub type Result<T, E = KernelError> = std::result::Result<T, E>;
