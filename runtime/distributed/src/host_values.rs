//! A tensor's values copied to host memory in the element type collectives carry (float32
//! stays float32, every other dtype travels as float64), and written back in place.

use crate::communicator::HostBuffer;
use crate::{DistributedError, Result};
use tessera_tensor::{DType, Tensor, no_grad};

/// The values of one tensor, flat, in row-major order.
pub(crate) enum HostValues {
    F32(Vec<f32>),
    F64(Vec<f64>),
}

impl HostValues {
    /// Copies `tensor`'s values out (any layout, any device the tensor crate can read).
    pub(crate) fn read(tensor: &Tensor, op: &'static str) -> Result<HostValues> {
        Ok(match tensor.dtype() {
            DType::F32 => HostValues::F32(tensor.to_vec().map_err(DistributedError::tensor(op))?),
            _ => HostValues::F64(tensor.to_vec_f64().map_err(DistributedError::tensor(op))?),
        })
    }

    /// A zero-filled buffer of `len` elements of the type `dtype` travels as.
    pub(crate) fn zeros(dtype: DType, len: usize) -> HostValues {
        match dtype {
            DType::F32 => HostValues::F32(vec![0.0; len]),
            _ => HostValues::F64(vec![0.0; len]),
        }
    }

    /// Reducible values only: float32 or float64 tensors.
    pub(crate) fn read_reducible(tensor: &Tensor, op: &'static str) -> Result<HostValues> {
        match tensor.dtype() {
            DType::F32 | DType::F64 => Self::read(tensor, op),
            dtype => Err(DistributedError::UnsupportedDType { op, dtype }),
        }
    }

    pub(crate) fn buffer(&mut self) -> HostBuffer<'_> {
        match self {
            HostValues::F32(v) => HostBuffer::F32(v),
            HostValues::F64(v) => HostBuffer::F64(v),
        }
    }

    pub(crate) fn len(&self) -> usize {
        match self {
            HostValues::F32(v) => v.len(),
            HostValues::F64(v) => v.len(),
        }
    }

    /// Copies `tensor`'s values into this buffer from element `start` on.
    pub(crate) fn copy_from(
        &mut self,
        tensor: &Tensor,
        start: usize,
        op: &'static str,
    ) -> Result<()> {
        let values = Self::read(tensor, op)?;
        let fits = start + values.len() <= self.len();
        match (self, values) {
            (HostValues::F32(dst), HostValues::F32(src)) if fits => {
                dst[start..start + src.len()].copy_from_slice(&src)
            }
            (HostValues::F64(dst), HostValues::F64(src)) if fits => {
                dst[start..start + src.len()].copy_from_slice(&src)
            }
            _ => {
                return Err(DistributedError::invalid(
                    op,
                    format!(
                        "a {} tensor of shape {:?} does not fit the buffer",
                        tensor.dtype(),
                        tensor.shape()
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Multiplies every value by `factor` (the division of an average).
    pub(crate) fn scale(&mut self, factor: f64) {
        match self {
            HostValues::F32(v) => v.iter_mut().for_each(|x| *x *= factor as f32),
            HostValues::F64(v) => v.iter_mut().for_each(|x| *x *= factor),
        }
    }

    /// The elements `start..start + len` as a new tensor of `shape` and `dtype`.
    pub(crate) fn slice_to_tensor(
        &self,
        start: usize,
        shape: &[usize],
        dtype: DType,
        op: &'static str,
    ) -> Result<Tensor> {
        let len = shape.iter().product::<usize>();
        let range = start..start + len;
        let out = match self {
            HostValues::F32(v) => Tensor::from_slice(&v[range], shape),
            HostValues::F64(v) => Tensor::from_slice(&v[range], shape),
        };
        let out = out.map_err(DistributedError::tensor(op))?;
        if out.dtype() == dtype {
            Ok(out)
        } else {
            out.to_dtype(dtype).map_err(DistributedError::tensor(op))
        }
    }

    /// Writes the elements from `start` on into `tensor`, in place (every handle sees them;
    /// autograd does not record the write).
    pub(crate) fn write_into(&self, tensor: &Tensor, start: usize, op: &'static str) -> Result<()> {
        let values = self.slice_to_tensor(start, &tensor.shape(), tensor.dtype(), op)?;
        let _guard = no_grad();
        tensor
            .copy_(&values)
            .map_err(DistributedError::tensor(op))?;
        Ok(())
    }
}
