//! The driver's handles: device addresses, loaded modules and their functions. Each is a
//! `Copy` newtype, and prints as a reader would name it (`0x7f0000000000`, `module3`, `fn5`).

use std::fmt;

/// An address in a device's global memory, as [`CudaDriver::alloc`] returns it (a
/// `CUdeviceptr` on the real driver).
///
/// [`CudaDriver::alloc`]: super::CudaDriver::alloc
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DevicePtr(u64);

impl DevicePtr {
    pub const fn new(address: u64) -> DevicePtr {
        DevicePtr(address)
    }

    /// The raw address.
    pub const fn address(self) -> u64 {
        self.0
    }

    /// The address `bytes` further on.
    pub const fn add(self, bytes: usize) -> DevicePtr {
        DevicePtr(self.0 + bytes as u64)
    }
}

impl fmt::Display for DevicePtr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#x}", self.0)
    }
}

/// A module loaded by [`CudaDriver::load_module`](super::CudaDriver::load_module).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ModuleId(u64);

impl ModuleId {
    pub const fn new(index: u64) -> ModuleId {
        ModuleId(index)
    }

    pub const fn index(self) -> u64 {
        self.0
    }
}

impl fmt::Display for ModuleId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "module{}", self.0)
    }
}

/// An entry of a loaded module, from [`CudaDriver::function`](super::CudaDriver::function).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FunctionId(u64);

impl FunctionId {
    pub const fn new(index: u64) -> FunctionId {
        FunctionId(index)
    }

    pub const fn index(self) -> u64 {
        self.0
    }
}

impl fmt::Display for FunctionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "fn{}", self.0)
    }
}

/// An executable CUDA graph, from [`CudaDriver::end_capture`](super::CudaDriver::end_capture).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GraphId(u64);

impl GraphId {
    pub const fn new(index: u64) -> GraphId {
        GraphId(index)
    }

    pub const fn index(self) -> u64 {
        self.0
    }
}

impl fmt::Display for GraphId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "graph{}", self.0)
    }
}
