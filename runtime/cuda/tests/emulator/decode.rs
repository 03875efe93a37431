//! Decodes an opcode (`setp.ltu.f32`, `cvt.rn.f32.s32`, ...) into an [`Op`], accepting exactly the
//! PTX subset the renderer emits: an opcode outside it is an error naming it, so a renderer change
//! that leaves the subset fails loudly instead of being run with guessed semantics.

use super::error::{EmuError, Result};
use super::program::{
    Cmp, FloatOp, FloatUnaryOp, IntOp, Op, Rounding, ShflMode, Space, TestpKind, Ty,
};

const INT_ARITH: &[Ty] = &[Ty::S32, Ty::U32, Ty::S64, Ty::U64];
const FLOATS: &[Ty] = &[Ty::F32, Ty::F64];
const BITWISE: &[Ty] = &[Ty::B32, Ty::B64, Ty::Pred];

/// Decodes `opcode` found on `line`.
pub fn decode(opcode: &str, line: usize) -> Result<Op> {
    if let Some(op) = super::tensor_core::decode(opcode) {
        return Ok(op);
    }
    let parts: Vec<&str> = opcode.split('.').collect();
    let (base, mods) = (parts[0], &parts[1..]);
    let unsupported = |reason: &str| EmuError::UnsupportedForm {
        line,
        opcode: opcode.to_string(),
        reason: reason.to_string(),
    };
    // The one type suffix of `mods`, which must be among `allowed`.
    let single = |mods: &[&str], allowed: &[Ty]| -> Result<Ty> {
        match mods {
            [t] => Ty::from_suffix(t)
                .filter(|ty| allowed.contains(ty))
                .ok_or_else(|| {
                    unsupported(&format!(
                        "type .{t} not allowed, expected one of {allowed:?}"
                    ))
                }),
            _ => Err(unsupported(&format!(
                "expected one type suffix among {allowed:?}"
            ))),
        }
    };
    if let Some(op) = super::half::decode_half(base, mods) {
        return Ok(op);
    }
    let op = match base {
        "mov" => Op::Mov(single(mods, &[Ty::B32, Ty::B64, Ty::U32, Ty::U64, Ty::S32, Ty::S64, Ty::F32, Ty::F64, Ty::Pred])?),
        "ld" | "st" => decode_memory(base, mods).ok_or_else(|| {
            unsupported("memory access must be ld.param.{u32,u64}, ld/st.global.{f32,f64,u8,s8,s32,s64}, ld.global.u32, ld/st.global.v4.f32 or ld/st.shared.{f32,f64,s64}")
        })?,
        "cvta" => match mods {
            ["to", "global", "u64"] => Op::CvtaToGlobal,
            _ => return Err(unsupported("only cvta.to.global.u64")),
        },
        "add" | "sub" | "mul" | "div" | "rem" | "mad" | "min" | "max" => {
            decode_arith(base, mods).ok_or_else(|| unsupported("integer forms need .lo/.wide as listed, float forms need .rn (except min/max)"))?
        }
        "shl" | "shr" => {
            let op = if base == "shl" { IntOp::Shl } else { IntOp::Shr };
            Op::Int(op, single(mods, &[Ty::B32, Ty::B64, Ty::U32, Ty::U64, Ty::S32])?)
        }
        "and" | "or" | "xor" => {
            let op = match base {
                "and" => IntOp::And,
                "or" => IntOp::Or,
                _ => IntOp::Xor,
            };
            Op::Int(op, single(mods, BITWISE)?)
        }
        "not" => Op::Not(single(mods, BITWISE)?),
        "setp" => match mods {
            [cmp, t] => {
                let ty = Ty::from_suffix(t).ok_or_else(|| unsupported("unknown type"))?;
                let cmp = decode_cmp(cmp).ok_or_else(|| unsupported("unknown comparison"))?;
                let ordered_only = matches!(cmp, Cmp::Eq | Cmp::Ne | Cmp::Lt | Cmp::Le | Cmp::Gt | Cmp::Ge);
                if !(FLOATS.contains(&ty) || (INT_ARITH.contains(&ty) && ordered_only)) {
                    return Err(unsupported("integer setp takes eq/ne/lt/le/gt/ge on s32/u32/s64/u64"));
                }
                Op::Setp(cmp, ty)
            }
            _ => return Err(unsupported("expected setp.CMP.TYPE")),
        },
        "neg" | "abs" => {
            let op = if base == "neg" { FloatUnaryOp::Neg } else { FloatUnaryOp::Abs };
            Op::FloatUnary(op, single(mods, FLOATS)?)
        }
        "sqrt" | "rcp" => match mods {
            ["rn", t] => {
                let op = if base == "sqrt" { FloatUnaryOp::Sqrt } else { FloatUnaryOp::Rcp };
                Op::FloatUnary(op, single(&[t], FLOATS)?)
            }
            _ => return Err(unsupported("only the .rn form")),
        },
        "ex2" | "lg2" => match mods {
            ["approx", "ftz", "f32"] => {
                Op::FloatUnary(if base == "ex2" { FloatUnaryOp::Ex2 } else { FloatUnaryOp::Lg2 }, Ty::F32)
            }
            _ => return Err(unsupported("only the .approx.ftz.f32 form")),
        },
        "fma" => match mods {
            ["rn", t] => Op::Fma(single(&[t], FLOATS)?),
            _ => return Err(unsupported("only fma.rn.{f32,f64}")),
        },
        "copysign" => Op::Float(FloatOp::CopySign, single(mods, FLOATS)?),
        "selp" => Op::Selp(single(mods, &[Ty::F32, Ty::F64, Ty::B32, Ty::B64, Ty::U32, Ty::U64, Ty::S32, Ty::S64])?),
        "testp" => match mods {
            [kind, t] => {
                let kind = match *kind {
                    "finite" => TestpKind::Finite,
                    "infinite" => TestpKind::Infinite,
                    "number" => TestpKind::Number,
                    "notanumber" => TestpKind::NotANumber,
                    _ => return Err(unsupported("testp takes finite/infinite/number/notanumber")),
                };
                Op::Testp(kind, single(&[t], FLOATS)?)
            }
            _ => return Err(unsupported("expected testp.KIND.TYPE")),
        },
        "cvt" => decode_cvt(mods).map_err(&unsupported)?,
        "atom" => match mods {
            ["global", "exch", "b64"] => Op::AtomExch,
            _ => return Err(unsupported("only atom.global.exch.b64")),
        },
        "bra" => match mods {
            [] | ["uni"] => Op::Bra,
            _ => return Err(unsupported("only bra and bra.uni")),
        },
        "ret" if mods.is_empty() => Op::Ret,
        "bar" => match mods {
            ["sync"] => Op::BarSync,
            _ => return Err(unsupported("only bar.sync")),
        },
        "shfl" => match mods {
            ["sync", "bfly", "b32"] => Op::Shfl(ShflMode::Bfly),
            ["sync", "down", "b32"] => Op::Shfl(ShflMode::Down),
            _ => return Err(unsupported("only shfl.sync.{bfly,down}.b32")),
        },
        _ => return Err(EmuError::UnknownInstruction { line, opcode: opcode.to_string() }),
    };
    Ok(op)
}

fn decode_memory(base: &str, mods: &[&str]) -> Option<Op> {
    let load = base == "ld";
    let (space, lanes, ty) = match mods {
        ["param", t] if load => {
            let ty = Ty::from_suffix(t).filter(|ty| matches!(ty, Ty::U32 | Ty::U64))?;
            return Some(Op::LdParam(ty));
        }
        ["global", "v4", "f32"] => (Space::Global, 4, Ty::F32),
        ["global", t] => {
            let ty = Ty::from_suffix(t)?;
            // Bytes are bool, u8 or i8 elements, s32 ones i32 elements, s64 ones i64 elements.
            let allowed = matches!(ty, Ty::F32 | Ty::F64 | Ty::U8 | Ty::S8 | Ty::S32 | Ty::S64)
                || (load && ty == Ty::U32);
            allowed.then_some((Space::Global, 1, ty))?
        }
        ["shared", t] => (
            Space::Shared,
            1,
            // s64: an arg reduction's positions.
            Ty::from_suffix(t).filter(|ty| ty.is_float() || *ty == Ty::S64)?,
        ),
        _ => return None,
    };
    Some(if load {
        Op::Load { space, ty, lanes }
    } else {
        Op::Store { space, ty, lanes }
    })
}

fn decode_arith(base: &str, mods: &[&str]) -> Option<Op> {
    let ty_in = |t: &str, allowed: &[Ty]| Ty::from_suffix(t).filter(|ty| allowed.contains(ty));
    Some(match (base, mods) {
        ("add", [t]) => Op::Int(IntOp::Add, ty_in(t, INT_ARITH)?),
        ("sub", [t]) => Op::Int(IntOp::Sub, ty_in(t, INT_ARITH)?),
        ("mul", ["lo", t]) => Op::Int(IntOp::MulLo, ty_in(t, INT_ARITH)?),
        ("mul", ["hi", "u64"]) => Op::Int(IntOp::MulHi, Ty::U64),
        ("mul", ["wide", t]) => Op::MulWide(ty_in(t, &[Ty::S32, Ty::U32])?),
        ("mad", ["lo", t]) => Op::MadLo(ty_in(t, INT_ARITH)?),
        ("div", [t]) => Op::Int(IntOp::Div, ty_in(t, &[Ty::U32, Ty::U64])?),
        ("rem", [t]) => Op::Int(IntOp::Rem, ty_in(t, &[Ty::U32, Ty::U64])?),
        ("min", [t]) if ty_in(t, FLOATS).is_some() => Op::Float(FloatOp::Min, ty_in(t, FLOATS)?),
        ("max", [t]) if ty_in(t, FLOATS).is_some() => Op::Float(FloatOp::Max, ty_in(t, FLOATS)?),
        ("min", [t]) => Op::Int(IntOp::Min, ty_in(t, &[Ty::U32, Ty::S32, Ty::U64, Ty::S64])?),
        ("max", [t]) => Op::Int(IntOp::Max, ty_in(t, &[Ty::U32, Ty::S32, Ty::U64, Ty::S64])?),
        ("add", ["rn", t]) => Op::Float(FloatOp::Add, ty_in(t, FLOATS)?),
        ("sub", ["rn", t]) => Op::Float(FloatOp::Sub, ty_in(t, FLOATS)?),
        ("mul", ["rn", t]) => Op::Float(FloatOp::Mul, ty_in(t, FLOATS)?),
        ("div", ["rn", t]) => Op::Float(FloatOp::Div, ty_in(t, FLOATS)?),
        _ => return None,
    })
}

fn decode_cmp(cmp: &str) -> Option<Cmp> {
    Some(match cmp {
        "eq" => Cmp::Eq,
        "ne" => Cmp::Ne,
        "lt" => Cmp::Lt,
        "le" => Cmp::Le,
        "gt" => Cmp::Gt,
        "ge" => Cmp::Ge,
        "equ" => Cmp::Equ,
        "neu" => Cmp::Neu,
        "ltu" => Cmp::Ltu,
        "leu" => Cmp::Leu,
        "gtu" => Cmp::Gtu,
        "geu" => Cmp::Geu,
        "num" => Cmp::Num,
        "nan" => Cmp::Nan,
        _ => return None,
    })
}

fn decode_cvt(mods: &[&str]) -> std::result::Result<Op, &'static str> {
    let (rounding, types) = match mods {
        [r, d, s] => (Some(*r), [*d, *s]),
        [d, s] => (None, [*d, *s]),
        _ => return Err("expected cvt[.ROUNDING].DST.SRC"),
    };
    let rounding = match rounding {
        None => None,
        Some("rn") => Some(Rounding::Nearest),
        Some("rz") => Some(Rounding::Zero),
        Some("rm") => Some(Rounding::Down),
        Some("rp") => Some(Rounding::Up),
        Some("rni") => Some(Rounding::IntNearest),
        Some("rzi") => Some(Rounding::IntZero),
        Some("rmi") => Some(Rounding::IntDown),
        Some("rpi") => Some(Rounding::IntUp),
        Some(_) => return Err("unknown rounding modifier"),
    };
    let dst = Ty::from_suffix(types[0]).ok_or("unknown destination type")?;
    let src = Ty::from_suffix(types[1]).ok_or("unknown source type")?;
    let integral = matches!(
        rounding,
        Some(Rounding::IntNearest | Rounding::IntZero | Rounding::IntDown | Rounding::IntUp)
    );
    let ints = [Ty::S32, Ty::U32, Ty::S64, Ty::U64];
    let valid = match (dst.is_float(), src.is_float()) {
        (true, true) if dst == src => integral,
        (true, true) if dst == Ty::F32 => rounding.is_some(),
        (true, true) => rounding.is_none() || integral,
        (true, false) => ints.contains(&src) && rounding == Some(Rounding::Nearest),
        (false, true) => {
            matches!(dst, Ty::S32 | Ty::U32 | Ty::S64) && rounding == Some(Rounding::IntZero)
        }
        (false, false) => ints.contains(&dst) && ints.contains(&src) && rounding.is_none(),
    };
    if !valid {
        return Err(
            "conversion or rounding outside the subset (float narrowing needs .rn/.rz/.rm/.rp, same-size float needs .rni/.rzi/.rmi/.rpi, int to float .rn, float to s32/u32/s64 .rzi)",
        );
    }
    Ok(Op::Cvt { dst, src, rounding })
}

/// How many operands each op takes.
pub fn operand_count(op: &Op) -> usize {
    match op {
        Op::Ret => 0,
        Op::Bra | Op::BarSync => 1,
        Op::Mov(_) | Op::LdParam(_) | Op::CvtaToGlobal | Op::Load { .. } | Op::Store { .. } => 2,
        Op::Not(_) | Op::FloatUnary(..) | Op::Testp(..) | Op::Cvt { .. } => 2,
        Op::Int(..) | Op::MulWide(_) | Op::Setp(..) | Op::Float(..) | Op::AtomExch => 3,
        Op::MadLo(_) | Op::Fma(_) | Op::Selp(_) => 4,
        Op::Shfl(_) => 5,
        Op::TensorCore(op) => op.operand_count(),
    }
}
