//! Emulated global memory: named buffers at distinct device addresses, with guard gaps between
//! them so an access past one buffer's end never lands in another. Fresh allocations hold a
//! poison pattern (all bits set: a NaN in f32 and f64), as `cudaMalloc` leaves memory undefined.
//! Buffers can also be used by address, as a driver does: copied to and from, and freed (a
//! freed address is never handed out again, so a use after free faults).

use super::error::{EmuError, Fault, Result};

const FIRST_ADDRESS: u64 = 0x7f00_0000_0000;
const GUARD_BYTES: u64 = 4096;
/// The byte every fresh allocation and every shared array starts as.
pub const POISON: u8 = 0xff;
const NO_WRITER: u64 = u64::MAX;

struct Buffer {
    name: String,
    address: u64,
    bytes: Vec<u8>,
    /// Per byte, the global thread id that wrote it during the current launch.
    writers: Vec<u64>,
}

/// The device's global memory: buffers addressed by `u64` device pointers.
#[derive(Default)]
pub struct GlobalMemory {
    buffers: Vec<Buffer>,
    /// Where the next buffer starts (0 before the first).
    next_address: u64,
}

impl GlobalMemory {
    /// Allocates `bytes` bytes of poison under `name`; returns the device address.
    pub fn alloc(&mut self, name: &str, bytes: usize) -> u64 {
        self.insert(name, vec![POISON; bytes])
    }

    pub fn upload_f32(&mut self, name: &str, data: &[f32]) -> u64 {
        self.insert(name, data.iter().flat_map(|v| v.to_le_bytes()).collect())
    }

    pub fn upload_f64(&mut self, name: &str, data: &[f64]) -> u64 {
        self.insert(name, data.iter().flat_map(|v| v.to_le_bytes()).collect())
    }

    pub fn upload_u32(&mut self, name: &str, data: &[u32]) -> u64 {
        self.insert(name, data.iter().flat_map(|v| v.to_le_bytes()).collect())
    }

    /// Uploads raw little-endian bytes (any element type).
    pub fn upload_bytes(&mut self, name: &str, bytes: &[u8]) -> u64 {
        self.insert(name, bytes.to_vec())
    }

    /// The raw bytes of buffer `name`.
    pub fn read_bytes(&self, name: &str) -> Result<&[u8]> {
        Ok(&self.buffer(name)?.bytes)
    }

    /// Frees the buffer starting at `address`.
    pub fn free(&mut self, address: u64) -> Result<()> {
        let index = self
            .buffers
            .iter()
            .position(|b| b.address == address)
            .ok_or(EmuError::HostAccess {
                what: "free",
                fault: Fault::OutOfBounds {
                    access: "free",
                    space: "global",
                    address,
                    bytes: 0,
                },
            })?;
        self.buffers.remove(index);
        Ok(())
    }

    /// Copies `data` from the host to `address` (inside one live buffer).
    pub fn write_at(&mut self, address: u64, data: &[u8]) -> Result<()> {
        let (index, offset) = self
            .locate("host write", address, data.len() as u64)
            .map_err(|fault| EmuError::HostAccess {
                what: "copy to device",
                fault,
            })?;
        self.buffers[index].bytes[offset..offset + data.len()].copy_from_slice(data);
        Ok(())
    }

    /// The `len` bytes at `address` (inside one live buffer).
    pub fn read_at(&self, address: u64, len: usize) -> Result<&[u8]> {
        let (index, offset) = self
            .locate("host read", address, len as u64)
            .map_err(|fault| EmuError::HostAccess {
                what: "copy to host",
                fault,
            })?;
        Ok(&self.buffers[index].bytes[offset..offset + len])
    }

    /// Bytes of the live buffers.
    pub fn allocated_bytes(&self) -> usize {
        self.buffers.iter().map(|b| b.bytes.len()).sum()
    }

    /// How many buffers are live.
    pub fn buffer_count(&self) -> usize {
        self.buffers.len()
    }

    fn insert(&mut self, name: &str, bytes: Vec<u8>) -> u64 {
        let address = self.next_address.max(FIRST_ADDRESS);
        self.next_address = (address + bytes.len() as u64 + GUARD_BYTES).div_ceil(256) * 256;
        let writers = vec![NO_WRITER; bytes.len()];
        self.buffers.push(Buffer {
            name: name.to_string(),
            address,
            bytes,
            writers,
        });
        address
    }

    fn buffer(&self, name: &str) -> Result<&Buffer> {
        self.buffers
            .iter()
            .find(|b| b.name == name)
            .ok_or_else(|| EmuError::NoSuchBuffer(name.to_string()))
    }

    fn elements<const N: usize>(&self, name: &str) -> Result<Vec<[u8; N]>> {
        let buffer = self.buffer(name)?;
        if buffer.bytes.len() % N != 0 {
            return Err(EmuError::BufferElementSize {
                name: name.to_string(),
                bytes: buffer.bytes.len(),
                element_bytes: N,
            });
        }
        Ok(buffer
            .bytes
            .chunks_exact(N)
            .map(|c| c.try_into().unwrap_or([0; N]))
            .collect())
    }

    pub fn read_f32(&self, name: &str) -> Result<Vec<f32>> {
        Ok(self
            .elements::<4>(name)?
            .into_iter()
            .map(f32::from_le_bytes)
            .collect())
    }

    pub fn read_f64(&self, name: &str) -> Result<Vec<f64>> {
        Ok(self
            .elements::<8>(name)?
            .into_iter()
            .map(f64::from_le_bytes)
            .collect())
    }

    pub fn read_u32(&self, name: &str) -> Result<Vec<u32>> {
        Ok(self
            .elements::<4>(name)?
            .into_iter()
            .map(u32::from_le_bytes)
            .collect())
    }

    /// Forgets which thread wrote what: a new launch starts.
    pub(super) fn begin_launch(&mut self) {
        for buffer in &mut self.buffers {
            buffer.writers.fill(NO_WRITER);
        }
    }

    fn locate(
        &self,
        access: &'static str,
        address: u64,
        len: u64,
    ) -> std::result::Result<(usize, usize), Fault> {
        self.buffers
            .iter()
            .position(|b| {
                address >= b.address
                    && address.saturating_add(len) <= b.address + b.bytes.len() as u64
            })
            .map(|index| (index, (address - self.buffers[index].address) as usize))
            .ok_or(Fault::OutOfBounds {
                access,
                space: "global",
                address,
                bytes: len,
            })
    }

    pub(super) fn load(&self, address: u64, len: usize) -> std::result::Result<&[u8], Fault> {
        let (index, offset) = self.locate("load", address, len as u64)?;
        Ok(&self.buffers[index].bytes[offset..offset + len])
    }

    /// Atomically replaces the 8 bytes at `address` with `value`; the old value. Atomic
    /// accesses never conflict with each other.
    pub(super) fn exchange(&mut self, address: u64, value: u64) -> std::result::Result<u64, Fault> {
        let (index, offset) = self.locate("atom", address, 8)?;
        let bytes = &mut self.buffers[index].bytes[offset..offset + 8];
        let mut old = [0u8; 8];
        old.copy_from_slice(bytes);
        bytes.copy_from_slice(&value.to_le_bytes());
        Ok(u64::from_le_bytes(old))
    }

    /// Stores `data` as thread `writer` (its global id); a byte another thread already wrote in
    /// this launch is a conflict (the result would depend on scheduling).
    pub(super) fn store(
        &mut self,
        address: u64,
        data: &[u8],
        writer: u64,
    ) -> std::result::Result<(), Fault> {
        let (index, offset) = self.locate("store", address, data.len() as u64)?;
        let buffer = &mut self.buffers[index];
        for (i, byte) in data.iter().enumerate() {
            let other = buffer.writers[offset + i];
            if other != NO_WRITER && other != writer {
                return Err(Fault::ConflictingGlobalWrite {
                    address: address + i as u64,
                    buffer: buffer.name.clone(),
                    other,
                });
            }
            buffer.writers[offset + i] = writer;
            buffer.bytes[offset + i] = *byte;
        }
        Ok(())
    }
}
