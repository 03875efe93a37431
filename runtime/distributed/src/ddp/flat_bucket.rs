//! A bucket's gradients flattened into one buffer for its all-reduce: host values on the CPU
//! backends (MPI, a world of one), a CUDA tensor on the rank's GPU on NCCL, filled and read
//! back by device-to-device copies (gradients never pass through the host).

use super::buckets::Bucket;
use crate::host_values::HostValues;
use crate::{DistributedError, ProcessGroup, ReduceOp, Result};
use tessera_tensor::{Device, Tensor};

const OP: &str = "DistributedDataParallel bucket";

/// One bucket's flat gradients.
pub(crate) enum FlatBucket {
    Host(HostValues),
    /// A 1-D CUDA tensor of the bucket's dtype on the group's device.
    #[cfg(feature = "nccl")]
    Device(Tensor),
}

impl FlatBucket {
    /// The gradients `grads` (the bucket's parameters', in order) flattened for a group whose
    /// collectives take tensors on `device`.
    pub(crate) fn gather(device: Device, bucket: &Bucket, grads: &[Tensor]) -> Result<FlatBucket> {
        match device {
            Device::Cpu => {
                let mut flat = HostValues::zeros(bucket.dtype, bucket.numel);
                for (grad, &offset) in grads.iter().zip(&bucket.offsets) {
                    flat.copy_from(grad, offset, OP)?;
                }
                Ok(FlatBucket::Host(flat))
            }
            #[cfg(feature = "nccl")]
            Device::Cuda(ordinal) => device_bucket::gather(ordinal, bucket, grads),
            other => Err(DistributedError::invalid(
                OP,
                format!("gradients cannot be reduced on {other}"),
            )),
        }
    }

    /// Averages the bucket across the ranks of `group`, in place.
    pub(crate) fn average(&mut self, group: &ProcessGroup) -> Result<()> {
        match self {
            FlatBucket::Host(values) => group.all_reduce_values(values, ReduceOp::Average),
            #[cfg(feature = "nccl")]
            FlatBucket::Device(tensor) => group.all_reduce(tensor, ReduceOp::Average),
        }
    }

    /// Writes the averaged values back into `grads`.
    pub(crate) fn scatter(&self, bucket: &Bucket, grads: &[Tensor]) -> Result<()> {
        match self {
            FlatBucket::Host(values) => {
                for (grad, &offset) in grads.iter().zip(&bucket.offsets) {
                    values.write_into(grad, offset, OP)?;
                }
                Ok(())
            }
            #[cfg(feature = "nccl")]
            FlatBucket::Device(flat) => device_bucket::scatter(flat, bucket, grads),
        }
    }

    /// The device the bucket lives on.
    #[cfg(test)]
    pub(crate) fn device(&self) -> Device {
        match self {
            FlatBucket::Host(_) => Device::Cpu,
            #[cfg(feature = "nccl")]
            FlatBucket::Device(t) => t.device(),
        }
    }
}

#[cfg(feature = "nccl")]
mod device_bucket {
    //! Device-to-device copies between gradients and a CUDA bucket, on the driver's queue
    //! (ordered before the all-reduce enqueued after them).

    use super::{FlatBucket, OP};
    use crate::ddp::buckets::Bucket;
    use crate::{DistributedError, Result};
    use tessera_cuda::with_cuda_memory;
    use tessera_tensor::{Device, Tensor};

    fn cuda(e: tessera_cuda::CudaError) -> DistributedError {
        DistributedError::invalid(OP, format!("CUDA: {e}"))
    }

    fn check(grad: &Tensor, ordinal: usize) -> Result<()> {
        if grad.device() == Device::Cuda(ordinal) {
            return Ok(());
        }
        Err(DistributedError::invalid(
            OP,
            format!(
                "the nccl backend reduces gradients on cuda:{ordinal}; a gradient of shape {:?} \
                 is on {} (move the module with to_device before wrapping it)",
                grad.shape(),
                grad.device()
            ),
        ))
    }

    /// Copies `bytes` bytes from `src` (element `src_at`) to `dst` (element `dst_at`).
    fn copy(dst: &Tensor, dst_at: usize, src: &Tensor, src_at: usize, bytes: usize) -> Result<()> {
        with_cuda_memory(dst, OP, true, |d| {
            with_cuda_memory(src, OP, false, |s| {
                let size = d.dtype.size_in_bytes();
                if dst_at * size + bytes > d.bytes() || src_at * size + bytes > s.bytes() {
                    return Err(DistributedError::invalid(
                        OP,
                        format!("a copy of {bytes} bytes overruns the bucket or a gradient"),
                    ));
                }
                // SAFETY: both ranges lie in live CUDA tensors of this device (checked above).
                unsafe {
                    d.driver.copy_on_device(
                        d.ordinal,
                        d.ptr.add(dst_at * size),
                        s.ptr.add(src_at * size),
                        bytes,
                    )
                }
                .map_err(cuda)
            })
        })
        .map_err(cuda)?
        .map_err(cuda)?
    }

    pub(super) fn gather(ordinal: usize, bucket: &Bucket, grads: &[Tensor]) -> Result<FlatBucket> {
        for grad in grads {
            check(grad, ordinal)?;
        }
        let flat = Tensor::zeros(&[bucket.numel], bucket.dtype)
            .and_then(|t| t.to_device(Device::Cuda(ordinal)))
            .map_err(DistributedError::tensor(OP))?;
        for (grad, &offset) in grads.iter().zip(&bucket.offsets) {
            let grad = grad.contiguous().map_err(DistributedError::tensor(OP))?;
            let bytes = grad.numel() * grad.dtype().size_in_bytes();
            copy(&flat, offset, &grad, 0, bytes)?;
        }
        Ok(FlatBucket::Device(flat))
    }

    pub(super) fn scatter(flat: &Tensor, bucket: &Bucket, grads: &[Tensor]) -> Result<()> {
        for (grad, &offset) in grads.iter().zip(&bucket.offsets) {
            let bytes = grad.numel() * grad.dtype().size_in_bytes();
            copy(grad, 0, flat, offset, bytes)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_tensor::DType;

    fn bucket() -> (Bucket, Vec<Tensor>) {
        let a = Tensor::from_slice(&[1.0f32, 2.0], &[2]).unwrap();
        let b = Tensor::from_slice(&[3.0f32, 4.0, 5.0], &[3, 1]).unwrap();
        let bucket = Bucket {
            params: vec![1, 0],
            offsets: vec![0, 2],
            numel: 5,
            dtype: DType::F32,
        };
        (bucket, vec![a, b])
    }

    #[test]
    fn cpu_groups_flatten_on_the_host_and_write_back() {
        let (bucket, grads) = bucket();
        let flat = FlatBucket::gather(Device::Cpu, &bucket, &grads).unwrap();
        assert_eq!(flat.device(), Device::Cpu);
        let FlatBucket::Host(HostValues::F32(values)) = &flat else {
            panic!("a float32 bucket on the host");
        };
        assert_eq!(values, &[1.0, 2.0, 3.0, 4.0, 5.0]);
        let out = [
            Tensor::zeros(&[2], DType::F32).unwrap(),
            Tensor::zeros(&[3, 1], DType::F32).unwrap(),
        ];
        flat.scatter(&bucket, &out).unwrap();
        assert_eq!(out[1].to_vec::<f32>().unwrap(), [3.0, 4.0, 5.0]);
    }

    #[cfg(feature = "nccl")]
    #[test]
    fn nccl_groups_refuse_gradients_left_on_the_cpu() {
        let (bucket, grads) = bucket();
        let Err(err) = FlatBucket::gather(Device::Cuda(0), &bucket, &grads) else {
            panic!("CPU gradients placed in a CUDA bucket");
        };
        let text = err.to_string();
        assert!(text.contains("cuda:0") && text.contains("cpu"), "{text}");
    }

    /// Buckets on CUDA tensors, on the emulated driver's device `cuda:1`.
    #[cfg(feature = "nccl")]
    mod on_cuda {
        use super::*;
        use crate::emulated_driver::EmulatedDriver;
        use std::sync::{Arc, OnceLock};

        const GPU: Device = Device::Cuda(1);

        fn cuda(values: &[f64], shape: &[usize]) -> Tensor {
            static BACKEND: OnceLock<()> = OnceLock::new();
            BACKEND.get_or_init(|| {
                tessera_cuda::init_with_driver(Arc::new(EmulatedDriver::new(2)))
                    .map(|_| ())
                    .expect("registering the emulated CUDA backend")
            });
            Tensor::from_slice(values, shape)
                .and_then(|t| t.to_device(GPU))
                .unwrap()
        }

        /// Parameters 2 and 0 of a model, last first as DDP buckets them: `b` ([3, 1]) at
        /// offset 0, `a` ([2, 2], transposed: not contiguous) at offset 3.
        fn bucket() -> (Bucket, Vec<Tensor>) {
            let b = cuda(&[3.0, 4.0, 5.0], &[3, 1]);
            let a = cuda(&[1.0, 2.0, 6.0, 7.0], &[2, 2])
                .transpose(0, 1)
                .unwrap();
            let bucket = Bucket {
                params: vec![2, 0],
                offsets: vec![0, 3],
                numel: 7,
                dtype: DType::F64,
            };
            (bucket, vec![b, a])
        }

        #[test]
        fn gradients_are_copied_on_the_device_to_their_offsets_and_back() {
            let (bucket, grads) = bucket();
            let flat = FlatBucket::gather(GPU, &bucket, &grads).unwrap();
            assert_eq!(flat.device(), GPU);
            let FlatBucket::Device(tensor) = &flat else {
                panic!("a CUDA bucket for a CUDA group");
            };
            assert_eq!((tensor.shape(), tensor.dtype()), (vec![7], DType::F64));
            // The transposed gradient is flattened in its row-major order.
            let gathered = tensor.to_vec::<f64>().unwrap();
            assert_eq!(gathered, [3.0, 4.0, 5.0, 1.0, 6.0, 2.0, 7.0]);

            // What an all-reduce would leave, written back into fresh gradients.
            let averaged = FlatBucket::Device(cuda(&[9.0, 8.0, 7.0, 6.0, 5.0, 4.0, 3.0], &[7]));
            let out = [cuda(&[0.0; 3], &[3, 1]), cuda(&[0.0; 4], &[2, 2])];
            averaged.scatter(&bucket, &out).unwrap();
            assert_eq!(out[0].to_vec::<f64>().unwrap(), [9.0, 8.0, 7.0]);
            assert_eq!(out[1].to_vec::<f64>().unwrap(), [6.0, 5.0, 4.0, 3.0]);
        }

        #[test]
        fn gradients_on_another_gpu_are_an_error_naming_both() {
            let (bucket, grads) = bucket();
            let Err(err) = FlatBucket::gather(Device::Cuda(0), &bucket, &grads) else {
                panic!("cuda:1 gradients placed in a cuda:0 bucket");
            };
            let text = err.to_string();
            assert!(text.contains("cuda:0") && text.contains("cuda:1"), "{text}");
        }

        #[test]
        fn a_bucket_too_small_for_its_gradients_is_an_error_not_an_overrun() {
            let (mut bucket, grads) = bucket();
            bucket.numel = 6;
            let Err(err) = FlatBucket::gather(GPU, &bucket, &grads) else {
                panic!("seven elements copied into a bucket of six");
            };
            assert!(err.to_string().contains("overruns"), "{err}");
        }
    }
}
