//! CUDA graphs on the real driver. The driver keeps work on the legacy default stream, which
//! stream capture cannot record, so a capture is kept here: while a device captures, its
//! launches are recorded (function, dimensions, argument bytes), and ending the capture
//! builds the graph explicitly (`cuGraphCreate`, one `cuGraphAddKernelNode` per launch, each
//! depending on the one before, so they run in issue order) and instantiates it
//! (`cuGraphInstantiateWithFlags`); `cuGraphLaunch` replays it on the default stream.

use super::driver_call;
use super::launch::LaunchDims;
use crate::{CudaError, Result};
use cudarc::driver::sys;
use std::ffi::c_void;

/// One launch recorded during a capture.
pub(super) struct RecordedLaunch {
    pub(super) function: sys::CUfunction,
    pub(super) dims: LaunchDims,
    /// Each argument as the 8 bytes the kernel reads from the start of.
    pub(super) args: Vec<[u8; 8]>,
}

/// An instantiated graph and the device it runs on.
pub(super) struct SystemGraph {
    pub(super) device: usize,
    pub(super) graph: sys::CUgraph,
    pub(super) exec: sys::CUgraphExec,
}

/// Builds and instantiates the graph of `launches` in the bound context.
pub(super) fn instantiate(device: usize, launches: &mut [RecordedLaunch]) -> Result<SystemGraph> {
    let mut graph: sys::CUgraph = std::ptr::null_mut();
    // SAFETY: a context is bound (the caller's); `graph` receives a new handle.
    driver_call("cuGraphCreate", unsafe {
        sys::cuGraphCreate(&mut graph, 0)
    })?;
    let built = add_nodes(graph, launches).and_then(|()| {
        let mut exec: sys::CUgraphExec = std::ptr::null_mut();
        // SAFETY: `graph` is a complete graph of kernel nodes of this context.
        driver_call("cuGraphInstantiateWithFlags", unsafe {
            sys::cuGraphInstantiateWithFlags(&mut exec, graph, 0)
        })
        .map(|()| exec)
    });
    match built {
        Ok(exec) => Ok(SystemGraph {
            device,
            graph,
            exec,
        }),
        Err(e) => {
            // SAFETY: made above, destroyed once.
            let _ = unsafe { sys::cuGraphDestroy(graph) };
            Err(e)
        }
    }
}

fn add_nodes(graph: sys::CUgraph, launches: &mut [RecordedLaunch]) -> Result<()> {
    let mut previous: Option<sys::CUgraphNode> = None;
    for launch in launches {
        let mut params: Vec<*mut c_void> = launch
            .args
            .iter_mut()
            .map(|b| b.as_mut_ptr() as *mut c_void)
            .collect();
        let [gx, gy, gz] = launch.dims.grid;
        let [bx, by, bz] = launch.dims.block;
        let node_params = sys::CUDA_KERNEL_NODE_PARAMS {
            func: launch.function,
            gridDimX: gx,
            gridDimY: gy,
            gridDimZ: gz,
            blockDimX: bx,
            blockDimY: by,
            blockDimZ: bz,
            sharedMemBytes: launch.dims.shared_bytes,
            kernelParams: params.as_mut_ptr(),
            extra: std::ptr::null_mut(),
            ..unsafe { std::mem::zeroed() }
        };
        let mut node: sys::CUgraphNode = std::ptr::null_mut();
        let deps: Vec<sys::CUgraphNode> = previous.into_iter().collect();
        // SAFETY: the parameters point at the recorded argument bytes, which the driver
        // copies when it adds the node; `deps` are nodes of this graph.
        driver_call("cuGraphAddKernelNode_v2", unsafe {
            sys::cuGraphAddKernelNode_v2(&mut node, graph, deps.as_ptr(), deps.len(), &node_params)
        })?;
        previous = Some(node);
    }
    Ok(())
}

/// Destroys `g` (its executable, then its graph).
pub(super) fn destroy(g: &SystemGraph) -> Result<()> {
    // SAFETY: both were made by `instantiate` and are destroyed once.
    driver_call("cuGraphExecDestroy", unsafe {
        sys::cuGraphExecDestroy(g.exec)
    })?;
    driver_call("cuGraphDestroy", unsafe { sys::cuGraphDestroy(g.graph) })
}

/// The error of a capture call on a device in the wrong state.
pub(super) fn capture_misuse(call: &'static str, message: String) -> CudaError {
    CudaError::InvalidUse { call, message }
}
