//! The scalar level of the kernel IR: element types, the primitive functions every backend
//! implements, and the expressions of a kernel's per-element DAG.

use crate::{BufferId, IndexExpr, ValueId};
use std::fmt;
use tessera_tensor::DType;

/// The type of a scalar value: a float buffer element or a comparison's truth value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ScalarType {
    F32,
    F64,
    Bool,
}

impl ScalarType {
    /// The kernel type of a buffer of `dtype`, for the dtypes kernels load and store.
    pub fn of_buffer(dtype: DType) -> Option<ScalarType> {
        match dtype {
            DType::F32 => Some(ScalarType::F32),
            DType::F64 => Some(ScalarType::F64),
            _ => None,
        }
    }

    /// The type of a value computed for a tensor of `dtype` (bool included).
    pub fn of_value(dtype: DType) -> Option<ScalarType> {
        match dtype {
            DType::Bool => Some(ScalarType::Bool),
            d => ScalarType::of_buffer(d),
        }
    }

    /// The tensor dtype of a buffer of this type.
    pub fn dtype(self) -> DType {
        match self {
            ScalarType::F32 => DType::F32,
            ScalarType::F64 => DType::F64,
            ScalarType::Bool => DType::Bool,
        }
    }

    pub fn is_float(self) -> bool {
        self != ScalarType::Bool
    }
}

impl fmt::Display for ScalarType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ScalarType::F32 => "f32",
            ScalarType::F64 => "f64",
            ScalarType::Bool => "bool",
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

/// A float function of two floats of one type.
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
}

/// An ordered comparison of two floats of one type (false when either is NaN, except `ne`).
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

/// One node of a kernel's scalar expression DAG. Operands are earlier values.
#[derive(Debug, Clone, PartialEq)]
pub enum Expr {
    /// The element of `buffer` at `index` (a function of the loop indices).
    Load {
        buffer: BufferId,
        index: IndexExpr,
    },
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
    /// Conversion to the value's type: f32 <-> f64 rounds to nearest, bool -> float gives 0 or
    /// 1, float -> bool is `x != 0`.
    Cast(ValueId),
}

/// A value of the DAG: its type and how it is computed.
#[derive(Debug, Clone, PartialEq)]
pub struct Value {
    pub ty: ScalarType,
    pub expr: Expr,
}
