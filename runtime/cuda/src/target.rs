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
        // The PTX ISA release notes: CUDA 11.x brings PTX 7.x, 12.0-12.5 PTX 8.0-8.5, 12.6
        // still 8.5, 12.8 PTX 8.7, 12.9 PTX 8.8, 13.0 PTX 9.0.
        let version = match (major, minor) {
            (..=10, _) => (7, 0),
            (11, m) => (7, m.clamp(0, 8) as u32),
            (12, m @ 0..=5) => (8, m as u32),
            (12, 6 | 7) => (8, 5),
            (12, 8) => (8, 7),
            (12, _) => (8, 8),
            _ => (9, 0),
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

#[cfg(test)]
mod tests {
    use super::PtxTarget;

    #[test]
    fn ptx_version_follows_the_driver_and_never_drops_below_7_0() {
        let v = |d| PtxTarget::SM80.for_driver(d).version;
        assert_eq!(v(10020), (7, 0));
        assert_eq!(v(11000), (7, 0));
        assert_eq!(v(11080), (7, 8));
        assert_eq!(v(12040), (8, 4));
        assert_eq!(v(12060), (8, 5));
        assert_eq!(v(12080), (8, 7));
        assert_eq!(v(12090), (8, 8));
        assert_eq!(v(13000), (9, 0));
        assert_eq!(PtxTarget::SM80.with_compute_capability(9, 0).sm, 90);
    }
}
