//! Eager ops on CUDA tensors: each op runs the kernels the shared lowering makes of a graph
//! of that one op, so eager and compiled code never disagree. For an op, its operands'
//! dtypes and layouts, the backend builds the graph ([`op_graph`]), lowers it with
//! `tessera_kernel::lower` (the operands' layouts folded into the kernels' index arithmetic,
//! so views are read in place), renders each kernel to PTX for the device and loads it once
//! ([`compile`]); later calls with the same key find the loaded kernels in the device's
//! [`KernelCache`] and only allocate their outputs and launch ([`run`]).
//!
//! `matmul`, `linear`, convolutions and their input and weight gradients, which a one-op graph
//! lowers to an external call, are compiled by [`external`] as standalone generated GEMM and
//! implicit-GEMM convolution kernels ([`builder`] assembles them). What else the lowering does not turn into
//! rendered kernels (an op it leaves to its eager CPU kernel, integer buffers) makes the op
//! unsupported on the device: `apply` returns `None`, which dispatch reports as
//! `TensorError::UnsupportedOnDevice` naming the op.

mod builder;
mod cache;
mod compile;
mod conv_backward;
mod convolution;
mod dropout;
pub(crate) mod external;
mod graph;
mod product;
mod run;

pub(crate) use cache::KernelCache;
pub(crate) use compile::compile;
pub(crate) use run::read_status;

use super::CudaBackend;
use super::errors::tensor_error;
use super::storage::CudaStorage;
use cache::EagerKey;
use std::any::Any;
use tessera_tensor::backend::{DeviceOperand, DeviceStorage};
use tessera_tensor::{Device, Op, Result, TensorError, TensorMeta};

/// Runs `op` on `inputs` (CUDA storage of one device) into new storage per entry of
/// `outputs`; `None` when the op has no kernels on the device.
pub(crate) fn apply(
    backend: &CudaBackend,
    op: &Op,
    inputs: &[DeviceOperand<'_>],
    outputs: &[TensorMeta],
) -> Option<Result<Vec<Box<dyn DeviceStorage>>>> {
    let device = inputs.first()?.memory.device();
    let Device::Cuda(ordinal) = device else {
        return None;
    };
    let name = op.name();
    let fail = |e| tensor_error(&name, device, backend.driver().name(), e);
    let mut storages = Vec::with_capacity(inputs.len());
    for input in inputs {
        match (input.memory as &dyn Any).downcast_ref::<CudaStorage>() {
            Some(s) if s.ordinal() == ordinal => storages.push(s),
            _ => {
                return Some(Err(TensorError::DeviceMismatch {
                    op: name,
                    lhs: device,
                    rhs: input.memory.device(),
                }));
            }
        }
    }
    let state = match backend.state(ordinal) {
        Ok(s) => s,
        Err(e) => return Some(Err(fail(e))),
    };
    if let (Op::Dropout(d), [x], [storage]) = (op, inputs, storages.as_slice()) {
        return Some(
            dropout::run(backend.driver(), &state, d, x, storage, outputs)
                .map(|outs| {
                    outs.into_iter()
                        .map(|s| Box::new(s) as Box<dyn DeviceStorage>)
                        .collect()
                })
                .map_err(fail),
        );
    }
    let key = EagerKey::new(op, inputs);
    let compiled = state.kernels.get_or_compile(key, || {
        compile(backend.driver(), &state, op, inputs, outputs)
    });
    let compiled = match compiled {
        Ok(Some(c)) => c,
        Ok(None) => return None,
        Err(e) => return Some(Err(fail(e))),
    };
    Some(
        compiled
            .run(&state, &storages, outputs)
            .map(|outs| {
                outs.into_iter()
                    .map(|s| Box::new(s) as Box<dyn DeviceStorage>)
                    .collect()
            })
            .map_err(fail),
    )
}
