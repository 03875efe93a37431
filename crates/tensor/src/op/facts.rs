//! What passes and code generators know about an op without running it: its kind, its
//! effects and its role in a fusion group. Each op definition states these once.

/// The family of computation an op belongs to, which decides how a backend lowers it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OpKind {
    /// One output element from the same element of one input (`relu`, `x * 2`, casts).
    ElementwiseUnary,
    /// One output element from the same (broadcast) elements of two inputs.
    ElementwiseBinary,
    /// One output element from the same (broadcast) elements of three inputs (`where`).
    ElementwiseTernary,
    /// Several outputs, each element from the same (broadcast) elements of several inputs
    /// (the optimizer updates: new parameter and state from parameter, gradient and state).
    ElementwiseUpdate,
    /// Folds dimensions into fewer (`sum`, `max`).
    Reduction,
    /// Reinterprets the input's storage with another shape or strides; no data moves.
    View,
    /// Copies data into a new layout (`contiguous`).
    Copy,
    /// Matrix products (`matmul`, `linear`).
    Gemm,
    /// Convolutions and their gradients.
    Convolution,
    /// Pooling windows and their gradients.
    Pooling,
    /// Normalisations (batch, layer, group norm, softmax).
    Normalization,
    /// Gathers, scatters, joins and lookups driven by indices.
    Indexing,
    /// Loss functions.
    Loss,
    /// Quantize, dequantize and integer kernels.
    Quantized,
    /// Nothing is known (a user-defined op that says nothing about itself).
    Opaque,
}

impl OpKind {
    /// Whether each output element depends only on the same element of each input.
    pub fn is_elementwise(self) -> bool {
        matches!(
            self,
            OpKind::ElementwiseUnary
                | OpKind::ElementwiseBinary
                | OpKind::ElementwiseTernary
                | OpKind::ElementwiseUpdate
        )
    }
}

/// What running an op does besides computing its outputs from its inputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Effects {
    /// Draws from a random generator: two runs differ, and dropping the op changes the
    /// numbers drawn after it.
    pub random: bool,
    /// Writes into one of its inputs.
    pub in_place: bool,
    /// Unknown (a user-defined op that does not declare itself pure).
    pub unknown: bool,
}

impl Effects {
    /// No effects: the outputs are a function of the inputs and attributes.
    pub const PURE: Effects = Effects {
        random: false,
        in_place: false,
        unknown: false,
    };
    /// Draws from a random generator.
    pub const RANDOM: Effects = Effects {
        random: true,
        in_place: false,
        unknown: false,
    };
    /// Anything may happen.
    pub const UNKNOWN: Effects = Effects {
        random: false,
        in_place: false,
        unknown: true,
    };

    /// Whether the op may be erased when unused, merged with an equal op, or run at compile
    /// time on constants.
    pub fn is_pure(self) -> bool {
        self == Effects::PURE
    }
}

/// The kernel an op can head or join in fusion grouping.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FusionRole {
    /// Joins any group of the same shape.
    Elementwise,
    /// Starts a group whose elementwise epilogue follows it.
    Producer(Producer),
    /// Ends a group (its output is the group's output).
    Reduction,
    /// Runs as its own kernel.
    Alone,
}

/// The op a group's elementwise epilogue follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Producer {
    Gemm,
    Conv,
}

impl FusionRole {
    /// The usual role of a pure op of `kind`; impure ops run alone.
    pub fn of(kind: OpKind, effects: Effects) -> FusionRole {
        if !effects.is_pure() {
            return FusionRole::Alone;
        }
        match kind {
            k if k.is_elementwise() => FusionRole::Elementwise,
            OpKind::Gemm => FusionRole::Producer(Producer::Gemm),
            OpKind::Convolution => FusionRole::Producer(Producer::Conv),
            OpKind::Reduction => FusionRole::Reduction,
            _ => FusionRole::Alone,
        }
    }
}
