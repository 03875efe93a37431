//! The communication thread: all-reduces gradient buckets in the order they are submitted,
//! while the thread that submitted them goes on with backward.

use super::flat_bucket::FlatBucket;
use crate::{DistributedError, ProcessGroup, Result};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A bucket's flat gradients, to be averaged across ranks.
struct Job {
    bucket: usize,
    values: FlatBucket,
}

/// An averaged bucket (or the failure), and how long its all-reduce took.
pub(crate) struct Done {
    pub(crate) bucket: usize,
    pub(crate) result: Result<FlatBucket>,
    pub(crate) elapsed: Duration,
}

/// The thread and its two queues; dropping it stops and joins the thread.
pub(crate) struct CommThread {
    jobs: Option<Sender<Job>>,
    done: Receiver<Done>,
    thread: Option<JoinHandle<()>>,
}

impl CommThread {
    pub(crate) fn start(group: ProcessGroup) -> Result<CommThread> {
        let (jobs, job_queue) = channel::<Job>();
        let (done_queue, done) = channel::<Done>();
        let thread = std::thread::Builder::new()
            .name("tessera-ddp-comm".into())
            .spawn(move || {
                for Job { bucket, mut values } in job_queue {
                    let start = Instant::now();
                    let result = values.average(&group).map(|()| values);
                    let elapsed = start.elapsed();
                    if done_queue
                        .send(Done {
                            bucket,
                            result,
                            elapsed,
                        })
                        .is_err()
                    {
                        break;
                    }
                }
            })
            .map_err(|e| {
                DistributedError::Reducer(format!("cannot start the communication thread: {e}"))
            })?;
        Ok(CommThread {
            jobs: Some(jobs),
            done,
            thread: Some(thread),
        })
    }

    /// Queues `values` of `bucket` for averaging.
    pub(crate) fn submit(&self, bucket: usize, values: FlatBucket) -> Result<()> {
        self.jobs
            .as_ref()
            .ok_or(DistributedError::CommunicationStopped)?
            .send(Job { bucket, values })
            .map_err(|_| DistributedError::CommunicationStopped)
    }

    /// Waits for the next finished bucket, in submission order.
    pub(crate) fn next_done(&self) -> Result<Done> {
        self.done
            .recv()
            .map_err(|_| DistributedError::CommunicationStopped)
    }
}

impl Drop for CommThread {
    fn drop(&mut self) {
        // Closing the job queue ends the thread's loop once queued work is done.
        self.jobs = None;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
