//! Launching an entry: checks the launch configuration and the parameters against the entry's
//! signature, then runs the blocks one after another over the global memory.

use super::error::{EmuError, Result};
use super::global::GlobalMemory;
use super::program::Module;
use super::scheduler::run_block;
use super::shared::SharedMemory;
use super::thread::BlockEnv;

/// A 1-D launch: `grid` blocks of `block` threads.
#[derive(Debug, Clone, Copy)]
pub struct LaunchConfig {
    pub grid: u32,
    pub block: u32,
    /// Instructions one thread may run before the launch is declared stuck.
    pub step_limit: u64,
}

impl LaunchConfig {
    pub fn new(grid: u32, block: u32) -> LaunchConfig {
        LaunchConfig {
            grid,
            block,
            step_limit: 1_000_000,
        }
    }
}

/// A kernel argument.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ParamValue {
    /// A device pointer into [`GlobalMemory`].
    Ptr(u64),
    U32(u32),
    U64(u64),
}

impl Module {
    /// Runs entry `name` over `memory`.
    pub fn launch(
        &self,
        name: &str,
        config: LaunchConfig,
        params: &[ParamValue],
        memory: &mut GlobalMemory,
    ) -> Result<()> {
        let entry = self.entry(name)?;
        let invalid = |reason: String| EmuError::InvalidLaunch {
            entry: name.to_string(),
            reason,
        };
        if config.grid == 0 || !(1..=1024).contains(&config.block) {
            return Err(invalid(format!(
                "grid {} x block {}: need at least one block of 1 to 1024 threads",
                config.grid, config.block
            )));
        }
        if params.len() != entry.params.len() {
            return Err(invalid(format!(
                "it takes {} parameters, {} given",
                entry.params.len(),
                params.len()
            )));
        }
        let mut bits = Vec::with_capacity(params.len());
        for (param, value) in entry.params.iter().zip(params) {
            let (value_bits, width) = match *value {
                ParamValue::Ptr(v) | ParamValue::U64(v) => (v, 64),
                ParamValue::U32(v) => (v as u64, 32),
            };
            if param.ty.bits() != width {
                return Err(invalid(format!(
                    "parameter {} is .{:?}, given {value:?}",
                    param.name, param.ty
                )));
            }
            bits.push(value_bits);
        }
        memory.begin_launch();
        for ctaid in 0..config.grid {
            let mut env = BlockEnv {
                entry,
                params: &bits,
                ctaid,
                ntid: config.block,
                nctaid: config.grid,
                global: memory,
                shared: SharedMemory::new(entry.shared_bytes),
            };
            run_block(&mut env, config.step_limit)?;
        }
        Ok(())
    }
}
