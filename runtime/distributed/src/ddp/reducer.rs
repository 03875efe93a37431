//! The reducer: from post-accumulate-grad hooks, marks gradients ready, launches each bucket's
//! all-reduce on the communication thread as soon as the bucket is complete (buckets in one
//! fixed order on every rank), and at the last gradient waits for the averages and writes them
//! back into `.grad`.

use super::buckets::Bucket;
use super::comm_thread::CommThread;
use super::flat_bucket::FlatBucket;
use super::stats::SyncStats;
use crate::{DistributedError, Result};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use tessera_tensor::{Device, Tensor};

/// Gradient synchronisation of one wrapped module.
pub(crate) struct Reducer {
    params: Vec<(String, Tensor)>,
    buckets: Vec<Bucket>,
    /// For every parameter, its bucket.
    bucket_of: Vec<usize>,
    /// Where buckets are flattened: the process group's device.
    device: Device,
    state: Mutex<Iteration>,
}

/// Where the current iteration stands.
struct Iteration {
    /// Set by forward: gradients of the coming backward are to be reduced.
    armed: bool,
    ready: Vec<bool>,
    /// Per bucket, how many of its gradients are not ready yet.
    pending: Vec<usize>,
    /// The next bucket to launch: buckets launch in index order on every rank.
    next_launch: usize,
    /// How many gradients were still pending when each bucket was launched.
    launched_with_pending: Vec<(usize, usize)>,
    comm: CommThread,
    last: Option<SyncStats>,
}

impl Reducer {
    pub(crate) fn new(
        params: Vec<(String, Tensor)>,
        buckets: Vec<Bucket>,
        comm: CommThread,
        device: Device,
    ) -> Reducer {
        let mut bucket_of = vec![0; params.len()];
        for (b, bucket) in buckets.iter().enumerate() {
            for &p in &bucket.params {
                bucket_of[p] = b;
            }
        }
        let state = Iteration {
            armed: false,
            ready: vec![false; params.len()],
            pending: buckets.iter().map(|b| b.params.len()).collect(),
            next_launch: 0,
            launched_with_pending: Vec::new(),
            comm,
            last: None,
        };
        Reducer {
            params,
            buckets,
            bucket_of,
            device,
            state: Mutex::new(state),
        }
    }

    pub(crate) fn params(&self) -> &[(String, Tensor)] {
        &self.params
    }

    pub(crate) fn buckets(&self) -> &[Bucket] {
        &self.buckets
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Iteration> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Called by forward: the next backward reduces gradients when `sync`. A previous
    /// iteration whose backward reached some gradients but not all is an error naming the
    /// parameters that got none (their ranks would wait for each other forever).
    pub(crate) fn prepare_for_backward(&self, sync: bool) -> Result<()> {
        let mut state = self.lock();
        if state.armed && state.ready.iter().any(|&r| r) {
            let missing: Vec<&str> = self
                .params
                .iter()
                .zip(&state.ready)
                .filter(|(_, ready)| !**ready)
                .map(|((name, _), _)| name.as_str())
                .collect();
            return Err(DistributedError::Reducer(format!(
                "the previous iteration's backward did not produce gradients for {missing:?}; \
                 every parameter must take part in the loss"
            )));
        }
        state.armed = sync;
        state.ready.iter_mut().for_each(|r| *r = false);
        for (pending, bucket) in state.pending.iter_mut().zip(&self.buckets) {
            *pending = bucket.params.len();
        }
        state.next_launch = 0;
        state.launched_with_pending.clear();
        Ok(())
    }

    /// The hook of parameter `index`: its gradient is complete for this backward.
    pub(crate) fn mark_ready(&self, index: usize) -> Result<()> {
        let mut state = self.lock();
        if !state.armed {
            return Ok(());
        }
        if std::mem::replace(&mut state.ready[index], true) {
            return Err(DistributedError::Reducer(format!(
                "the gradient of {} became ready twice in one iteration; call forward before each backward",
                self.params[index].0
            )));
        }
        let bucket = self.bucket_of[index];
        state.pending[bucket] -= 1;
        while state.next_launch < self.buckets.len() && state.pending[state.next_launch] == 0 {
            let next = state.next_launch;
            self.launch(&mut state, next)?;
            state.next_launch += 1;
        }
        if state.next_launch == self.buckets.len() {
            state.armed = false;
            self.finish(&mut state)?;
        }
        Ok(())
    }

    /// Flattens bucket `b`'s gradients and hands them to the communication thread.
    fn launch(&self, state: &mut Iteration, b: usize) -> Result<()> {
        let bucket = &self.buckets[b];
        let mut grads = Vec::with_capacity(bucket.params.len());
        for &p in &bucket.params {
            let (name, param) = &self.params[p];
            grads.push(param.grad().ok_or_else(|| {
                DistributedError::Reducer(format!("{name} is marked ready but has no gradient"))
            })?);
        }
        let flat = FlatBucket::gather(self.device, bucket, &grads)?;
        let still_pending = state.ready.iter().filter(|&&r| !r).count();
        state.launched_with_pending.push((b, still_pending));
        state.comm.submit(b, flat)
    }

    /// Waits for every bucket's average and writes it into the gradients.
    fn finish(&self, state: &mut Iteration) -> Result<()> {
        let wait_start = Instant::now();
        let mut finished = Vec::with_capacity(self.buckets.len());
        let mut communication = Duration::ZERO;
        for _ in 0..self.buckets.len() {
            let done = state.comm.next_done()?;
            communication += done.elapsed;
            finished.push((done.bucket, done.result?));
        }
        let exposed = wait_start.elapsed();
        for (b, values) in finished {
            let bucket = &self.buckets[b];
            let grads = bucket
                .params
                .iter()
                .map(|&p| {
                    self.params[p].1.grad().ok_or_else(|| {
                        DistributedError::Reducer(format!(
                            "{} lost its gradient during the all-reduce",
                            self.params[p].0
                        ))
                    })
                })
                .collect::<Result<Vec<_>>>()?;
            values.scatter(bucket, &grads)?;
        }
        state.last = Some(SyncStats {
            launch_order: state
                .launched_with_pending
                .iter()
                .map(|&(b, _)| b)
                .collect(),
            pending_at_launch: state
                .launched_with_pending
                .iter()
                .map(|&(_, n)| n)
                .collect(),
            communication,
            exposed,
        });
        Ok(())
    }

    /// What the last synchronised backward did.
    pub(crate) fn last_stats(&self) -> Option<SyncStats> {
        self.lock().last.clone()
    }
}
