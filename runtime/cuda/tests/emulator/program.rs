//! The parsed form of a PTX module: entries with their parameters, registers, shared arrays
//! and decoded instructions, branch targets resolved to instruction indices.

use std::collections::HashMap;
use std::fmt;

/// A PTX scalar type as it appears in an instruction or declaration suffix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ty {
    Pred,
    B32,
    B64,
    U32,
    U64,
    S32,
    S64,
    F32,
    F64,
    /// The 16-bit types of half elements (`emulator::half`).
    B16,
    U16,
    F16,
    BF16,
    /// A byte in memory (`ld/st.global.u8`, a bool or u8 element); registers holding it are
    /// `.b32`.
    U8,
    /// A signed byte in memory (`ld.global.s8`, an i8 element), loaded sign-extended into a
    /// `.b32` register.
    S8,
}

impl Ty {
    pub fn from_suffix(suffix: &str) -> Option<Ty> {
        Some(match suffix {
            "pred" => Ty::Pred,
            "b32" => Ty::B32,
            "b64" => Ty::B64,
            "u32" => Ty::U32,
            "u64" => Ty::U64,
            "s32" => Ty::S32,
            "s64" => Ty::S64,
            "f32" => Ty::F32,
            "f64" => Ty::F64,
            "b16" => Ty::B16,
            "u16" => Ty::U16,
            "f16" => Ty::F16,
            "bf16" => Ty::BF16,
            "u8" => Ty::U8,
            "s8" => Ty::S8,
            _ => return None,
        })
    }

    /// Register width in bits; a predicate counts as 1.
    pub fn bits(self) -> u32 {
        match self {
            Ty::Pred => 1,
            Ty::U8 | Ty::S8 => 8,
            Ty::B16 | Ty::U16 | Ty::F16 | Ty::BF16 => 16,
            Ty::B32 | Ty::U32 | Ty::S32 | Ty::F32 => 32,
            Ty::B64 | Ty::U64 | Ty::S64 | Ty::F64 => 64,
        }
    }

    pub fn is_float(self) -> bool {
        matches!(self, Ty::F32 | Ty::F64)
    }

    pub fn is_signed(self) -> bool {
        matches!(self, Ty::S8 | Ty::S32 | Ty::S64)
    }
}

/// A special register of the x dimension (grids and blocks are 1-D).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Special {
    TidX,
    NtidX,
    CtaidX,
    NctaidX,
}

/// Index of a register in an entry's register table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RegId(pub u32);

/// The base of an address operand `[base+offset]`.
#[derive(Debug, Clone, PartialEq)]
pub enum AddressBase {
    Reg(RegId),
    /// A parameter or shared array name.
    Symbol(String),
}

/// One instruction operand.
#[derive(Debug, Clone, PartialEq)]
pub enum Operand {
    Reg(RegId),
    Special(Special),
    /// An integer literal, sign-extended to 64 bits.
    Int(i64),
    /// `0f` hex float literal (its bits).
    F32Bits(u32),
    /// `0d` hex float literal or a decimal float literal (its bits).
    F64Bits(u64),
    /// A name: a label, a parameter or a shared array.
    Symbol(String),
    Address {
        base: AddressBase,
        offset: i64,
    },
    Vector(Vec<RegId>),
}

/// A comparison of `setp`; the `U` forms are true when either operand is NaN.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cmp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    Equ,
    Neu,
    Ltu,
    Leu,
    Gtu,
    Geu,
    Num,
    Nan,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IntOp {
    Add,
    Sub,
    MulLo,
    /// The high half of the double-width unsigned product (`mul.hi.u64`).
    MulHi,
    Div,
    Rem,
    Min,
    Max,
    And,
    Or,
    Xor,
    Shl,
    Shr,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FloatOp {
    Add,
    Sub,
    Mul,
    Div,
    Min,
    Max,
    CopySign,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FloatUnaryOp {
    Neg,
    Abs,
    Sqrt,
    Rcp,
    Ex2,
    Lg2,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TestpKind {
    Finite,
    Infinite,
    Number,
    NotANumber,
}

/// A rounding modifier of `cvt`: `Nearest`..`Up` round a float result, the `Int` forms
/// round to an integral value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rounding {
    Nearest,
    Zero,
    Down,
    Up,
    IntNearest,
    IntZero,
    IntDown,
    IntUp,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Space {
    Global,
    Shared,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShflMode {
    Bfly,
    Down,
}

/// A decoded opcode: what the instruction does and on which types.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Op {
    Mov(Ty),
    LdParam(Ty),
    CvtaToGlobal,
    Load {
        space: Space,
        ty: Ty,
        lanes: u8,
    },
    Store {
        space: Space,
        ty: Ty,
        lanes: u8,
    },
    Int(IntOp, Ty),
    MulWide(Ty),
    MadLo(Ty),
    Not(Ty),
    Setp(Cmp, Ty),
    Float(FloatOp, Ty),
    Fma(Ty),
    FloatUnary(FloatUnaryOp, Ty),
    Selp(Ty),
    Testp(TestpKind, Ty),
    Cvt {
        dst: Ty,
        src: Ty,
        rounding: Option<Rounding>,
    },
    /// `atom.global.exch.b64 d, [a], b`: the old value into `d`, `b` stored; atomic, so
    /// threads exchanging one word in a launch do not conflict.
    AtomExch,
    Bra,
    Ret,
    BarSync,
    Shfl(ShflMode),
    /// The GEMM kernels' instructions (`mma.sync`, tf32/half conversions, 16-bit accesses).
    TensorCore(super::tensor_core::TensorCoreOp),
}

/// A predicate guard `@%p` or `@!%p`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Guard {
    pub reg: RegId,
    pub negated: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Instr {
    pub line: usize,
    pub guard: Option<Guard>,
    pub op: Op,
    pub operands: Vec<Operand>,
    /// For branches: the index of the target instruction.
    pub target: Option<usize>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Param {
    pub name: String,
    pub ty: Ty,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Register {
    pub name: String,
    pub ty: Ty,
}

#[derive(Debug, Clone, PartialEq)]
pub struct SharedArray {
    pub name: String,
    pub offset: u64,
    pub bytes: u64,
}

/// One `.entry`: a kernel that can be launched.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Entry {
    pub name: String,
    pub params: Vec<Param>,
    pub registers: Vec<Register>,
    pub shared: Vec<SharedArray>,
    pub shared_bytes: u64,
    pub instrs: Vec<Instr>,
    pub labels: HashMap<String, usize>,
}

impl Entry {
    pub fn register(&self, id: RegId) -> &Register {
        &self.registers[id.0 as usize]
    }
}

/// A parsed PTX module.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Module {
    pub version: String,
    pub target: String,
    pub entries: Vec<Entry>,
}

impl fmt::Display for Special {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Special::TidX => "%tid.x",
            Special::NtidX => "%ntid.x",
            Special::CtaidX => "%ctaid.x",
            Special::NctaidX => "%nctaid.x",
        })
    }
}
