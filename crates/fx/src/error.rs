//! The crate's error type, [`FxError`], the typed causes its variants carry ([`RunError`],
//! [`ArtifactError`], [`TraceError`], [`PatternError`]), and its [`Result`] alias.

use crate::parse_error::ParseError;
use crate::verify::VerifyErrors;
use tessera_nn::{ModuleKind, NnError};
use tessera_tensor::TensorError;

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
    /// Running a graph failed at `node`, written as the interpreter saw it
    /// (`%conv1 = call_module[conv1](%x)`); `source` says what went wrong.
    #[error("while executing {node}: {source}")]
    Run {
        node: String,
        #[source]
        source: RunError,
    },
    /// The graph as a whole cannot run: wrong number of inputs, or no output node.
    #[error("graph: {source}")]
    RunGraph {
        #[source]
        source: RunError,
    },
    /// A saved graph artifact that cannot be written or read; `path` is the file or folder.
    #[error("{path}: {source}")]
    Artifact {
        path: String,
        #[source]
        source: ArtifactError,
    },
    /// Tracing or inlining failed; the cause names the module path and op.
    #[error("trace: {source}")]
    Trace {
        #[source]
        source: TraceError,
    },
    /// A `call_module` or `get_attr` target that names no module, parameter, buffer or
    /// constant, so torch.fx's state-dict layout has nowhere to take it from.
    #[error(
        "torch.fx layout: %{node} targets `{target}`, which is no module, parameter, buffer or constant"
    )]
    LayoutTarget { node: String, target: String },
    /// Writing or loading the state dict of torch.fx's layout failed (a missing or
    /// unexpected key, a shape mismatch: the cause names the key).
    #[error("torch.fx layout state dict: {source}")]
    LayoutState {
        #[source]
        source: Box<NnError>,
    },
    /// A rewrite whose pattern or replacement graph cannot be used.
    #[error("rewrite: {problem}")]
    Pattern { problem: PatternError },
    /// An op that cannot be written as text or serialized (a user-defined `Custom` op that
    /// is not registered).
    #[error("op {op} cannot be serialized: a custom op that is not registered has no text form")]
    Unserializable { op: String },
    /// Deriving the joint forward+backward graph failed; the cause names the node.
    #[error("autodiff: {source}")]
    Autodiff {
        #[source]
        source: AutodiffError,
    },
    /// An op whose attributes, as its definition writes them, do not read as attribute text.
    #[error("op {op} cannot be serialized: {source}")]
    AttributeText {
        op: String,
        #[source]
        source: ParseError,
    },
}

/// What went wrong while the interpreter executed one node (or the graph as a whole); the
/// [`FxError::Run`] around it names the node.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunError {
    /// A get_attr target that is neither a parameter or buffer of the root nor a constant.
    #[error("no parameter, buffer or constant `{target}`")]
    MissingAttribute { target: String },
    /// A call_module target that is not a submodule of the root.
    #[error("{source}")]
    NoSubmodule {
        target: String,
        #[source]
        source: Box<NnError>,
    },
    /// A called module that does not map one tensor to one tensor.
    #[error("{module_type} at `{target}` does not map one tensor to one tensor")]
    NotALayer { target: String, module_type: String },
    /// A one-tensor module given another number of operands.
    #[error("a one-tensor module got {count} operands")]
    OperandCount { count: usize },
    /// The called module failed (a shape error names its path).
    #[error("{source}")]
    Module {
        #[source]
        source: Box<NnError>,
    },
    /// The op failed on these tensors.
    #[error("{source}")]
    Op {
        #[source]
        source: Box<TensorError>,
    },
    /// A getitem past the values its operand yielded.
    #[error("no value {index}")]
    NoValue { index: usize },
    /// `run` given another number of inputs than the graph has placeholders.
    #[error("expected {expected} inputs, got {got}")]
    InputCount { expected: usize, got: usize },
    /// A graph without an output node.
    #[error("the graph has no output node")]
    NoOutput,
    /// A standalone graph's input or output whose shape or dtype differs from what the graph
    /// declares for it (an input of another size, or weights that do not belong to the graph).
    #[error("{role} {index} is {got_dtype}{got_shape:?} but the graph declares {dtype}{shape:?}")]
    Mismatch {
        role: Role,
        index: usize,
        shape: Vec<usize>,
        dtype: tessera_tensor::DType,
        got_shape: Vec<usize>,
        got_dtype: tessera_tensor::DType,
    },
    /// Fewer outputs than the graph declares buffer mutations.
    #[error("the graph writes {expected} buffers back but only {got} outputs were given")]
    MutationCount { expected: usize, got: usize },
    /// A buffer mutation output that could not be written back into the module.
    #[error("writing the new value of buffer `{target}` back: {source}")]
    WriteBack {
        target: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// An error of this crate raised by an [`crate::interpreter::Interpreter`] method that a
    /// user overrode.
    #[error("{0}")]
    Fx(#[source] Box<FxError>),
}

impl From<FxError> for RunError {
    fn from(e: FxError) -> Self {
        RunError::Fx(Box::new(e))
    }
}

/// Which end of a graph a [`RunError::Mismatch`] is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Input,
    Output,
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Role::Input => "input",
            Role::Output => "output",
        })
    }
}

/// Why a graph artifact (`graph.json` + `weights.safetensors`) could not be saved or loaded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ArtifactError {
    /// Creating, writing or reading a file failed.
    #[error("{source}")]
    Io {
        #[source]
        source: std::io::Error,
    },
    /// `graph.json` is not JSON of a graph (a dangling operand, a duplicate name, an unknown
    /// op), or the graph cannot be written as JSON.
    #[error("{source}")]
    Json {
        #[source]
        source: serde_json::Error,
    },
    /// `weights.safetensors` cannot be written or read.
    #[error("{source}")]
    Weights {
        #[source]
        source: Box<NnError>,
    },
    /// The loaded graph fails verification against itself and its weights (wrong shapes, a
    /// cycle, no output, a get_attr of a missing weight or of one of another shape or dtype).
    #[error("{source}")]
    Invalid {
        #[source]
        source: VerifyErrors,
    },
}

/// Why tracing or inlining failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TraceError {
    /// The traced forward failed: a shape error (naming the module path, op and shapes) or
    /// reading a traced value.
    #[error("{source}")]
    Forward {
        #[source]
        source: Box<NnError>,
    },
    /// A tensor that reached the graph without being produced by the traced forward.
    #[error("a traced tensor of shape {shape:?} was not produced by the traced forward")]
    ForeignTensor { shape: Vec<usize> },
    /// The forward wrote a traced value into a tensor of this shape that is not a buffer of
    /// the traced module, so the graph has nowhere to write it back.
    #[error(
        "the forward writes a traced value into a tensor of shape {shape:?} that is not a buffer of the traced module"
    )]
    StateWrite { shape: Vec<usize> },
    /// Inlining the call_module node `node` (of module `target`) failed.
    #[error("inlining {node} ({target}): {source}")]
    Inline {
        node: String,
        target: String,
        #[source]
        source: InlineError,
    },
    /// The ops traced for module `module` still call a module.
    #[error("{module}: a nested module call was not expanded")]
    NestedModuleCall { module: String },
    /// The graph traced for module `module` has no output.
    #[error("{module}: the traced module has no output")]
    NoOutput { module: String },
}

/// Why one call_module node could not be inlined.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InlineError {
    /// The target is not a submodule of the root.
    #[error("{source}")]
    NoSubmodule {
        #[source]
        source: Box<NnError>,
    },
    /// The module does not map one tensor to one tensor.
    #[error("the module does not map one tensor to one tensor")]
    NotALayer,
    /// The node has another number of operands than one.
    #[error("expected one operand, got {count}")]
    OperandCount { count: usize },
    /// The operand has no tensor meta to trace the module at.
    #[error("the operand has no value")]
    NoOperandValue,
}

/// Why the joint forward+backward graph of a graph could not be derived.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AutodiffError {
    /// The graph calls a module; autodiff needs the op-level graph (trace with
    /// `LeafPolicy::none()` or inline the module calls first).
    #[error("{node} calls a module: inline module calls before deriving the backward graph")]
    ModuleCall { node: String },
    /// A value to differentiate with respect to that no placeholder or get_attr names.
    #[error("no graph input or get_attr target is called `{name}`")]
    UnknownValue { name: String },
    /// A value to differentiate with respect to that is not a float tensor.
    #[error("`{name}` is {dtype}: only float values have gradients")]
    NotFloat {
        name: String,
        dtype: tessera_tensor::DType,
    },
    /// The op's backward formula failed on the meta tensors standing for the node's values
    /// (an op with no traceable derivative, such as a second derivative not defined).
    #[error("the backward formula of {node} failed: {source}")]
    Formula {
        node: String,
        #[source]
        source: Box<TensorError>,
    },
    /// A backward formula produced a gradient whose shape or dtype differs from its input's.
    #[error(
        "the backward formula of {node} gave input {input} a gradient {got} where the input is {expected}"
    )]
    GradientMeta {
        node: String,
        input: usize,
        expected: String,
        got: String,
    },
    /// The graph has no output node.
    #[error("the graph has no output")]
    NoOutput,
}

/// Why a rewrite's pattern or replacement cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PatternError {
    /// The pattern graph has no output node.
    #[error("the pattern has no output")]
    NoOutput,
    /// The pattern returns another number of values than one.
    #[error("a pattern must have one output, it has {count}")]
    OutputCount { count: usize },
    /// The replacement graph has no output node.
    #[error("the replacement has no output")]
    ReplacementNoOutput,
    /// Pattern and replacement take different numbers of inputs.
    #[error("the pattern takes {pattern} inputs but the replacement {replacement}")]
    InputCount { pattern: usize, replacement: usize },
}

/// `Result` with [`FxError`].
pub type Result<T, E = FxError> = std::result::Result<T, E>;
