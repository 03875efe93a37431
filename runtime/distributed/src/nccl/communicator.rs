//! The NCCL communicator of one rank: `ncclCommInitRank` on the GPU `cuda:LOCAL_RANK`, and
//! the collectives on CUDA tensors, in place on their device memory (through
//! [`tessera_cuda::with_cuda_memory`]), enqueued on the stream Tessera's CUDA driver uses (the
//! legacy default stream of the device's primary context) so they run in order with the
//! kernels and copies around them. Every collective waits for its result before returning, as
//! the MPI backend's do. Host buffers (the error agreement, DDP's model check) travel through
//! a device copy.

use super::operand::check_device;
use super::types::{byte_count, reduce_op, reduce_type};
use crate::communicator::{Communicator, HostBuffer, check_gather_lengths, mixed_dtypes};
use crate::{Backend, DistributedError, ReduceOp, Reduction, Result};
use cudarc::nccl::sys::{self, ncclComm_t, ncclDataType_t};
use std::ffi::c_void;
use std::sync::Mutex;
use tessera_cuda::{CudaDriver, CudaTensorMemory, with_cuda_memory};
use tessera_tensor::{DType, Device, Tensor, no_grad};

/// The raw communicator; NCCL allows one thread at a time on it, which the mutex ensures.
struct RawComm(ncclComm_t);

// SAFETY: an ncclComm_t may be used from any thread, one at a time (the mutex around it).
unsafe impl Send for RawComm {}

pub(crate) struct NcclCommunicator {
    comm: Mutex<RawComm>,
    rank: usize,
    world_size: usize,
    ordinal: usize,
    /// The driver that made the device's primary context current for `ncclCommInitRank`:
    /// kept so that the context (which holds the communicator's device resources) stays
    /// retained until the communicator is destroyed, whatever the tensor backend does.
    context: Box<dyn CudaDriver>,
}

fn nccl_error(op: &'static str, e: impl std::fmt::Debug) -> DistributedError {
    DistributedError::invalid(op, format!("NCCL failed: {e:?}"))
}

fn cuda_error(op: &'static str) -> impl Fn(tessera_cuda::CudaError) -> DistributedError {
    move |e| DistributedError::invalid(op, format!("CUDA: {e}"))
}

impl NcclCommunicator {
    /// Joins the world of `world_size` ranks as `rank` on `cuda:ordinal` of `driver`, given
    /// the world's unique id (128 bytes from rank 0's `ncclGetUniqueId`).
    pub(crate) fn join(
        driver: Box<dyn CudaDriver>,
        id: [u8; super::store::ID_BYTES],
        rank: usize,
        world_size: usize,
        ordinal: usize,
    ) -> Result<NcclCommunicator> {
        let op = "init_process_group";
        driver.external_stream(ordinal).map_err(cuda_error(op))?;
        let mut unique = sys::ncclUniqueId {
            internal: [0; super::store::ID_BYTES],
        };
        for (dst, src) in unique.internal.iter_mut().zip(id) {
            *dst = src as std::ffi::c_char;
        }
        let (ranks, me) = (
            i32::try_from(world_size).map_err(|e| nccl_error(op, e))?,
            i32::try_from(rank).map_err(|e| nccl_error(op, e))?,
        );
        let mut comm: ncclComm_t = std::ptr::null_mut();
        // SAFETY: the device's context is current; `comm` is written once on success.
        unsafe { sys::ncclCommInitRank(&mut comm, ranks, unique, me) }
            .result()
            .map_err(|e| nccl_error(op, e))?;
        Ok(NcclCommunicator {
            comm: Mutex::new(RawComm(comm)),
            rank,
            world_size,
            ordinal,
            context: driver,
        })
    }

    pub(crate) fn device(&self) -> Device {
        Device::Cuda(self.ordinal)
    }

    /// Runs one NCCL call on this thread with the device's context current and the driver's
    /// stream, then waits for it.
    fn enqueue(
        &self,
        op: &'static str,
        memory: &CudaTensorMemory<'_>,
        call: impl FnOnce(ncclComm_t, sys::cudaStream_t) -> sys::ncclResult_t,
    ) -> Result<()> {
        let stream = memory
            .driver
            .external_stream(memory.ordinal)
            .map_err(cuda_error(op))?;
        {
            let comm = self.comm.lock().unwrap_or_else(|e| e.into_inner());
            call(comm.0, stream as sys::cudaStream_t)
                .result()
                .map_err(|e| nccl_error(op, e))?;
        }
        memory
            .driver
            .synchronize(memory.ordinal)
            .map_err(cuda_error(op))
    }

    /// `tensor` combined across ranks, in place.
    pub(crate) fn all_reduce_tensor(&self, tensor: &Tensor, op: ReduceOp) -> Result<()> {
        let name = "all_reduce";
        check_device(tensor, name, self.ordinal)?;
        let dtype = reduce_type(tensor.dtype(), name)?;
        with_cuda_memory(tensor, name, true, |m| {
            let ptr = m.ptr.address() as *mut c_void;
            self.enqueue(name, &m, |comm, stream| unsafe {
                // SAFETY: `ptr` holds `numel` elements of the tensor's dtype on this device.
                sys::ncclAllReduce(ptr, ptr, m.numel, dtype, reduce_op(op), comm, stream)
            })
        })
        .map_err(cuda_error(name))?
    }

    /// Rank `root`'s `tensor` in every rank's `tensor`, in place (any dtype, as bytes).
    pub(crate) fn broadcast_tensor(&self, tensor: &Tensor, root: usize) -> Result<()> {
        let name = "broadcast";
        check_device(tensor, name, self.ordinal)?;
        let root = self.root(root)?;
        with_cuda_memory(tensor, name, true, |m| {
            let ptr = m.ptr.address() as *mut c_void;
            let bytes = byte_count(m.numel, m.dtype);
            self.enqueue(name, &m, |comm, stream| unsafe {
                // SAFETY: `ptr` holds `bytes` bytes on this device.
                sys::ncclBroadcast(
                    ptr,
                    ptr,
                    bytes,
                    ncclDataType_t::ncclUint8,
                    root,
                    comm,
                    stream,
                )
            })
        })
        .map_err(cuda_error(name))?
    }

    /// Every rank's `tensor` in rank order, each a view of one gathered device buffer.
    pub(crate) fn all_gather_tensor(&self, tensor: &Tensor) -> Result<Vec<Tensor>> {
        let name = "all_gather";
        check_device(tensor, name, self.ordinal)?;
        let shape = tensor.shape();
        let numel = tensor.numel();
        let send = tensor
            .contiguous()
            .map_err(DistributedError::tensor(name))?;
        let recv = self.device_zeros(&[self.world_size * numel], tensor.dtype(), name)?;
        with_cuda_memory(&send, name, false, |s| {
            with_cuda_memory(&recv, name, true, |r| {
                let bytes = byte_count(s.numel, s.dtype);
                let (src, dst) = (s.ptr.address() as *const c_void, r.ptr.address());
                self.enqueue(name, &r, |comm, stream| unsafe {
                    // SAFETY: `src` holds `bytes` bytes, `dst` world_size times as many.
                    sys::ncclAllGather(
                        src,
                        dst as *mut c_void,
                        bytes,
                        ncclDataType_t::ncclUint8,
                        comm,
                        stream,
                    )
                })
            })
        })
        .map_err(cuda_error(name))?
        .map_err(cuda_error(name))??;
        (0..self.world_size)
            .map(|r| {
                recv.narrow(0, r * numel, numel)
                    .and_then(|v| v.reshape(&shape))
                    .map_err(DistributedError::tensor(name))
            })
            .collect()
    }

    /// `tensor` reduced across ranks, block `rank` of its first dimension.
    pub(crate) fn reduce_scatter_tensor(
        &self,
        tensor: &Tensor,
        block_shape: &[usize],
        op: ReduceOp,
    ) -> Result<Tensor> {
        let name = "reduce_scatter";
        check_device(tensor, name, self.ordinal)?;
        let dtype = reduce_type(tensor.dtype(), name)?;
        let send = tensor
            .contiguous()
            .map_err(DistributedError::tensor(name))?;
        let recv = self.device_zeros(block_shape, tensor.dtype(), name)?;
        with_cuda_memory(&send, name, false, |s| {
            with_cuda_memory(&recv, name, true, |r| {
                let (src, dst, count) = (s.ptr.address(), r.ptr.address(), r.numel);
                self.enqueue(name, &r, |comm, stream| unsafe {
                    // SAFETY: `src` holds world_size blocks of `count` elements, `dst` one.
                    sys::ncclReduceScatter(
                        src as *const c_void,
                        dst as *mut c_void,
                        count,
                        dtype,
                        reduce_op(op),
                        comm,
                        stream,
                    )
                })
            })
        })
        .map_err(cuda_error(name))?
        .map_err(cuda_error(name))??;
        Ok(recv)
    }

    fn root(&self, root: usize) -> Result<i32> {
        i32::try_from(root)
            .ok()
            .filter(|_| root < self.world_size)
            .ok_or_else(|| {
                DistributedError::invalid(
                    "broadcast",
                    format!("root rank {root} is outside a world of {}", self.world_size),
                )
            })
    }

    /// Zeros on this rank's device.
    fn device_zeros(&self, shape: &[usize], dtype: DType, op: &'static str) -> Result<Tensor> {
        Tensor::zeros(shape, dtype)
            .and_then(|t| t.to_device(self.device()))
            .map_err(DistributedError::tensor(op))
    }

    /// `values` copied to this rank's device as a 1-D tensor.
    fn upload(&self, values: &HostBuffer<'_>, op: &'static str) -> Result<Tensor> {
        let host = match values {
            HostBuffer::F32(b) => Tensor::from_slice(b, &[b.len()]),
            HostBuffer::F64(b) => Tensor::from_slice(b, &[b.len()]),
        };
        host.and_then(|t| t.to_device(self.device()))
            .map_err(DistributedError::tensor(op))
    }
}

/// Copies a device result back into a host buffer of the same length and type.
fn download(tensor: &Tensor, into: HostBuffer<'_>, op: &'static str) -> Result<()> {
    let _guard = no_grad();
    match into {
        HostBuffer::F32(b) => b.copy_from_slice(
            &tensor
                .to_vec::<f32>()
                .map_err(DistributedError::tensor(op))?,
        ),
        HostBuffer::F64(b) => b.copy_from_slice(
            &tensor
                .to_vec::<f64>()
                .map_err(DistributedError::tensor(op))?,
        ),
    }
    Ok(())
}

fn reduce_of(reduction: Reduction) -> ReduceOp {
    match reduction {
        Reduction::Sum => ReduceOp::Sum,
        Reduction::Max => ReduceOp::Max,
        Reduction::Min => ReduceOp::Min,
    }
}

impl Communicator for NcclCommunicator {
    fn backend(&self) -> Backend {
        Backend::Nccl
    }

    fn rank(&self) -> usize {
        self.rank
    }

    fn world_size(&self) -> usize {
        self.world_size
    }

    fn all_reduce(&self, buffer: HostBuffer<'_>, reduction: Reduction) -> Result<()> {
        let device = self.upload(&buffer, "all_reduce")?;
        self.all_reduce_tensor(&device, reduce_of(reduction))?;
        download(&device, buffer, "all_reduce")
    }

    fn broadcast(&self, buffer: HostBuffer<'_>, root: usize) -> Result<()> {
        let device = self.upload(&buffer, "broadcast")?;
        self.broadcast_tensor(&device, root)?;
        download(&device, buffer, "broadcast")
    }

    fn all_gather(&self, send: HostBuffer<'_>, mut recv: HostBuffer<'_>) -> Result<()> {
        check_gather_lengths(send.len(), recv.len(), self.world_size)?;
        if matches!(
            (&send, &recv),
            (HostBuffer::F32(_), HostBuffer::F64(_)) | (HostBuffer::F64(_), HostBuffer::F32(_))
        ) {
            return Err(mixed_dtypes("all_gather"));
        }
        let device = self.upload(&send, "all_gather")?;
        let len = send.len();
        for (rank, part) in self.all_gather_tensor(&device)?.iter().enumerate() {
            let block = rank * len..(rank + 1) * len;
            let into = match &mut recv {
                HostBuffer::F32(b) => HostBuffer::F32(&mut b[block]),
                HostBuffer::F64(b) => HostBuffer::F64(&mut b[block]),
            };
            download(part, into, "all_gather")?;
        }
        Ok(())
    }

    fn reduce_scatter(
        &self,
        send: HostBuffer<'_>,
        recv: HostBuffer<'_>,
        reduction: Reduction,
    ) -> Result<()> {
        check_gather_lengths(recv.len(), send.len(), self.world_size)?;
        if matches!(
            (&send, &recv),
            (HostBuffer::F32(_), HostBuffer::F64(_)) | (HostBuffer::F64(_), HostBuffer::F32(_))
        ) {
            return Err(mixed_dtypes("reduce_scatter"));
        }
        let device = self.upload(&send, "reduce_scatter")?;
        let block = self.reduce_scatter_tensor(&device, &[recv.len()], reduce_of(reduction))?;
        download(&block, recv, "reduce_scatter")
    }

    /// NCCL has no barrier: an all-reduce of one element every rank must join, waited for
    /// (what PyTorch's NCCL barrier does).
    fn barrier(&self) -> Result<()> {
        let one = self.device_zeros(&[1], DType::F32, "barrier")?;
        self.all_reduce_tensor(&one, ReduceOp::Sum)
    }

    fn abort(&self, code: i32) -> ! {
        if let Ok(comm) = self.comm.try_lock() {
            // SAFETY: the communicator is live; abort stops its pending operations.
            let _ = unsafe { sys::ncclCommAbort(comm.0) };
        }
        std::process::exit(code)
    }
}

impl Drop for NcclCommunicator {
    fn drop(&mut self) {
        // The device's context current on this thread (the last handle may drop anywhere).
        let _ = self.context.external_stream(self.ordinal);
        let comm = self.comm.get_mut().unwrap_or_else(|e| e.into_inner());
        // SAFETY: the communicator is live and destroyed once, before its context is released.
        let _ = unsafe { sys::ncclCommDestroy(comm.0) };
    }
}
