//! The crate's error type, [`FxError`], and its [`Result`] alias.

use crate::parse::ParseError;
use crate::verify::VerifyErrors;
use tessera_nn::ModuleKind;

/// Everything that can go wrong while building, editing, printing or parsing a graph.
#[derive(Debug, thiserror::Error)]
pub enum FxError {
    /// A node id that does not name a node of this graph (erased, or from another graph).
    #[error("{node} is not a node of this graph")]
    UnknownNode { node: String },
    /// The op's meta function rejected the operands of a new call_function node.
    #[error("{node} = call_function[{op}] on ({shapes}): {source}")]
    OpMeta {
        node: String,
        op: String,
        shapes: String,
        #[source]
        source: Box<tessera_tensor::TensorError>,
    },
    /// An operand that yields several values where one tensor is needed.
    #[error("{node}: operand {operand} yields {count} values; select one with getitem")]
    MultiValueOperand {
        node: String,
        operand: String,
        count: usize,
    },
    /// A getitem whose index is past the operand's outputs.
    #[error("{node}: getitem[{index}] of {operand}, which yields {count} values")]
    GetItemOutOfRange {
        node: String,
        operand: String,
        index: usize,
        count: usize,
    },
    /// Erasing a node that other nodes still use.
    #[error("cannot erase {node}: it is used by {}", .users.join(", "))]
    EraseWithUsers { node: String, users: Vec<String> },
    /// A copied node whose operand is neither copied nor mapped to a node of the target graph.
    #[error("cannot copy {node}: its operand {operand} is neither copied nor in the value map")]
    UnmappedOperand { node: String, operand: String },
    /// A module repr that cannot be printed on one line and parsed back.
    #[error("module repr of {target} cannot be printed and parsed back: {repr:?}")]
    InvalidModuleRepr { target: String, repr: String },
    /// A module repr that names another kind than the module called, so the printed graph
    /// would parse back a different kind.
    #[error("module repr of {target} does not start with its kind {kind}: {repr:?}")]
    ModuleKindMismatch {
        target: String,
        kind: ModuleKind,
        repr: String,
    },
    /// A qualified attribute or module path that is not dotted identifiers.
    #[error("invalid qualified path {path:?}: expected dotted identifiers like `layer1.0.conv`")]
    InvalidPath { path: String },
    /// An owned module name that is empty, dotted or already used by an attribute or child.
    #[error("cannot add an owned module called {name:?}: the name is empty, dotted or taken")]
    ModuleName { name: String },
    /// An op-only edit of a node that is not a `call_function`.
    #[error("{node} is a {opcode} node, not a call_function")]
    NotCallFunction { node: String, opcode: &'static str },
    /// The graph text could not be parsed.
    #[error(transparent)]
    Parse(#[from] ParseError),
    /// The graph failed verification; every problem is listed.
    #[error(transparent)]
    Verify(#[from] VerifyErrors),
    /// Running a graph failed; `node` says which node was executing (`while executing %conv1 =
    /// call_module[conv1](%x)`).
    #[error("{node}: {reason}")]
    Run { node: String, reason: String },
    /// A saved graph artifact that cannot be written or read.
    #[error("{path}: {reason}")]
    Artifact { path: String, reason: String },
    /// Tracing failed: the forward raised (a shape error, or reading a traced value), or a
    /// value could not be mapped to the graph. The reason names the module path and op.
    #[error("trace: {reason}")]
    Trace { reason: String },
    /// An op that cannot be written as text or serialized (a user-defined `Custom` op).
    #[error("op {op} cannot be serialized: {reason}")]
    Unserializable { op: String, reason: String },
}

/// `Result` with [`FxError`].
pub type Result<T, E = FxError> = std::result::Result<T, E>;
