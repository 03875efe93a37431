//! What a device is, as the driver reports it, and the PTX target kernels are rendered for on
//! it.

use crate::PtxTarget;

/// One device's properties.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceProperties {
    /// The device's name (`NVIDIA H100 80GB HBM3`).
    pub name: String,
    /// Compute capability (major, minor): `(9, 0)` for sm_90.
    pub compute_capability: (i32, i32),
    pub multiprocessors: u32,
    /// Global memory in bytes.
    pub total_memory: usize,
    /// The driver's CUDA version (`cuDriverGetVersion`: 12040 for 12.4).
    pub driver_version: i32,
}

impl DeviceProperties {
    /// The PTX version and architecture to render kernels for on this device: the newest PTX
    /// the driver loads (never below 7.0) and the device's own `sm_NN`.
    pub fn ptx_target(&self) -> PtxTarget {
        let (major, minor) = self.compute_capability;
        PtxTarget::SM80
            .for_driver(self.driver_version)
            .with_compute_capability(major, minor)
    }
}
