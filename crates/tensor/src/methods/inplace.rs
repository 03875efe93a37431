//! In-place methods (`copy_`, `fill_`, `zero_`, `add_`, `sub_`, `mul_`, `div_`, `clamp_`):
//! they write through the storage, so every handle and view sharing it sees the change.

use crate::cpu::any_dispatch;
use crate::storage::StorageElement;
use crate::tensor_storage::Storage;
use crate::{Result, Tensor, TensorError, is_grad_enabled};

impl Tensor {
    /// Refuses in-place writes that autograd cannot account for.
    fn check_inplace(&self, op: &str) -> Result<()> {
        if is_grad_enabled() && self.requires_grad() {
            let what = if self.is_leaf() {
                "a leaf tensor that requires grad"
            } else {
                "a tensor that is part of the autograd graph"
            };
            return Err(TensorError::Autograd(format!(
                "{op}: {what} (shape {:?}) cannot be modified in place while grad mode is on; wrap the update in no_grad()",
                self.shape()
            )));
        }
        Ok(())
    }

    /// Copies `src` (broadcast to this shape, converted to this dtype) into this tensor.
    pub fn copy_(&self, src: &Tensor) -> Result<&Tensor> {
        self.check_inplace("copy_")?;
        let shape = self.shape();
        let src = src.to_dtype(self.dtype())?.expand(&shape).map_err(|_| {
            TensorError::shapes(
                "copy_",
                &src.shape(),
                &shape,
                "source must broadcast to the destination",
            )
        })?;
        any_dispatch!(self.dtype(), T => {
            if self.shares_storage(&src) {
                // Reading and writing one buffer: go through a copy.
                let values = src.to_vec::<T>()?;
                self.write_elements(&values)?;
            } else {
                src.with_slice(|values: &[T]| self.write_elements(values))??;
            }
        });
        Ok(self)
    }

    fn write_elements<T: StorageElement>(&self, values: &[T]) -> Result<()> {
        self.with_storage_mut(|storage, layout| {
            let dst = match storage {
                Storage::Cpu(cpu) => T::slice_mut(cpu).expect("dtype checked by the caller"),
                Storage::Device(buffer) => {
                    return buffer.write("copy_", layout, &T::wrap(values.to_vec()));
                }
                Storage::Meta => return Err(TensorError::NoData { op: "copy_".into() }),
            };
            match layout.contiguous_range() {
                Some(range) => dst[range].copy_from_slice(values),
                None => layout.offsets().zip(values).for_each(|(o, &v)| dst[o] = v),
            }
            Ok(())
        })
    }

    /// Sets every element to `value`.
    pub fn fill_(&self, value: f64) -> Result<&Tensor> {
        self.check_inplace("fill_")?;
        any_dispatch!(self.dtype(), T => {
            let values = vec![<T as crate::Element>::from_f64(value); self.numel()];
            self.write_elements(&values)?;
        });
        Ok(self)
    }

    pub fn zero_(&self) -> Result<&Tensor> {
        self.fill_(0.0)
    }

    pub fn add_scalar_(&self, value: f64) -> Result<&Tensor> {
        self.check_inplace("add_")?;
        self.copy_(&self.detach().add_scalar(value)?)
    }

    pub fn mul_scalar_(&self, value: f64) -> Result<&Tensor> {
        self.check_inplace("mul_")?;
        self.copy_(&self.detach().mul_scalar(value)?)
    }

    pub fn clamp_(&self, min: Option<f64>, max: Option<f64>) -> Result<&Tensor> {
        self.check_inplace("clamp_")?;
        self.copy_(&self.detach().clamp(min, max)?)
    }
}

/// In-place forms of binary methods: `self.name_(other)` writes `self.name(other)` into `self`.
macro_rules! inplace_binary_methods {
    ($($inplace:ident => $name:ident;)*) => {
        impl Tensor {
            $(
                #[doc = concat!("In-place `", stringify!($name), "` (with broadcasting of `other`).")]
                pub fn $inplace(&self, other: &Tensor) -> Result<&Tensor> {
                    self.check_inplace(stringify!($inplace))?;
                    self.copy_(&self.detach().$name(other)?)
                }
            )*
        }
    };
}

inplace_binary_methods! {
    add_ => add;
    sub_ => sub;
    mul_ => mul;
    div_ => div;
}
