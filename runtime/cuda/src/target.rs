//! What a kernel is rendered for: the PTX ISA version and the SM architecture, and the
//! version a driver of a given CUDA version can load.

/// The PTX ISA version and target architecture of rendered text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PtxTarget {
    /// `.version major.minor`.
    pub version: (u32, u32),
    /// `.target sm_NN`.
    pub sm: u32,
}

impl PtxTarget {
    /// PTX ISA 7.0 (CUDA 11.0, every driver since 2020) for sm_80: what tests render for.
    pub const SM80: PtxTarget = PtxTarget {
        version: (7, 0),
        sm: 80,
    };

    /// The same architecture, with the PTX version a driver of CUDA version `driver`
    /// (`cuDriverGetVersion`: 1000 major + 10 minor, 12040 for 12.4) loads: the newest one it
    /// supports, never below 7.0, which the renderer's instructions need.
    pub fn for_driver(self, driver: i32) -> PtxTarget {
        let (major, minor) = (driver / 1000, (driver % 1000) / 10);
        // CUDA 11.x supports PTX 7.x with x = the minor version; CUDA 12.x supports PTX 8.x.
        let version = match major {
            ..=10 => (7, 0),
            11 => (7, minor.clamp(0, 8) as u32),
            12 => (8, minor.clamp(0, 8) as u32),
            _ => (8, 8),
        };
        PtxTarget { version, ..self }
    }

    /// The architecture of a device of compute capability `major.minor`.
    pub fn with_compute_capability(self, major: i32, minor: i32) -> PtxTarget {
        PtxTarget {
            sm: (major * 10 + minor).max(0) as u32,
            ..self
        }
    }
}

impl Default for PtxTarget {
    fn default() -> Self {
        PtxTarget::SM80
    }
}
