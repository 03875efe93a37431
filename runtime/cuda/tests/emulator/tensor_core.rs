//! The instructions of the generated GEMM kernels beyond the elementwise subset, kept apart
//! from the rest of the emulator: `mma.sync.aligned` (`m16n8k16` on f16/bf16 pairs and
//! `m16n8k8` on tf32, f32 accumulators) as a warp-collective operation with the PTX ISA's
//! fragment layouts, `cvt.rna.tf32.f32`, `cvt.rn.{f16x2,bf16x2}.f32`, 16-bit global loads and
//! stores through 32-bit registers (zero-extended / truncated), and 32-bit and 16-byte vector
//! shared-memory accesses.
//!
//! An `mma` sums in f64 (every product of f16, bf16 or tf32 values is exact there) and rounds
//! once to f32: the hardware's internal accumulation order and precision are not modelled. A tf32 operand whose low 13 bits are not zero is an error (the renderer
//! must round with `cvt.rna.tf32.f32`).

use super::error::{EmuError, Fault, Result};
use super::float;
use super::program::{Instr, Op, Operand, Space, Ty};
use super::scheduler::WARP_SIZE;
use super::thread::{BlockEnv, State, Thread};

/// The `mma` shapes and input types.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MmaKind {
    F16,
    Bf16,
    Tf32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TensorCoreOp {
    Mma(MmaKind),
    /// `cvt.rna.tf32.f32`: round to 10 mantissa bits, ties away from zero.
    CvtTf32,
    /// `cvt.rn.f16x2.f32 d, a, b` (or bf16x2): `a` rounded into the upper half, `b` the lower.
    CvtHalf2 {
        bf16: bool,
    },
    /// `ld.global.u16` into a 32-bit register (zero-extended).
    LoadU16,
    /// `st.{global,shared}.u16` from a 32-bit register (its low half).
    StoreU16(Space),
}

impl TensorCoreOp {
    pub fn operand_count(self) -> usize {
        match self {
            TensorCoreOp::Mma(_) => 4,
            TensorCoreOp::CvtHalf2 { .. } => 3,
            TensorCoreOp::CvtTf32 | TensorCoreOp::LoadU16 | TensorCoreOp::StoreU16(_) => 2,
        }
    }
}

/// Decodes the opcodes of this file's forms; `None` for any other opcode.
pub fn decode(opcode: &str) -> Option<Op> {
    let tc = |op| Some(Op::TensorCore(op));
    match opcode {
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" => tc(TensorCoreOp::Mma(MmaKind::F16)),
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32" => {
            tc(TensorCoreOp::Mma(MmaKind::Bf16))
        }
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32" => {
            tc(TensorCoreOp::Mma(MmaKind::Tf32))
        }
        "cvt.rna.tf32.f32" => tc(TensorCoreOp::CvtTf32),
        "cvt.rn.f16x2.f32" => tc(TensorCoreOp::CvtHalf2 { bf16: false }),
        "cvt.rn.bf16x2.f32" => tc(TensorCoreOp::CvtHalf2 { bf16: true }),
        "ld.global.u16" => tc(TensorCoreOp::LoadU16),
        "st.global.u16" => tc(TensorCoreOp::StoreU16(Space::Global)),
        "st.shared.u16" => tc(TensorCoreOp::StoreU16(Space::Shared)),
        "ld.shared.b32" => Some(Op::Load {
            space: Space::Shared,
            ty: Ty::B32,
            lanes: 1,
        }),
        "st.shared.b32" => Some(Op::Store {
            space: Space::Shared,
            ty: Ty::B32,
            lanes: 1,
        }),
        "ld.shared.v4.f32" => Some(Op::Load {
            space: Space::Shared,
            ty: Ty::F32,
            lanes: 4,
        }),
        "st.shared.v4.f32" => Some(Op::Store {
            space: Space::Shared,
            ty: Ty::F32,
            lanes: 4,
        }),
        "ld.shared.v2.f64" => Some(Op::Load {
            space: Space::Shared,
            ty: Ty::F64,
            lanes: 2,
        }),
        "st.shared.v2.f64" => Some(Op::Store {
            space: Space::Shared,
            ty: Ty::F64,
            lanes: 2,
        }),
        _ => None,
    }
}

/// `x` rounded to tf32 (as `cvt.rna.tf32.f32`), its low 13 bits zero; NaN is canonical.
pub fn round_tf32(bits: u32) -> u32 {
    if f32::from_bits(bits).is_nan() {
        return 0x7fff_ffff;
    }
    // Adding half of the dropped range to the magnitude rounds ties away from zero; a carry
    // into the exponent is the right result (up to infinity).
    bits.wrapping_add(0x1000) & !0x1fff
}

/// The f32 `x` rounded to nearest even as an f16 (`bf16`: as a bf16), its 16 bits.
pub fn round_half(x: f32, bf16: bool) -> u16 {
    if bf16 {
        if x.is_nan() {
            return 0x7fff;
        }
        half::bf16::from_f32(x).to_bits()
    } else {
        if x.is_nan() {
            return 0x7fff;
        }
        half::f16::from_f32(x).to_bits()
    }
}

fn aligned(
    address: u64,
    bytes: u64,
    space: &'static str,
    access: &'static str,
) -> std::result::Result<u64, Fault> {
    if !address.is_multiple_of(bytes) {
        return Err(Fault::Misaligned {
            access,
            space,
            address,
            align: bytes,
        });
    }
    Ok(address)
}

/// Runs one of this file's per-thread instructions (an `mma` only reports the arrival).
pub fn execute(
    env: &mut BlockEnv,
    thread: &mut Thread,
    instr: &Instr,
    op: TensorCoreOp,
) -> std::result::Result<bool, Fault> {
    let ops = &instr.operands;
    match op {
        TensorCoreOp::Mma(_) => return Ok(true),
        TensorCoreOp::CvtTf32 => {
            let a = env.read(thread, &ops[1], Ty::F32)? as u32;
            env.write(thread, &ops[0], Ty::B32, round_tf32(a) as u64)?;
        }
        TensorCoreOp::CvtHalf2 { bf16 } => {
            let a = f32::from_bits(env.read(thread, &ops[1], Ty::F32)? as u32);
            let b = f32::from_bits(env.read(thread, &ops[2], Ty::F32)? as u32);
            let packed = ((round_half(a, bf16) as u64) << 16) | round_half(b, bf16) as u64;
            env.write(thread, &ops[0], Ty::B32, packed)?;
        }
        TensorCoreOp::LoadU16 => {
            let address = aligned(env.address(thread, &ops[1])?, 2, "global", "load")?;
            let bytes = env.global.load(address, 2)?;
            let value = u16::from_le_bytes([bytes[0], bytes[1]]) as u64;
            env.write(thread, &ops[0], Ty::B32, value)?;
        }
        TensorCoreOp::StoreU16(space) => {
            let value = env.read(thread, &ops[1], Ty::B32)? as u16;
            let data = value.to_le_bytes();
            match space {
                Space::Global => {
                    let address = aligned(env.address(thread, &ops[0])?, 2, "global", "store")?;
                    let writer = env.ctaid as u64 * env.ntid as u64 + thread.tid as u64;
                    env.global.store(address, &data, writer)?;
                }
                Space::Shared => {
                    let address = aligned(env.address(thread, &ops[0])?, 2, "shared", "store")?;
                    env.shared.store(address, &data, thread.tid)?;
                }
            }
        }
    }
    Ok(false)
}

/// The registers of a brace-list operand.
fn vector(
    instr: &Instr,
    i: usize,
    len: usize,
) -> std::result::Result<&[super::program::RegId], Fault> {
    match &instr.operands[i] {
        Operand::Vector(regs) if regs.len() == len => Ok(regs),
        other => Err(Fault::BadOperand(format!(
            "{other:?} where {len} registers are needed"
        ))),
    }
}

/// One multiplicand element (as f64) from the 32-bit register value `reg`, half `half` for
/// 16-bit types.
fn element(kind: MmaKind, reg: u32, half: usize) -> std::result::Result<f64, Fault> {
    Ok(match kind {
        MmaKind::F16 => half::f16::from_bits((reg >> (16 * half)) as u16).to_f64(),
        MmaKind::Bf16 => f32::from_bits(((reg >> (16 * half)) & 0xffff) << 16) as f64,
        MmaKind::Tf32 => {
            if reg & 0x1fff != 0 && !f32::from_bits(reg).is_nan() {
                return Err(Fault::BadOperand(format!(
                    "tf32 operand {reg:#010x} has low mantissa bits set (not rounded with cvt.rna.tf32.f32)"
                )));
            }
            f32::from_bits(reg) as f64
        }
    })
}

/// Completes the `mma` every lane of warp `warp` (`lanes`) waits at: D = A B + C, 16 x 8.
pub fn complete_mma(
    env: &BlockEnv,
    lanes: &mut [Thread],
    instr: &Instr,
    kind: MmaKind,
    warp: usize,
) -> Result<()> {
    let fault = |lane: usize, fault: Fault| EmuError::Fault {
        line: instr.line,
        block: env.ctaid,
        thread: (warp * WARP_SIZE + lane) as u32,
        fault,
    };
    let k = if kind == MmaKind::Tf32 { 8 } else { 16 };
    let mut a = vec![[0f64; 16]; 16];
    let mut b = vec![[0f64; 8]; 16];
    let mut c = [[0f64; 8]; 16];
    for (lane, thread) in lanes.iter().enumerate() {
        let (g, t) = (lane / 4, lane % 4);
        let read =
            |regs: &[super::program::RegId], ty: Ty| -> std::result::Result<Vec<u64>, Fault> {
                regs.iter()
                    .map(|r| thread.read_reg(env.entry, *r, ty.bits()))
                    .collect()
            };
        let a_regs = read(vector(instr, 1, 4).map_err(|f| fault(lane, f))?, Ty::B32)
            .map_err(|f| fault(lane, f))?;
        let b_regs = read(vector(instr, 2, 2).map_err(|f| fault(lane, f))?, Ty::B32)
            .map_err(|f| fault(lane, f))?;
        let c_regs = read(vector(instr, 3, 4).map_err(|f| fault(lane, f))?, Ty::F32)
            .map_err(|f| fault(lane, f))?;
        match kind {
            MmaKind::Tf32 => {
                for (i, r) in a_regs.iter().enumerate() {
                    let (row, col) = (g + 8 * (i % 2), t + 4 * (i / 2));
                    a[row][col] = element(kind, *r as u32, 0).map_err(|f| fault(lane, f))?;
                }
                for (i, r) in b_regs.iter().enumerate() {
                    b[t + 4 * i][g] = element(kind, *r as u32, 0).map_err(|f| fault(lane, f))?;
                }
            }
            MmaKind::F16 | MmaKind::Bf16 => {
                for i in 0..8 {
                    let row = g + 8 * ((i / 2) % 2);
                    let col = 2 * t + (i & 1) + 8 * (i / 4);
                    a[row][col] =
                        element(kind, a_regs[i / 2] as u32, i % 2).map_err(|f| fault(lane, f))?;
                }
                for i in 0..4 {
                    let row = 2 * t + (i & 1) + 8 * (i / 2);
                    b[row][g] =
                        element(kind, b_regs[i / 2] as u32, i % 2).map_err(|f| fault(lane, f))?;
                }
            }
        }
        for (i, r) in c_regs.iter().enumerate() {
            c[g + 8 * (i / 2)][2 * t + i % 2] = f32::from_bits(*r as u32) as f64;
        }
    }
    let d_regs = vector(instr, 0, 4).map_err(|f| fault(0, f))?.to_vec();
    for (lane, thread) in lanes.iter_mut().enumerate() {
        let (g, t) = (lane / 4, lane % 4);
        for (i, reg) in d_regs.iter().enumerate() {
            let (row, col) = (g + 8 * (i / 2), 2 * t + i % 2);
            let sum = (0..k).fold(c[row][col], |acc, kk| acc + a[row][kk] * b[kk][col]);
            let bits = float::canonical(sum as f32);
            thread
                .write_reg(env.entry, *reg, 32, bits)
                .map_err(|f| fault(lane, f))?;
        }
        thread.pc += 1;
        thread.state = State::Running;
    }
    Ok(())
}
