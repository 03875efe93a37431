//! Creating tensors: from data, filled, ranges, identity, random, and `*_like`.

use crate::cpu::{any_dispatch, tensor_from};
use crate::random::{Generator, with_global_generator};
use crate::size::checked_len;
use crate::storage::{CpuStorage, StorageElement};
use crate::{DType, Device, Element, Result, Tensor, TensorError};

/// `n` copies of `value`, or `None` when the allocator cannot provide them.
fn filled<T: Clone>(n: usize, value: T) -> Option<Vec<T>> {
    let mut v = Vec::new();
    v.try_reserve_exact(n).ok()?;
    v.resize(n, value);
    Some(v)
}

/// `x` (a new CPU tensor) moved to `t`'s device when a device backend holds `t`.
fn on_device_of(t: &Tensor, x: Tensor) -> Result<Tensor> {
    match t.device() {
        Device::Cpu | Device::Meta => Ok(x),
        device => x.to_device(device),
    }
}

fn out_of_memory(op: &str, shape: &[usize], dtype: DType) -> TensorError {
    TensorError::OutOfMemory {
        op: op.into(),
        shape: shape.to_vec(),
        bytes: shape.iter().product::<usize>() * dtype.size_in_bytes(),
    }
}

impl Tensor {
    /// A tensor of `shape` holding `data` in row-major order; the dtype is `T`'s.
    pub fn from_vec<T: StorageElement>(data: Vec<T>, shape: &[usize]) -> Result<Tensor> {
        let n = checked_len("from_vec", shape, T::DTYPE)?;
        if data.len() != n {
            return Err(TensorError::invalid(
                "from_vec",
                format!(
                    "{} elements cannot fill shape {shape:?} ({n} elements)",
                    data.len()
                ),
            ));
        }
        Ok(tensor_from(data, shape))
    }

    /// Like [`Tensor::from_vec`], copying from a slice.
    pub fn from_slice<T: StorageElement>(data: &[T], shape: &[usize]) -> Result<Tensor> {
        Tensor::from_vec(data.to_vec(), shape)
    }

    /// A 0-dimensional tensor.
    pub fn scalar<T: StorageElement>(value: T) -> Tensor {
        tensor_from(vec![value], &[])
    }

    pub fn zeros(shape: &[usize], dtype: DType) -> Result<Tensor> {
        let n = checked_len("zeros", shape, dtype)?;
        let storage =
            CpuStorage::try_zeros(dtype, n).ok_or_else(|| out_of_memory("zeros", shape, dtype))?;
        Ok(Tensor::from_cpu(storage, shape))
    }

    pub fn ones(shape: &[usize], dtype: DType) -> Result<Tensor> {
        Tensor::full(shape, 1.0, dtype)
    }

    /// A tensor of `shape` with every element `value` (converted to `dtype`).
    pub fn full(shape: &[usize], value: f64, dtype: DType) -> Result<Tensor> {
        let n = checked_len("full", shape, dtype)?;
        Ok(any_dispatch!(dtype, T => tensor_from(
            filled(n, T::from_f64(value)).ok_or_else(|| out_of_memory("full", shape, dtype))?,
            shape,
        )))
    }

    /// `start, start + step, ...` up to (not including) `end`, as PyTorch's `arange`.
    pub fn arange(start: f64, end: f64, step: f64, dtype: DType) -> Result<Tensor> {
        if step == 0.0 || !((end - start) / step).is_finite() {
            return Err(TensorError::invalid(
                "arange",
                format!("invalid range [{start}, {end}) with step {step}"),
            ));
        }
        let n = ((end - start) / step).ceil().max(0.0) as usize;
        Ok(
            any_dispatch!(dtype, T => tensor_from((0..n).map(|i| T::from_f64(start + i as f64 * step)).collect::<Vec<T>>(), &[n])),
        )
    }

    /// The `n x m` identity-like matrix.
    pub fn eye(n: usize, m: usize, dtype: DType) -> Result<Tensor> {
        Ok(any_dispatch!(dtype, T => {
            let mut data = vec![T::from_f64(0.0); n * m];
            for i in 0..n.min(m) {
                data[i * m + i] = T::from_f64(1.0);
            }
            tensor_from(data, &[n, m])
        }))
    }

    /// Zeros of `t`'s shape and dtype, on `t`'s device when that is a device backend's (as
    /// PyTorch; a meta tensor's are on the CPU).
    pub fn zeros_like(t: &Tensor) -> Result<Tensor> {
        on_device_of(t, Tensor::zeros(&t.shape(), t.dtype())?)
    }

    /// Ones like `t` (see [`Tensor::zeros_like`] for the device).
    pub fn ones_like(t: &Tensor) -> Result<Tensor> {
        on_device_of(t, Tensor::ones(&t.shape(), t.dtype())?)
    }

    /// `value` everywhere, like `t` (see [`Tensor::zeros_like`] for the device).
    pub fn full_like(t: &Tensor, value: f64) -> Result<Tensor> {
        on_device_of(t, Tensor::full(&t.shape(), value, t.dtype())?)
    }

    /// Uniform samples from `[0, 1)` drawn from the global generator.
    pub fn rand(shape: &[usize], dtype: DType) -> Result<Tensor> {
        with_global_generator(|g| Tensor::rand_with(shape, dtype, g))
    }

    /// Standard normal samples drawn from the global generator.
    pub fn randn(shape: &[usize], dtype: DType) -> Result<Tensor> {
        with_global_generator(|g| Tensor::randn_with(shape, dtype, g))
    }

    /// Uniform integers from `[low, high)` drawn from the global generator.
    pub fn randint(low: i64, high: i64, shape: &[usize], dtype: DType) -> Result<Tensor> {
        with_global_generator(|g| Tensor::randint_with(low, high, shape, dtype, g))
    }

    pub fn rand_with(shape: &[usize], dtype: DType, generator: &mut Generator) -> Result<Tensor> {
        Tensor::sampled(shape, dtype, "rand", || generator.uniform())
    }

    pub fn randn_with(shape: &[usize], dtype: DType, generator: &mut Generator) -> Result<Tensor> {
        Tensor::sampled(shape, dtype, "randn", || generator.normal())
    }

    pub fn randint_with(
        low: i64,
        high: i64,
        shape: &[usize],
        dtype: DType,
        generator: &mut Generator,
    ) -> Result<Tensor> {
        if low >= high {
            return Err(TensorError::invalid(
                "randint",
                format!("low ({low}) must be less than high ({high})"),
            ));
        }
        let n = checked_len("randint", shape, dtype)?;
        let values: Vec<i64> = (0..n).map(|_| generator.integer(low, high)).collect();
        tensor_from(values, shape).to_dtype(dtype)
    }

    pub fn rand_like(t: &Tensor) -> Result<Tensor> {
        Tensor::rand(&t.shape(), t.dtype())
    }

    pub fn randn_like(t: &Tensor) -> Result<Tensor> {
        Tensor::randn(&t.shape(), t.dtype())
    }

    fn sampled(
        shape: &[usize],
        dtype: DType,
        op: &str,
        mut sample: impl FnMut() -> f64,
    ) -> Result<Tensor> {
        if !dtype.is_float() {
            return Err(TensorError::dtype(op, dtype));
        }
        // Sampled in f64, so the f64 buffer is checked too.
        checked_len(op, shape, DType::F64)?;
        let n = checked_len(op, shape, dtype)?;
        let values: Vec<f64> = (0..n).map(|_| sample()).collect();
        tensor_from(values, shape).to_dtype(dtype)
    }

    /// A copy in fresh contiguous storage, cut from the autograd graph (PyTorch's
    /// `detach().clone()`), on the same device (a device backend's tensor is copied by its
    /// backend's `contiguous`).
    pub fn deep_clone(&self) -> Result<Tensor> {
        let x = self.detach();
        match x.device() {
            Device::Cpu | Device::Meta => crate::op::copy_contiguous(&x),
            _ => crate::Op::View(crate::op::ViewOp::Contiguous).apply1(&[&x]),
        }
    }
}
