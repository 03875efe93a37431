//! Counting a model file's weights: parameters (all, and those that can train), buffers and
//! bytes, told apart by the names PyTorch's layers give their buffers and by dtype.

use tessera::Tensor;

/// Buffer names PyTorch's layers use (batch-norm statistics); every other entry counts as a
/// parameter.
pub fn is_buffer(key: &str) -> bool {
    let last = key.rsplit('.').next().unwrap_or(key);
    matches!(last, "running_mean" | "running_var" | "num_batches_tracked")
}

/// Element counts of a file's entries.
pub struct Totals {
    /// Elements of every entry that is not a buffer.
    pub parameters: u64,
    /// Elements of the parameters that can take gradients: the floating-point ones (integer
    /// entries, such as quantized weights, cannot). A file does not record `requires_grad`,
    /// so a frozen floating-point parameter counts as trainable.
    pub trainable: u64,
    pub buffers: u64,
    pub bytes: u64,
}

pub fn totals<'a>(entries: impl Iterator<Item = (&'a str, &'a Tensor)>) -> Totals {
    let mut t = Totals {
        parameters: 0,
        trainable: 0,
        buffers: 0,
        bytes: 0,
    };
    for (key, tensor) in entries {
        let n = tensor.numel() as u64;
        if is_buffer(key) {
            t.buffers += n;
        } else {
            t.parameters += n;
            if tensor.dtype().is_float() {
                t.trainable += n;
            }
        }
        t.bytes += n * tensor.dtype().size_in_bytes() as u64;
    }
    t
}
