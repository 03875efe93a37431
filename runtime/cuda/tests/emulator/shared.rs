//! One block's shared memory: poison-filled at block start (CUDA leaves it undefined), with a
//! race check: between two barriers, a byte one thread writes may not be read or written by another.

use super::error::Fault;
use super::global::POISON;

const NOBODY: u32 = u32::MAX;
const MANY: u32 = u32::MAX - 1;

/// Who touched a byte in which barrier interval (`epoch`).
#[derive(Clone, Copy)]
struct Shadow {
    write_epoch: u32,
    writer: u32,
    read_epoch: u32,
    reader: u32,
}

pub struct SharedMemory {
    bytes: Vec<u8>,
    shadow: Vec<Shadow>,
    epoch: u32,
}

impl SharedMemory {
    pub fn new(bytes: u64) -> SharedMemory {
        let fresh = Shadow {
            write_epoch: 0,
            writer: NOBODY,
            read_epoch: 0,
            reader: NOBODY,
        };
        SharedMemory {
            bytes: vec![POISON; bytes as usize],
            shadow: vec![fresh; bytes as usize],
            epoch: 1,
        }
    }

    /// A barrier completed: accesses before it are ordered before accesses after it.
    pub fn barrier(&mut self) {
        self.epoch += 1;
    }

    fn range(
        &self,
        access: &'static str,
        address: u64,
        len: usize,
    ) -> Result<std::ops::Range<usize>, Fault> {
        let end = address.saturating_add(len as u64);
        if end > self.bytes.len() as u64 {
            return Err(Fault::OutOfBounds {
                access,
                space: "shared",
                address,
                bytes: len as u64,
            });
        }
        Ok(address as usize..end as usize)
    }

    pub fn load(&mut self, address: u64, len: usize, thread: u32) -> Result<&[u8], Fault> {
        let range = self.range("load", address, len)?;
        for (i, shadow) in self.shadow[range.clone()].iter_mut().enumerate() {
            if shadow.write_epoch == self.epoch && shadow.writer != thread {
                return Err(race(address + i as u64, shadow.writer, "wrote", "reads"));
            }
            shadow.reader = if shadow.read_epoch == self.epoch && shadow.reader != thread {
                MANY
            } else {
                thread
            };
            shadow.read_epoch = self.epoch;
        }
        Ok(&self.bytes[range])
    }

    pub fn store(&mut self, address: u64, data: &[u8], thread: u32) -> Result<(), Fault> {
        let range = self.range("store", address, data.len())?;
        for (i, shadow) in self.shadow[range.clone()].iter_mut().enumerate() {
            if shadow.write_epoch == self.epoch && shadow.writer != thread {
                return Err(race(address + i as u64, shadow.writer, "wrote", "writes"));
            }
            if shadow.read_epoch == self.epoch && shadow.reader != thread {
                return Err(race(address + i as u64, shadow.reader, "read", "writes"));
            }
            shadow.write_epoch = self.epoch;
            shadow.writer = thread;
        }
        self.bytes[range].copy_from_slice(data);
        Ok(())
    }
}

fn race(address: u64, other: u32, other_access: &'static str, access: &'static str) -> Fault {
    let other = if other == MANY {
        "several threads".to_string()
    } else {
        format!("thread {other}")
    };
    Fault::SharedRace {
        address,
        other,
        other_access,
        access,
    }
}
