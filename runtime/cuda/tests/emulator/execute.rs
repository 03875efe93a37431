//! The semantics of one instruction for one thread; barriers and shuffles only report that the
//! thread reached them, the scheduler completes them.

use super::error::Fault;
use super::float::{self, PtxFloat};
use super::program::{AddressBase, Cmp, Instr, IntOp, Op, Operand, Rounding, Space, TestpKind, Ty};
use super::thread::{BlockEnv, Thread, mask};

/// What the thread does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    Next,
    Jump(usize),
    Barrier,
    Shuffle,
    Exit,
}

/// Runs `instr` for `thread`.
pub fn execute(env: &mut BlockEnv, thread: &mut Thread, instr: &Instr) -> Result<Flow, Fault> {
    if let Some(guard) = instr.guard {
        let predicate = thread.read_reg(env.entry, guard.reg, 1)? != 0;
        if predicate == guard.negated {
            return Ok(Flow::Next);
        }
    }
    let ops = &instr.operands;
    match instr.op {
        Op::Mov(ty) => mov(env, thread, ty, &ops[0], &ops[1])?,
        Op::LdParam(ty) => {
            let Operand::Address {
                base: AddressBase::Symbol(name),
                offset: 0,
            } = &ops[1]
            else {
                return Err(Fault::BadOperand(format!(
                    "{} as a parameter",
                    env.describe(&ops[1])
                )));
            };
            let index = env
                .entry
                .params
                .iter()
                .position(|p| &p.name == name)
                .ok_or_else(|| Fault::NoSuchParam(name.clone()))?;
            let declared = env.entry.params[index].ty;
            if declared.bits() != ty.bits() {
                return Err(Fault::BadOperand(format!(
                    "parameter {name} is .{declared:?}, loaded as .{ty:?}"
                )));
            }
            env.write(thread, &ops[0], ty, env.params[index])?;
        }
        Op::CvtaToGlobal => {
            let address = env.read(thread, &ops[1], Ty::U64)?;
            env.write(thread, &ops[0], Ty::U64, address)?;
        }
        Op::Load { space, ty, lanes } => load(env, thread, space, ty, lanes, &ops[0], &ops[1])?,
        Op::Store { space, ty, lanes } => store(env, thread, space, ty, lanes, &ops[0], &ops[1])?,
        Op::AtomExch => {
            let value = env.read(thread, &ops[2], Ty::B64)?;
            let address = checked_address(env, thread, Space::Global, &ops[1], 8, "atom")?;
            let old = env.global.exchange(address, value)?;
            env.write(thread, &ops[0], Ty::B64, old)?;
        }
        Op::Int(op, ty) => {
            let a = env.read(thread, &ops[1], ty)?;
            let b_ty = if matches!(op, IntOp::Shl | IntOp::Shr) {
                Ty::U32
            } else {
                ty
            };
            let b = env.read(thread, &ops[2], b_ty)?;
            env.write(thread, &ops[0], ty, int_binary(op, ty, a, b)?)?;
        }
        Op::MulWide(ty) => {
            let (a, b) = (
                env.read(thread, &ops[1], ty)?,
                env.read(thread, &ops[2], ty)?,
            );
            let product = if ty.is_signed() {
                sign_extend(a, 32).wrapping_mul(sign_extend(b, 32)) as u64
            } else {
                a * b
            };
            let wide = if ty.is_signed() { Ty::S64 } else { Ty::U64 };
            env.write(thread, &ops[0], wide, product)?;
        }
        Op::MadLo(ty) => {
            let (a, b, c) = (
                env.read(thread, &ops[1], ty)?,
                env.read(thread, &ops[2], ty)?,
                env.read(thread, &ops[3], ty)?,
            );
            env.write(thread, &ops[0], ty, a.wrapping_mul(b).wrapping_add(c))?;
        }
        Op::Not(ty) => {
            let a = env.read(thread, &ops[1], ty)?;
            env.write(thread, &ops[0], ty, !a & mask(ty.bits()))?;
        }
        Op::Setp(cmp, ty) => {
            let (a, b) = (
                env.read(thread, &ops[1], ty)?,
                env.read(thread, &ops[2], ty)?,
            );
            let result = match ty {
                Ty::F32 => float::compare::<f32>(cmp, a, b),
                Ty::F64 => float::compare::<f64>(cmp, a, b),
                _ => int_compare(cmp, ty, a, b),
            };
            env.write(thread, &ops[0], Ty::Pred, result as u64)?;
        }
        Op::Float(op, ty) => {
            let (a, b) = (
                env.read(thread, &ops[1], ty)?,
                env.read(thread, &ops[2], ty)?,
            );
            let r = if ty == Ty::F32 {
                float::binary::<f32>(op, a, b)
            } else {
                float::binary::<f64>(op, a, b)
            };
            env.write(thread, &ops[0], ty, r)?;
        }
        Op::Fma(ty) => {
            let (a, b, c) = (
                env.read(thread, &ops[1], ty)?,
                env.read(thread, &ops[2], ty)?,
                env.read(thread, &ops[3], ty)?,
            );
            let r = if ty == Ty::F32 {
                float::fma::<f32>(a, b, c)
            } else {
                float::fma::<f64>(a, b, c)
            };
            env.write(thread, &ops[0], ty, r)?;
        }
        Op::FloatUnary(op, ty) => {
            let a = env.read(thread, &ops[1], ty)?;
            let r = if ty == Ty::F32 {
                float::unary::<f32>(op, a)
            } else {
                float::unary::<f64>(op, a)
            };
            env.write(thread, &ops[0], ty, r)?;
        }
        Op::Selp(ty) => {
            let (a, b) = (
                env.read(thread, &ops[1], ty)?,
                env.read(thread, &ops[2], ty)?,
            );
            let c = env.read(thread, &ops[3], Ty::Pred)?;
            env.write(thread, &ops[0], ty, if c != 0 { a } else { b })?;
        }
        Op::Testp(kind, ty) => {
            let a = env.read(thread, &ops[1], ty)?;
            let (nan, infinite) = if ty == Ty::F32 {
                let x = f32::from_bits(a as u32);
                (x.is_nan(), x.is_infinite())
            } else {
                let x = f64::from_bits(a);
                (x.is_nan(), x.is_infinite())
            };
            let result = match kind {
                TestpKind::Finite => !nan && !infinite,
                TestpKind::Infinite => infinite,
                TestpKind::Number => !nan,
                TestpKind::NotANumber => nan,
            };
            env.write(thread, &ops[0], Ty::Pred, result as u64)?;
        }
        Op::Cvt { dst, src, rounding } => {
            let a = env.read(thread, &ops[1], src)?;
            let r = super::half::convert_half(dst, src, rounding, a)
                .unwrap_or_else(|| convert(dst, src, rounding, a));
            env.write(thread, &ops[0], dst, r)?;
        }
        Op::Bra => return Ok(Flow::Jump(instr.target.unwrap_or(usize::MAX))),
        Op::Ret => return Ok(Flow::Exit),
        Op::BarSync => {
            if ops[0] != Operand::Int(0) {
                return Err(Fault::BadOperand(format!(
                    "barrier {} (only bar.sync 0)",
                    env.describe(&ops[0])
                )));
            }
            return Ok(Flow::Barrier);
        }
        Op::Shfl(_) => return Ok(Flow::Shuffle),
        Op::TensorCore(op) => {
            // A warp-collective `mma` waits for its warp like a shuffle.
            if super::tensor_core::execute(env, thread, instr, op)? {
                return Ok(Flow::Shuffle);
            }
        }
    }
    Ok(Flow::Next)
}

fn mov(
    env: &BlockEnv,
    thread: &mut Thread,
    ty: Ty,
    dst: &Operand,
    src: &Operand,
) -> Result<(), Fault> {
    match (dst, src) {
        // `mov.b64 {lo, hi}, %fd`: split into 32-bit halves.
        (Operand::Vector(halves), _) if ty.bits() == 64 && halves.len() == 2 => {
            let value = env.read(thread, src, ty)?;
            thread.write_reg(env.entry, halves[0], 32, value & 0xffff_ffff)?;
            thread.write_reg(env.entry, halves[1], 32, value >> 32)
        }
        // `mov.b64 %fd, {lo, hi}`: join two 32-bit halves.
        (_, Operand::Vector(halves)) if ty.bits() == 64 && halves.len() == 2 => {
            let lo = thread.read_reg(env.entry, halves[0], 32)?;
            let hi = thread.read_reg(env.entry, halves[1], 32)?;
            env.write(thread, dst, ty, (hi << 32) | lo)
        }
        _ => {
            let value = env.read(thread, src, ty)?;
            env.write(thread, dst, ty, value)
        }
    }
}

/// The registers a load writes or a store reads: one, or the four of a `.v4` brace list.
fn lane_registers(env: &BlockEnv, operand: &Operand, lanes: u8) -> Result<Vec<Operand>, Fault> {
    match operand {
        Operand::Vector(regs) if regs.len() == lanes as usize => {
            Ok(regs.iter().map(|r| Operand::Reg(*r)).collect())
        }
        other if lanes == 1 && !matches!(other, Operand::Vector(_)) => Ok(vec![other.clone()]),
        other => Err(Fault::BadOperand(format!(
            "{} for a {lanes}-lane access",
            env.describe(other)
        ))),
    }
}

fn checked_address(
    env: &BlockEnv,
    thread: &Thread,
    space: Space,
    operand: &Operand,
    bytes: u64,
    access: &'static str,
) -> Result<u64, Fault> {
    let address = env.address(thread, operand)?;
    if address % bytes != 0 {
        let space = if space == Space::Global {
            "global"
        } else {
            "shared"
        };
        return Err(Fault::Misaligned {
            access,
            space,
            address,
            align: bytes,
        });
    }
    Ok(address)
}

fn load(
    env: &mut BlockEnv,
    thread: &mut Thread,
    space: Space,
    ty: Ty,
    lanes: u8,
    dst: &Operand,
    addr: &Operand,
) -> Result<(), Fault> {
    let element = (ty.bits() / 8) as usize;
    let bytes = element * lanes as usize;
    let dsts = lane_registers(env, dst, lanes)?;
    let address = checked_address(env, thread, space, addr, bytes as u64, "load")?;
    let data = match space {
        Space::Global => env.global.load(address, bytes)?.to_vec(),
        Space::Shared => env.shared.load(address, bytes, thread.tid)?.to_vec(),
    };
    for (d, chunk) in dsts.iter().zip(data.chunks_exact(element)) {
        let value = chunk
            .iter()
            .rev()
            .fold(0u64, |acc, b| (acc << 8) | *b as u64);
        // A byte loads zero-extended (u8) or sign-extended (s8) into a 32-bit register.
        let (reg_ty, value) = match ty {
            Ty::U8 => (Ty::U32, value),
            Ty::S8 => (Ty::S32, sign_extend(value, 8) as u64 & 0xffff_ffff),
            _ => (ty, value),
        };
        env.write(thread, d, reg_ty, value)?;
    }
    Ok(())
}

fn store(
    env: &mut BlockEnv,
    thread: &mut Thread,
    space: Space,
    ty: Ty,
    lanes: u8,
    addr: &Operand,
    src: &Operand,
) -> Result<(), Fault> {
    let element = (ty.bits() / 8) as usize;
    let mut data = Vec::with_capacity(element * lanes as usize);
    // A byte is stored from the low bits of a 32-bit register.
    let reg_ty = if matches!(ty, Ty::U8 | Ty::S8) {
        Ty::U32
    } else {
        ty
    };
    for s in lane_registers(env, src, lanes)? {
        let value = env.read(thread, &s, reg_ty)?;
        data.extend_from_slice(&value.to_le_bytes()[..element]);
    }
    let address = checked_address(env, thread, space, addr, data.len() as u64, "store")?;
    match space {
        Space::Global => {
            let writer = env.ctaid as u64 * env.ntid as u64 + thread.tid as u64;
            env.global.store(address, &data, writer)
        }
        Space::Shared => env.shared.store(address, &data, thread.tid),
    }
}

pub fn sign_extend(value: u64, bits: u32) -> i64 {
    let shift = 64 - bits;
    ((value << shift) as i64) >> shift
}

fn int_binary(op: IntOp, ty: Ty, a: u64, b: u64) -> Result<u64, Fault> {
    let bits = ty.bits();
    let (sa, sb) = (sign_extend(a, bits.max(1)), sign_extend(b, bits.max(1)));
    let r = match op {
        IntOp::Add => a.wrapping_add(b),
        IntOp::Sub => a.wrapping_sub(b),
        IntOp::MulLo => a.wrapping_mul(b),
        IntOp::MulHi => ((a as u128 * b as u128) >> 64) as u64,
        IntOp::Div | IntOp::Rem if b == 0 => return Err(Fault::DivisionByZero),
        IntOp::Div => a / b,
        IntOp::Rem => a % b,
        IntOp::Min if ty.is_signed() => sa.min(sb) as u64,
        IntOp::Max if ty.is_signed() => sa.max(sb) as u64,
        IntOp::Min => a.min(b),
        IntOp::Max => a.max(b),
        IntOp::And => a & b,
        IntOp::Or => a | b,
        IntOp::Xor => a ^ b,
        // Shift amounts past the width clamp to the width.
        IntOp::Shl if b >= bits as u64 => 0,
        IntOp::Shl => a << b,
        IntOp::Shr if ty.is_signed() => (sa >> b.min(bits as u64 - 1)) as u64,
        IntOp::Shr if b >= bits as u64 => 0,
        IntOp::Shr => a >> b,
    };
    Ok(r & mask(bits))
}

fn int_compare(cmp: Cmp, ty: Ty, a: u64, b: u64) -> bool {
    let ordering = if ty.is_signed() {
        sign_extend(a, ty.bits()).cmp(&sign_extend(b, ty.bits()))
    } else {
        a.cmp(&b)
    };
    match cmp {
        Cmp::Eq => ordering.is_eq(),
        Cmp::Ne => ordering.is_ne(),
        Cmp::Lt => ordering.is_lt(),
        Cmp::Le => ordering.is_le(),
        Cmp::Gt => ordering.is_gt(),
        // The decoder admits only the six ordered comparisons for integers.
        _ => ordering.is_ge(),
    }
}

/// `cvt.dst.src` on the bits of `a` (the decoder has checked the rounding fits the types).
fn convert(dst: Ty, src: Ty, rounding: Option<Rounding>, a: u64) -> u64 {
    let int_value = |a: u64| -> i128 {
        if src.is_signed() {
            sign_extend(a, src.bits()) as i128
        } else {
            a as i128
        }
    };
    match (dst, src) {
        (Ty::F32, Ty::F64) => {
            float::narrow(f64::from_bits(a), rounding.unwrap_or(Rounding::Nearest)) as u64
        }
        (Ty::F64, Ty::F32) => {
            let x = f32::from_bits(a as u32);
            let x = match rounding {
                Some(r) => x.round_integral(r),
                None => x,
            };
            float::canonical(x as f64)
        }
        (Ty::F32, Ty::F32) => float::canonical(
            f32::from_bits(a as u32).round_integral(rounding.unwrap_or(Rounding::IntNearest)),
        ),
        (Ty::F64, Ty::F64) => float::canonical(
            f64::from_bits(a).round_integral(rounding.unwrap_or(Rounding::IntNearest)),
        ),
        (Ty::F32, _) => (int_value(a) as f32).to_bits() as u64,
        (Ty::F64, _) => (int_value(a) as f64).to_bits(),
        (_, Ty::F32 | Ty::F64) => {
            let x = if src == Ty::F32 {
                f32::from_bits(a as u32) as f64
            } else {
                f64::from_bits(a)
            };
            let x = x.round_integral(rounding.unwrap_or(Rounding::IntZero));
            // Float to integer saturates and maps NaN to 0, as Rust's `as` does.
            match dst {
                Ty::S32 => x as i32 as u32 as u64,
                Ty::U32 => x as u32 as u64,
                Ty::S64 => x as i64 as u64,
                _ => x as u64,
            }
        }
        _ => int_value(a) as u64 & mask(dst.bits()),
    }
}
