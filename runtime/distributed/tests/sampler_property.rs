//! `DistributedSampler` over random dataset sizes, world sizes, seeds and epochs: the ranks'
//! shards together cover the dataset as PyTorch's sampler does (every index once, plus the
//! padding that evens out the tail, or minus the tail that `drop_last` drops).

use proptest::prelude::*;
use tessera_distributed::DistributedSampler;

proptest! {
    #[test]
    fn shards_cover_the_dataset_and_agree_in_length(
        len in 0usize..120,
        replicas in 1usize..7,
        seed in any::<u64>(),
        epoch in 0u64..4,
        shuffle in any::<bool>(),
        drop_last in any::<bool>(),
    ) {
        let mut counts = vec![0usize; len];
        let mut per_rank = Vec::new();
        for rank in 0..replicas {
            let mut sampler = DistributedSampler::with_replicas(len, replicas, rank)
                .unwrap()
                .seed(seed)
                .shuffle(shuffle)
                .drop_last(drop_last);
            sampler.set_epoch(epoch);
            let indices = sampler.indices();
            prop_assert_eq!(indices.len(), sampler.num_samples());
            for &i in &indices {
                prop_assert!(i < len, "index {} outside a dataset of {}", i, len);
                counts[i] += 1;
            }
            per_rank.push(indices);
        }
        let total: usize = counts.iter().sum();
        if drop_last {
            prop_assert_eq!(total, len / replicas * replicas);
            prop_assert!(counts.iter().all(|&c| c <= 1), "drop_last repeated an index");
        } else {
            prop_assert_eq!(total, len.div_ceil(replicas) * replicas);
            if len >= replicas {
                // The padding repeats each index at most once more.
                prop_assert!(counts.iter().all(|&c| c == 1 || c == 2), "{:?}", counts);
            }
            prop_assert!(counts.iter().all(|&c| c >= 1), "an index no rank trains on");
        }
        if !shuffle {
            // Without shuffling, rank r takes r, r + replicas, ... of the (padded) range.
            for (rank, indices) in per_rank.iter().enumerate() {
                for (k, &i) in indices.iter().enumerate() {
                    prop_assert_eq!(i, (rank + k * replicas) % len.max(1));
                }
            }
        }
    }
}
