//! The emulator's one error enum: parse errors name the line, run-time faults name the line,
//! the block and the thread, so a renderer bug points at the PTX it produced.

use thiserror::Error;

/// Everything that can go wrong while parsing or running a PTX module.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum EmuError {
    #[error("line {line}: {message}")]
    Syntax { line: usize, message: String },
    #[error(
        "line {line}: unknown instruction `{opcode}` (outside the PTX subset the emulator executes)"
    )]
    UnknownInstruction { line: usize, opcode: String },
    #[error("line {line}: `{opcode}` is not in the PTX subset: {reason}")]
    UnsupportedForm {
        line: usize,
        opcode: String,
        reason: String,
    },
    #[error("no entry `{0}` in the module")]
    NoSuchEntry(String),
    #[error("launch of `{entry}`: {reason}")]
    InvalidLaunch { entry: String, reason: String },
    #[error("no global buffer named `{0}`")]
    NoSuchBuffer(String),
    /// A host-side access (a copy, a free) at an address no live buffer covers.
    #[error("{what}: {fault}")]
    HostAccess { what: &'static str, fault: Fault },
    #[error(
        "global buffer `{name}` holds {bytes} bytes, not a whole number of {element_bytes}-byte elements"
    )]
    BufferElementSize {
        name: String,
        bytes: usize,
        element_bytes: usize,
    },
    #[error("line {line}, block {block}, thread {thread}: {fault}")]
    Fault {
        line: usize,
        block: u32,
        thread: u32,
        fault: Fault,
    },
    #[error(
        "line {line}, block {block}, warp {warp}: a warp-collective shfl.sync or mma.sync reached by a diverged warp ({detail})"
    )]
    ShuffleDivergence {
        line: usize,
        block: u32,
        warp: u32,
        detail: String,
    },
    #[error("block {block}: barrier deadlock ({detail})")]
    BarrierDeadlock { block: u32, detail: String },
    #[error(
        "block {block}, thread {thread}: more than {limit} instructions without reaching a barrier, shuffle or exit (an endless loop?)"
    )]
    StepLimit { block: u32, thread: u32, limit: u64 },
}

/// A run-time fault of one thread at one instruction.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum Fault {
    #[error("{access} of {bytes} bytes at {space} address {address:#x} is out of bounds")]
    OutOfBounds {
        access: &'static str,
        space: &'static str,
        address: u64,
        bytes: u64,
    },
    #[error("{access} at {space} address {address:#x} is not {align}-byte aligned")]
    Misaligned {
        access: &'static str,
        space: &'static str,
        address: u64,
        align: u64,
    },
    #[error("register {0} is read before it is written")]
    UninitialisedRegister(String),
    #[error("register {register} holds a {held}-bit value, the instruction wants {wanted} bits")]
    RegisterWidth {
        register: String,
        held: u32,
        wanted: u32,
    },
    #[error("integer division by zero")]
    DivisionByZero,
    #[error("no parameter named `{0}`")]
    NoSuchParam(String),
    #[error("no shared array named `{0}`")]
    NoSuchShared(String),
    #[error(
        "shared memory race at address {address:#x}: {other} {other_access} it since the last barrier, this thread {access} it"
    )]
    SharedRace {
        address: u64,
        other: String,
        other_access: &'static str,
        access: &'static str,
    },
    #[error(
        "global address {address:#x} of buffer `{buffer}` written by thread {other} and by this thread in one launch"
    )]
    ConflictingGlobalWrite {
        address: u64,
        buffer: String,
        other: u64,
    },
    #[error("operand {0} cannot be used here")]
    BadOperand(String),
}

pub type Result<T> = std::result::Result<T, EmuError>;
