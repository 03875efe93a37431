//! `DistributedDataParallel`: wraps a module so that every rank trains a replica on its own
//! share of each batch and ends each backward with the same, averaged gradients (PyTorch's
//! `torch.nn.parallel.DistributedDataParallel`).

mod buckets;
mod comm_thread;
mod flat_bucket;
mod reducer;
mod stats;

pub use buckets::{Bucket, plan_buckets};
pub use stats::SyncStats;

use crate::{DistributedError, ProcessGroup, Result};
use comm_thread::CommThread;
use reducer::Reducer;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use tessera_nn::{Args, Call, Forward, Module, ModuleCore, ModuleExt};
use tessera_tensor::{GradHookHandle, Tensor};

/// PyTorch's default bucket size, `bucket_cap_mb=25`.
pub const DEFAULT_BUCKET_CAP_BYTES: usize = 25 * 1024 * 1024;

/// How a [`DistributedDataParallel`] groups and synchronises.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DdpOptions {
    /// The most bytes of gradients one all-reduce carries.
    pub bucket_cap_bytes: usize,
    /// Copies rank 0's buffers (BatchNorm running statistics) to every rank before each
    /// forward, as PyTorch does by default.
    pub broadcast_buffers: bool,
}

impl Default for DdpOptions {
    fn default() -> Self {
        DdpOptions {
            bucket_cap_bytes: DEFAULT_BUCKET_CAP_BYTES,
            broadcast_buffers: true,
        }
    }
}

/// A module replicated on every rank of a process group. Construction copies rank 0's
/// parameters and buffers to every rank; each backward averages the gradients across ranks,
/// bucket by bucket as they become ready, so communication overlaps the rest of backward.
/// Its `state_dict` keys carry the `module.` prefix, as PyTorch's do
/// ([`consume_prefix_in_state_dict_if_present`](crate::consume_prefix_in_state_dict_if_present)
/// strips it to load into the bare module).
#[derive(Module)]
#[module(name = "DistributedDataParallel")]
pub struct DistributedDataParallel<M: Module> {
    core: ModuleCore,
    module: M,
    #[module(skip)]
    group: ProcessGroup,
    #[module(skip)]
    options: DdpOptions,
    #[module(skip)]
    reducer: Arc<Reducer>,
    #[module(skip)]
    hooks: Mutex<Vec<GradHookHandle>>,
    #[module(skip)]
    skip_sync: AtomicBool,
}

impl<M: Module> DistributedDataParallel<M> {
    /// Wraps `module` with the default options.
    pub fn new(module: M, group: &ProcessGroup) -> Result<Self> {
        Self::with_options(module, group, DdpOptions::default())
    }

    pub fn with_options(module: M, group: &ProcessGroup, options: DdpOptions) -> Result<Self> {
        let params: Vec<(String, Tensor)> = module
            .named_parameters()
            .into_iter()
            .filter(|(_, p)| p.tensor().requires_grad())
            .map(|(name, p)| (name, p.tensor().clone()))
            .collect();
        check_same_model(&module, &params, group)?;
        {
            let _guard = tessera_tensor::no_grad();
            for (_, p) in module.named_parameters() {
                group.broadcast(p.tensor(), 0)?;
            }
            broadcast_buffers(&module, group)?;
        }
        let sizes: Vec<_> = params.iter().map(|(_, t)| (t.dtype(), t.numel())).collect();
        let buckets = plan_buckets(&sizes, options.bucket_cap_bytes.max(1));
        let reducer = Arc::new(Reducer::new(
            params,
            buckets,
            CommThread::start(group.clone())?,
            group.device(),
        ));
        let mut hooks = Vec::new();
        for (index, (_, param)) in reducer.params().iter().enumerate() {
            let weak = Arc::downgrade(&reducer);
            let handle = param
                .register_post_accumulate_grad_hook(move |_| match weak.upgrade() {
                    Some(reducer) => Ok(reducer.mark_ready(index)?),
                    None => Ok(()),
                })
                .map_err(DistributedError::tensor(
                    "DistributedDataParallel gradient hook",
                ))?;
            hooks.push(handle);
        }
        Ok(DistributedDataParallel {
            core: ModuleCore::default(),
            module,
            group: group.clone(),
            options,
            reducer,
            hooks: Mutex::new(hooks),
            skip_sync: AtomicBool::new(false),
        })
    }

    /// The wrapped module (PyTorch's `ddp.module`).
    pub fn module(&self) -> &M {
        &self.module
    }

    pub fn process_group(&self) -> &ProcessGroup {
        &self.group
    }

    pub fn options(&self) -> DdpOptions {
        self.options
    }

    /// The gradient buckets, in launch order; parameter indices count the wrapped module's
    /// parameters that require grad, in registration order.
    pub fn buckets(&self) -> &[Bucket] {
        self.reducer.buckets()
    }

    /// What the last synchronised backward did (launch order, hidden communication).
    pub fn last_sync_stats(&self) -> Option<SyncStats> {
        self.reducer.last_stats()
    }

    /// Until the guard is dropped, forwards run without gradient synchronisation: their
    /// backwards only accumulate local gradients (gradient accumulation), and the first
    /// forward after the guard averages everything accumulated (PyTorch's `no_sync()`).
    pub fn no_sync(&self) -> NoSyncGuard<'_> {
        let previous = self.skip_sync.swap(true, Ordering::SeqCst);
        NoSyncGuard {
            flag: &self.skip_sync,
            previous,
        }
    }

    /// What forward does before running the module: buffers from rank 0, and arming the
    /// reducer for the coming backward.
    fn prepare_forward(&self) -> Result<()> {
        if self.options.broadcast_buffers && self.group.world_size() > 1 {
            let _guard = tessera_tensor::no_grad();
            broadcast_buffers(&self.module, &self.group)?;
        }
        // A forward without autograd (evaluation) leaves the coming backward's state alone.
        if !tessera_tensor::is_grad_enabled() {
            return Ok(());
        }
        self.reducer
            .prepare_for_backward(!self.skip_sync.load(Ordering::SeqCst))
    }
}

impl<M: Module> Drop for DistributedDataParallel<M> {
    fn drop(&mut self) {
        let hooks = std::mem::take(self.hooks.get_mut().unwrap_or_else(|e| e.into_inner()));
        for hook in hooks {
            hook.remove();
        }
    }
}

/// Restores synchronisation (or the state before it) when dropped.
pub struct NoSyncGuard<'a> {
    flag: &'a AtomicBool,
    previous: bool,
}

impl Drop for NoSyncGuard<'_> {
    fn drop(&mut self) {
        self.flag.store(self.previous, Ordering::SeqCst);
    }
}

impl<I: Args, M: Forward<I>> Forward<I> for DistributedDataParallel<M>
where
    M::Output: Args,
{
    type Output = M::Output;

    fn forward(&self, input: I) -> tessera_nn::Result<M::Output> {
        self.prepare_forward()?;
        self.module.call(input)
    }
}

fn broadcast_buffers(module: &dyn Module, group: &ProcessGroup) -> Result<()> {
    for (_, buffer) in module.named_buffers() {
        group.broadcast(&buffer, 0)?;
    }
    Ok(())
}

/// Refuses ranks whose models differ in parameter count or size (broadcasting rank 0's
/// weights into them would write out of shape).
fn check_same_model(
    module: &dyn Module,
    params: &[(String, Tensor)],
    group: &ProcessGroup,
) -> Result<()> {
    let numel: usize = params.iter().map(|(_, t)| t.numel()).sum();
    let buffers = module.named_buffers().len();
    let signature = [params.len() as f64, numel as f64, buffers as f64];
    let highest = Tensor::from_slice(&signature, &[3])
        .map_err(DistributedError::tensor("DistributedDataParallel"))?;
    let lowest = highest
        .deep_clone()
        .map_err(DistributedError::tensor("DistributedDataParallel"))?;
    // Host values: on NCCL they travel through the device, whatever the module's device.
    let mut high = crate::host_values::HostValues::read(&highest, "DistributedDataParallel")?;
    let mut low = crate::host_values::HostValues::read(&lowest, "DistributedDataParallel")?;
    group.all_reduce_values(&mut high, crate::ReduceOp::Max)?;
    group.all_reduce_values(&mut low, crate::ReduceOp::Min)?;
    high.write_into(&highest, 0, "DistributedDataParallel")?;
    low.write_into(&lowest, 0, "DistributedDataParallel")?;
    let (highest, lowest) = (
        highest
            .to_vec_f64()
            .map_err(DistributedError::tensor("DistributedDataParallel"))?,
        lowest
            .to_vec_f64()
            .map_err(DistributedError::tensor("DistributedDataParallel"))?,
    );
    if highest != lowest {
        return Err(DistributedError::ModelMismatch {
            rank: group.rank(),
            detail: format!(
                "has {} parameters ({numel} elements) and {buffers} buffers; across ranks these range over {lowest:?}..{highest:?}",
                params.len()
            ),
        });
    }
    Ok(())
}
