//! Which tensors an NCCL collective takes: CUDA tensors on the device of this rank's
//! communicator. Anything else is a typed error naming the collective and the device.

use crate::{DistributedError, Result};
use tessera_tensor::{Device, Tensor};

/// Checks that `tensor` lives on `cuda:ordinal`, the device of this rank's communicator.
pub(crate) fn check_device(tensor: &Tensor, op: &'static str, ordinal: usize) -> Result<()> {
    let expected = Device::Cuda(ordinal);
    if tensor.device() == expected {
        return Ok(());
    }
    Err(DistributedError::invalid(
        op,
        format!(
            "the nccl backend of this rank runs collectives on {expected}; the tensor of shape \
             {:?} is on {} (move it with to_device({expected:?}))",
            tensor.shape(),
            tensor.device()
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_tensor::DType;

    #[test]
    fn a_cpu_tensor_is_an_error_naming_the_collective_and_the_device() {
        let t = Tensor::zeros(&[2, 3], DType::F32).unwrap();
        let err = check_device(&t, "all_reduce", 1).unwrap_err();
        let text = err.to_string();
        assert!(matches!(
            err,
            DistributedError::Invalid {
                op: "all_reduce",
                ..
            }
        ));
        assert!(text.contains("cpu") && text.contains("cuda:1"), "{text}");
        assert!(text.contains("[2, 3]"), "{text}");
    }
}
