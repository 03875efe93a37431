//! The scalar level of the kernel IR: element types, the primitive functions every backend
//! implements, and the expressions of a kernel's per-element DAG.

use crate::{BufferId, IndexExpr, ValueId};
use std::fmt;
use tessera_tensor::DType;

/// The type of a scalar value: a float buffer element, a comparison's truth value (stored one
/// byte per element, 0 or 1, as a bool tensor), or a 64-bit integer (an i64 tensor's element:
/// a counter, a class index).
///
/// The narrow integer types (`U8`, `I8`, `I32`) are storage formats too: a narrow value is
/// loaded, stored, or converted to and from i64 ([`Expr::Cast`]: widening is exact, narrowing
/// saturates), as the eager kernels convert through f64 and saturate (Rust's `as`).
///
/// The half types (`F16`, `BF16`) are storage formats: a half value is loaded, stored, or
/// converted to and from f32 ([`Expr::Cast`], which rounds to nearest even towards a half
/// type), and all arithmetic on it happens in f32 ([`ScalarType::compute`]), as the eager
/// kernels compute half ops in f32 and round each op's result once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ScalarType {
    F32,
    F64,
    F16,
    BF16,
    Bool,
    I64,
    U8,
    I8,
    I32,
}

impl ScalarType {
    /// The kernel type of a buffer of `dtype`, for the dtypes kernels load and store.
    pub fn of_buffer(dtype: DType) -> Option<ScalarType> {
        match dtype {
            DType::F32 => Some(ScalarType::F32),
            DType::F64 => Some(ScalarType::F64),
            DType::F16 => Some(ScalarType::F16),
            DType::BF16 => Some(ScalarType::BF16),
            DType::Bool => Some(ScalarType::Bool),
            DType::I64 => Some(ScalarType::I64),
            DType::U8 => Some(ScalarType::U8),
            DType::I8 => Some(ScalarType::I8),
            DType::I32 => Some(ScalarType::I32),
        }
    }

    /// Whether this is a narrow integer storage type (u8, i8, i32), converted to and from i64.
    pub fn is_narrow_int(self) -> bool {
        matches!(self, ScalarType::U8 | ScalarType::I8 | ScalarType::I32)
    }

    /// The range a narrow integer type holds, as i64s (`None` for the other types).
    pub fn int_range(self) -> Option<(i64, i64)> {
        match self {
            ScalarType::U8 => Some((0, u8::MAX.into())),
            ScalarType::I8 => Some((i8::MIN.into(), i8::MAX.into())),
            ScalarType::I32 => Some((i32::MIN.into(), i32::MAX.into())),
            _ => None,
        }
    }

    /// Whether values of this type are integers held in registers as integers: i64 and the
    /// narrow integer types (kernels with them stay scalar).
    pub fn is_integer(self) -> bool {
        self == ScalarType::I64 || self.is_narrow_int()
    }

    /// Whether this is a half storage type (f16 or bf16), converted to f32 for arithmetic.
    pub fn is_half(self) -> bool {
        matches!(self, ScalarType::F16 | ScalarType::BF16)
    }

    /// Whether arithmetic, comparisons and reductions compute in this type (f32 and f64).
    pub fn is_arithmetic(self) -> bool {
        matches!(self, ScalarType::F32 | ScalarType::F64)
    }

    /// The type values of this type are computed in: f32 for the half types, i64 for the
    /// narrow integer types, else itself.
    pub fn compute(self) -> ScalarType {
        if self.is_half() {
            ScalarType::F32
        } else if self.is_narrow_int() {
            ScalarType::I64
        } else {
            self
        }
    }

    /// Bytes per element of a buffer of this type.
    pub fn bytes(self) -> usize {
        match self {
            ScalarType::F64 | ScalarType::I64 => 8,
            ScalarType::F32 | ScalarType::I32 => 4,
            ScalarType::F16 | ScalarType::BF16 => 2,
            ScalarType::Bool | ScalarType::U8 | ScalarType::I8 => 1,
        }
    }

    /// The type of a value computed for a tensor of `dtype` (the same as its buffer's).
    pub fn of_value(dtype: DType) -> Option<ScalarType> {
        ScalarType::of_buffer(dtype)
    }

    /// The tensor dtype of a buffer of this type.
    pub fn dtype(self) -> DType {
        match self {
            ScalarType::F32 => DType::F32,
            ScalarType::F64 => DType::F64,
            ScalarType::F16 => DType::F16,
            ScalarType::BF16 => DType::BF16,
            ScalarType::Bool => DType::Bool,
            ScalarType::I64 => DType::I64,
            ScalarType::U8 => DType::U8,
            ScalarType::I8 => DType::I8,
            ScalarType::I32 => DType::I32,
        }
    }

    /// Whether values of this type are floats (the half storage types included).
    pub fn is_float(self) -> bool {
        !(self == ScalarType::Bool || self.is_integer())
    }

    /// Whether constants, comparisons, selections and the integer [`BinaryFn`]s (add, sub, mul)
    /// compute in this type: f32, f64 and i64.
    pub fn is_numeric(self) -> bool {
        self.is_arithmetic() || self == ScalarType::I64
    }
}

impl fmt::Display for ScalarType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ScalarType::F32 => "f32",
            ScalarType::F64 => "f64",
            ScalarType::F16 => "f16",
            ScalarType::BF16 => "bf16",
            ScalarType::Bool => "bool",
            ScalarType::I64 => "i64",
            ScalarType::U8 => "u8",
            ScalarType::I8 => "i8",
            ScalarType::I32 => "i32",
        })
    }
}

/// A float function of one float.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UnaryFn {
    Neg,
    Abs,
    Sqrt,
    Exp,
    Log,
    Sin,
    Cos,
    Tanh,
    Erf,
}

impl UnaryFn {
    pub const ALL: [UnaryFn; 9] = [
        UnaryFn::Neg,
        UnaryFn::Abs,
        UnaryFn::Sqrt,
        UnaryFn::Exp,
        UnaryFn::Log,
        UnaryFn::Sin,
        UnaryFn::Cos,
        UnaryFn::Tanh,
        UnaryFn::Erf,
    ];

    pub fn name(self) -> &'static str {
        match self {
            UnaryFn::Neg => "neg",
            UnaryFn::Abs => "abs",
            UnaryFn::Sqrt => "sqrt",
            UnaryFn::Exp => "exp",
            UnaryFn::Log => "log",
            UnaryFn::Sin => "sin",
            UnaryFn::Cos => "cos",
            UnaryFn::Tanh => "tanh",
            UnaryFn::Erf => "erf",
        }
    }

    /// Whether the function is transcendental: backends call [`crate::math`] for it (or emit
    /// an approximation of documented accuracy) instead of one instruction.
    pub fn is_transcendental(self) -> bool {
        !matches!(self, UnaryFn::Neg | UnaryFn::Abs | UnaryFn::Sqrt)
    }
}

/// A function of two values of one type: floats, or i64 for add, sub and mul (which wrap on
/// overflow, as the eager i64 kernels do for values below 2^53, the only ones they keep exact).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BinaryFn {
    Add,
    Sub,
    Mul,
    Div,
    Pow,
}

impl BinaryFn {
    pub fn name(self) -> &'static str {
        match self {
            BinaryFn::Add => "add",
            BinaryFn::Sub => "sub",
            BinaryFn::Mul => "mul",
            BinaryFn::Div => "div",
            BinaryFn::Pow => "pow",
        }
    }

    /// Whether the function is defined on i64 values.
    pub fn is_integer(self) -> bool {
        matches!(self, BinaryFn::Add | BinaryFn::Sub | BinaryFn::Mul)
    }
}

/// An ordered comparison of two values of one type, floats or i64 (for floats false when either
/// is NaN, except `ne`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CompareFn {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

impl CompareFn {
    pub fn name(self) -> &'static str {
        match self {
            CompareFn::Eq => "eq",
            CompareFn::Ne => "ne",
            CompareFn::Lt => "lt",
            CompareFn::Le => "le",
            CompareFn::Gt => "gt",
            CompareFn::Ge => "ge",
        }
    }

    /// The comparison on two floats, as Rust's `PartialOrd` (the eager kernels') decides it.
    pub fn eval<T: PartialOrd>(self, a: T, b: T) -> bool {
        match self {
            CompareFn::Eq => a == b,
            CompareFn::Ne => a != b,
            CompareFn::Lt => a < b,
            CompareFn::Le => a <= b,
            CompareFn::Gt => a > b,
            CompareFn::Ge => a >= b,
        }
    }
}

/// How a reduction combines the values of its points into an accumulator.
///
/// `ArgMax` and `ArgMin` are *arg reductions*: their operand is a float, their value the i64
/// position of the extreme among the reduction loops' points, flattened in row-major order
/// (the eager `argmax` along one dim, or over a flattened tensor). A backend carries a pair
/// per accumulator, the best value (from [`ReduceFn::identity`]) and its position (from
/// [`ARG_NONE`]), and folds a candidate in when [`ReduceFn::replaces`] says so, in any
/// order: the lowest position of the extreme wins, NaN being the extreme, so partial results
/// of threads combine to the eager kernel's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReduceFn {
    /// `acc + x`, from 0.
    Sum,
    /// The larger, NaN winning (as the eager `amax`), from -inf.
    Max,
    /// The smaller, NaN winning, from +inf.
    Min,
    /// The position of the first largest value, the first NaN winning (as the eager `argmax`).
    ArgMax,
    /// The position of the first smallest value, the first NaN winning.
    ArgMin,
}

/// The position an arg reduction's accumulator starts from: larger than every position, so
/// that any point, even one equal to the initial value, replaces it.
pub const ARG_NONE: i64 = i64::MAX;

impl ReduceFn {
    pub fn name(self) -> &'static str {
        match self {
            ReduceFn::Sum => "sum",
            ReduceFn::Max => "max",
            ReduceFn::Min => "min",
            ReduceFn::ArgMax => "argmax",
            ReduceFn::ArgMin => "argmin",
        }
    }

    /// Whether the reduction gives a position (an i64) of its float operand's extreme.
    pub fn is_arg(self) -> bool {
        matches!(self, ReduceFn::ArgMax | ReduceFn::ArgMin)
    }

    /// Whether the extreme is the largest value (`Max`, `ArgMax`).
    pub fn is_largest(self) -> bool {
        matches!(self, ReduceFn::Max | ReduceFn::ArgMax)
    }

    /// The accumulator's initial value (an arg reduction's initial best value).
    pub fn identity(self) -> f64 {
        match self {
            ReduceFn::Sum => 0.0,
            ReduceFn::Max | ReduceFn::ArgMax => f64::NEG_INFINITY,
            ReduceFn::Min | ReduceFn::ArgMin => f64::INFINITY,
        }
    }

    /// For an arg reduction holding `best` at position `at`: whether the candidate `x` at
    /// position `j` replaces it. It does when it is more extreme, or NaN where `best` is not,
    /// or as extreme (both NaN included) at a lower position.
    pub fn replaces<T: PartialOrd + Copy>(self, best: T, at: i64, x: T, j: i64) -> bool {
        #[allow(clippy::eq_op)]
        let nan = |v: T| v != v;
        let more = if self.is_largest() {
            x > best
        } else {
            x < best
        };
        let same = x == best || (nan(x) && nan(best));
        more || (nan(x) && !nan(best)) || (same && j < at)
    }

    /// One step of the accumulation, in the interpreter's arithmetic (value reductions; an
    /// arg reduction keeps the value its candidate replaces by [`ReduceFn::replaces`]).
    pub fn combine<T: PartialOrd + std::ops::Add<Output = T> + Copy>(self, acc: T, x: T) -> T {
        // `x != x` is NaN: it wins, and stays once it has won.
        #[allow(clippy::eq_op)]
        let nan = |v: T| v != v;
        match self {
            ReduceFn::Sum => acc + x,
            _ if nan(acc) => acc,
            _ if nan(x) => x,
            _ if self.is_largest() => {
                if x > acc {
                    x
                } else {
                    acc
                }
            }
            _ => {
                if x < acc {
                    x
                } else {
                    acc
                }
            }
        }
    }
}

/// One node of a kernel's scalar expression DAG. Operands are earlier values.
#[derive(Debug, Clone, PartialEq)]
pub enum Expr {
    /// The element of `buffer` at `index` (a function of the loop indices).
    Load {
        buffer: BufferId,
        index: IndexExpr,
    },
    /// The element of `buffer` at `index` plus each bound's coordinate times its stride, when
    /// every coordinate lies inside its dim; `fill` (rounded to the value's type) elsewhere,
    /// where no memory is read. The taps of a padded window ([`crate::guard`]); f32, f64 or
    /// i64 (the saved indices a max-pooling gradient reads around each input position).
    LoadIf {
        buffer: BufferId,
        index: IndexExpr,
        bounds: Vec<crate::Bound>,
        fill: f64,
    },
    /// A data-dependent load ([`crate::gather`]): the element of `buffer` at `index` plus
    /// `by * stride`, where `by` is an i64 value computed at the point (a class target, a
    /// token id) that must lie in `0..len`. Out of range, no memory is read, the value is 0 and
    /// the kernel records the fault in its `status` buffer (an i64 scratch of
    /// [`crate::gather::STATUS_LEN`] elements the runner zeroes before the kernel and checks
    /// after it, failing the run with [`crate::KernelError::IndexOutOfRange`]).
    Gather {
        buffer: BufferId,
        index: IndexExpr,
        by: ValueId,
        stride: usize,
        len: usize,
        status: BufferId,
    },
    /// The current index of one of the kernel's output loops, as an i64: the class position a
    /// gradient compares with its target.
    LoopIndex(crate::LoopId),
    /// A constant, rounded to the value's type.
    Const(f64),
    Unary(UnaryFn, ValueId),
    Binary(BinaryFn, ValueId, ValueId),
    /// A comparison of two floats, giving a bool.
    Compare(CompareFn, ValueId, ValueId),
    /// `cond ? a : b`.
    Select {
        cond: ValueId,
        a: ValueId,
        b: ValueId,
    },
    /// Conversion to the value's type: f32 <-> f64 rounds to nearest, bool -> number gives 0 or
    /// 1, number -> bool is `x != 0`; float -> i64 truncates towards zero, saturating, NaN
    /// giving 0, and i64 -> float goes through f64 (rounding to nearest there, then to f32), as
    /// the eager cast (`as` through f64) does; a half type converts only to and from f32
    /// (f32 -> f16 and f32 -> bf16 round to nearest even, overflowing to infinity; the widening
    /// is exact); a narrow integer type converts only to and from i64 (widening exactly,
    /// narrowing by saturating to the type's range).
    Cast(ValueId),
    /// The accumulation of `value` over every point of the kernel's reduction loops, for the
    /// current point of its output loops (see [`crate::Stages`] for when it is available).
    Reduce(ReduceFn, ValueId),
}

/// A value of the DAG: its type and how it is computed.
#[derive(Debug, Clone, PartialEq)]
pub struct Value {
    pub ty: ScalarType,
    pub expr: Expr,
}
