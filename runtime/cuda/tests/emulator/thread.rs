//! One emulated thread (its registers, program counter and scheduling state) and the block
//! environment its instructions see: special registers, parameters and both memories.

use super::error::Fault;
use super::global::GlobalMemory;
use super::program::{AddressBase, Entry, Operand, RegId, Special, Ty};
use super::shared::SharedMemory;

/// Where a thread stands for the scheduler.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    Running,
    /// Waiting at the `bar.sync` its `pc` points at.
    AtBarrier,
    /// Waiting at the `shfl.sync` its `pc` points at.
    AtShuffle,
    Exited,
}

pub struct Thread {
    pub tid: u32,
    pub pc: usize,
    pub state: State,
    pub steps: u64,
    registers: Vec<Option<u64>>,
}

/// What one block's threads share.
pub struct BlockEnv<'a> {
    pub entry: &'a Entry,
    /// Parameter values (their bits), in declaration order.
    pub params: &'a [u64],
    pub ctaid: u32,
    pub ntid: u32,
    pub nctaid: u32,
    pub global: &'a mut GlobalMemory,
    pub shared: SharedMemory,
}

impl Thread {
    pub fn new(tid: u32, registers: usize) -> Thread {
        Thread {
            tid,
            pc: 0,
            state: State::Running,
            steps: 0,
            registers: vec![None; registers],
        }
    }

    pub fn read_reg(&self, entry: &Entry, id: RegId, bits: u32) -> Result<u64, Fault> {
        let register = entry.register(id);
        if register.ty.bits() != bits {
            return Err(Fault::RegisterWidth {
                register: register.name.clone(),
                held: register.ty.bits(),
                wanted: bits,
            });
        }
        self.registers[id.0 as usize]
            .ok_or_else(|| Fault::UninitialisedRegister(register.name.clone()))
    }

    pub fn write_reg(
        &mut self,
        entry: &Entry,
        id: RegId,
        bits: u32,
        value: u64,
    ) -> Result<(), Fault> {
        let register = entry.register(id);
        if register.ty.bits() != bits {
            return Err(Fault::RegisterWidth {
                register: register.name.clone(),
                held: register.ty.bits(),
                wanted: bits,
            });
        }
        self.registers[id.0 as usize] = Some(value & mask(bits));
        Ok(())
    }
}

/// The low `bits` bits set.
pub fn mask(bits: u32) -> u64 {
    if bits >= 64 {
        u64::MAX
    } else {
        (1 << bits) - 1
    }
}

impl BlockEnv<'_> {
    pub fn shared_address(&self, name: &str) -> Result<u64, Fault> {
        self.entry
            .shared
            .iter()
            .find(|s| s.name == name)
            .map(|s| s.offset)
            .ok_or_else(|| Fault::NoSuchShared(name.to_string()))
    }

    fn special(&self, thread: &Thread, special: Special) -> u32 {
        match special {
            Special::TidX => thread.tid,
            Special::NtidX => self.ntid,
            Special::CtaidX => self.ctaid,
            Special::NctaidX => self.nctaid,
        }
    }

    /// The value of a source operand as `ty` (its bits, zero-extended).
    pub fn read(&self, thread: &Thread, operand: &Operand, ty: Ty) -> Result<u64, Fault> {
        let bits = ty.bits();
        let value = match operand {
            Operand::Reg(id) => thread.read_reg(self.entry, *id, bits)?,
            Operand::Special(s) if bits == 32 => self.special(thread, *s) as u64,
            Operand::Int(v) => match ty {
                Ty::F32 => (*v as f32).to_bits() as u64,
                Ty::F64 => (*v as f64).to_bits(),
                Ty::Pred => (*v != 0) as u64,
                _ => *v as u64 & mask(bits),
            },
            Operand::F32Bits(b) if ty == Ty::F64 => (f32::from_bits(*b) as f64).to_bits(),
            Operand::F32Bits(b) if bits == 32 => *b as u64,
            Operand::F64Bits(b) if ty == Ty::F32 => (f64::from_bits(*b) as f32).to_bits() as u64,
            Operand::F64Bits(b) if bits == 64 => *b,
            Operand::Symbol(name) if bits == 64 => self.shared_address(name)?,
            other => {
                return Err(Fault::BadOperand(format!(
                    "{} as .{ty:?}",
                    self.describe(other)
                )));
            }
        };
        Ok(value)
    }

    /// Writes a destination operand, which must be a register of `ty`'s width.
    pub fn write(
        &self,
        thread: &mut Thread,
        operand: &Operand,
        ty: Ty,
        value: u64,
    ) -> Result<(), Fault> {
        match operand {
            Operand::Reg(id) => thread.write_reg(self.entry, *id, ty.bits(), value),
            other => Err(Fault::BadOperand(format!(
                "{} as a destination",
                self.describe(other)
            ))),
        }
    }

    /// The address `[base+offset]` of a load or store.
    pub fn address(&self, thread: &Thread, operand: &Operand) -> Result<u64, Fault> {
        match operand {
            Operand::Address {
                base: AddressBase::Reg(id),
                offset,
            } => Ok(thread
                .read_reg(self.entry, *id, 64)?
                .wrapping_add(*offset as u64)),
            Operand::Address {
                base: AddressBase::Symbol(name),
                offset,
            } => Ok(self.shared_address(name)?.wrapping_add(*offset as u64)),
            other => Err(Fault::BadOperand(format!(
                "{} as an address",
                self.describe(other)
            ))),
        }
    }

    pub fn describe(&self, operand: &Operand) -> String {
        let reg = |id: &RegId| self.entry.register(*id).name.clone();
        match operand {
            Operand::Reg(id) => reg(id),
            Operand::Special(s) => s.to_string(),
            Operand::Int(v) => v.to_string(),
            Operand::F32Bits(b) => format!("0f{b:08X}"),
            Operand::F64Bits(b) => format!("0d{b:016X}"),
            Operand::Symbol(name) => name.clone(),
            Operand::Address {
                base: AddressBase::Reg(id),
                offset,
            } => format!("[{}+{offset}]", reg(id)),
            Operand::Address {
                base: AddressBase::Symbol(name),
                offset,
            } => format!("[{name}+{offset}]"),
            Operand::Vector(regs) => {
                format!("{{{}}}", regs.iter().map(reg).collect::<Vec<_>>().join(","))
            }
        }
    }
}
