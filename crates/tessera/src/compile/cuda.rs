//! Compiling for a CUDA device: the lowered program (the same as for the CPU, lowered for
//! packed inputs) prepared on the device by `tessera_cuda::CudaProgram` with the prepared
//! graph module's attributes as weights, the device check of a call's inputs, and the sum of
//! the programs' run counters.

use super::{CompileError, Compiled};
use crate::fx::GraphModule;
use tessera_cuda::{CudaProgram, CudaRunStats, current_backend};
use tessera_tensor::{Device, Tensor};

/// `compiled`'s program prepared on CUDA device `ordinal`, its weights read from `gm`.
pub(super) fn prepare(
    compiled: &Compiled,
    gm: &GraphModule,
    ordinal: usize,
    graphs: bool,
) -> Result<CudaProgram, CompileError> {
    let backend = current_backend()?;
    let attribute = |name: &str| {
        gm.constants
            .get(name)
            .cloned()
            .ok_or_else(|| format!("no attribute {name}"))
    };
    Ok(CudaProgram::new(
        &backend,
        ordinal,
        &compiled.program,
        &compiled.plan,
        &attribute,
        graphs,
    )?)
}

/// Fails on the first input that is not on `device` (a module compiled for the CPU takes
/// CPU inputs as before: eager device tensors are not moved behind the caller's back).
pub(super) fn check_devices(device: Device, inputs: &[Tensor]) -> Result<(), CompileError> {
    if device == Device::Cpu {
        return Ok(());
    }
    for (i, t) in inputs.iter().enumerate() {
        if t.device() != device {
            return Err(CompileError::InputDevice {
                input: format!("{i} (shape {:?})", t.shape()),
                expected: device,
                found: t.device(),
            });
        }
    }
    Ok(())
}

/// The counters of `programs`, summed.
pub(super) fn sum_stats<'a>(programs: impl Iterator<Item = &'a CudaProgram>) -> CudaRunStats {
    programs.fold(CudaRunStats::default(), |mut sum, p| {
        sum += p.stats();
        sum
    })
}
