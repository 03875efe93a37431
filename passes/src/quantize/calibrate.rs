//! Calibration: running representative batches through a graph with observers, so each
//! observer records the range of the values it sees. Gradients are not recorded.

use crate::{PassError, Result};
use tessera_fx::GraphModule;
use tessera_nn::Forward;
use tessera_tensor::Tensor;

/// Runs `gm` on each batch (one tensor per graph input) and discards the outputs.
pub fn calibrate(gm: &GraphModule, batches: &[Vec<Tensor>]) -> Result<()> {
    let _guard = tessera_tensor::no_grad();
    for (i, batch) in batches.iter().enumerate() {
        gm.forward(batch.clone())
            .map_err(|e| PassError::Unsupported(format!("calibration batch {i}: {e}")))?;
    }
    Ok(())
}
