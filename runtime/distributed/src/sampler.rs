//! `DistributedSampler`: the indices of a dataset one rank trains on, a disjoint shard per
//! rank, reshuffled every epoch from a seed all ranks share (PyTorch's
//! `torch.utils.data.DistributedSampler`).

use crate::{DistributedError, ProcessGroup, Result};
use tessera_tensor::Generator;

/// Which samples of a dataset of `dataset_len` this rank takes each epoch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DistributedSampler {
    dataset_len: usize,
    num_replicas: usize,
    rank: usize,
    shuffle: bool,
    seed: u64,
    drop_last: bool,
    epoch: u64,
}

impl DistributedSampler {
    /// A shuffling sampler for this process's rank in `group`, seeded with 0.
    pub fn new(dataset_len: usize, group: &ProcessGroup) -> Result<Self> {
        Self::with_replicas(dataset_len, group.world_size(), group.rank())
    }

    /// A sampler for rank `rank` of `num_replicas`, without a process group.
    pub fn with_replicas(dataset_len: usize, num_replicas: usize, rank: usize) -> Result<Self> {
        if rank >= num_replicas {
            return Err(DistributedError::invalid(
                "DistributedSampler",
                format!("rank {rank} is outside {num_replicas} replicas"),
            ));
        }
        Ok(DistributedSampler {
            dataset_len,
            num_replicas,
            rank,
            shuffle: true,
            seed: 0,
            drop_last: false,
            epoch: 0,
        })
    }

    /// Whether each epoch permutes the dataset (default true).
    pub fn shuffle(mut self, shuffle: bool) -> Self {
        self.shuffle = shuffle;
        self
    }

    /// The seed shared by every rank (default 0).
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// Drops the tail that does not split evenly instead of repeating samples to fill it.
    pub fn drop_last(mut self, drop_last: bool) -> Self {
        self.drop_last = drop_last;
        self
    }

    /// Chooses the epoch's permutation; call it at the start of every epoch, on every rank.
    pub fn set_epoch(&mut self, epoch: u64) {
        self.epoch = epoch;
    }

    /// How many indices each rank gets per epoch.
    pub fn num_samples(&self) -> usize {
        if self.drop_last {
            self.dataset_len / self.num_replicas
        } else {
            self.dataset_len.div_ceil(self.num_replicas)
        }
    }

    /// This rank's indices for the current epoch: every `num_replicas`-th index of the epoch's
    /// order, starting at `rank`. Without `drop_last` the order is padded with its own first
    /// indices so that every rank gets the same count.
    pub fn indices(&self) -> Vec<usize> {
        let mut order: Vec<usize> = (0..self.dataset_len).collect();
        if self.shuffle {
            let mut generator = Generator::new(self.seed.wrapping_add(self.epoch));
            for i in (1..order.len()).rev() {
                let j = generator.integer(0, i as i64 + 1) as usize;
                order.swap(i, j);
            }
        }
        let total = self.num_samples() * self.num_replicas;
        if total > order.len() && !order.is_empty() {
            let padding: Vec<usize> = order
                .iter()
                .cycle()
                .take(total - order.len())
                .copied()
                .collect();
            order.extend(padding);
        }
        order.truncate(total);
        order
            .into_iter()
            .skip(self.rank)
            .step_by(self.num_replicas)
            .collect()
    }
}
