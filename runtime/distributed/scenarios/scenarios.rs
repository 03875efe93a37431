//! The scenarios: each returns an error when what it checks does not hold on this rank.

use crate::net::{BATCH, Error, Net, batch, loss, max_difference, rows};
use tessera_distributed::{
    DdpOptions, DistributedDataParallel, DistributedError, DistributedSampler, ProcessGroup,
    ReduceOp, consume_prefix_in_state_dict_if_present,
};
use tessera_nn::optim::{Adam, AdamOptions, Optimizer, SGD, SgdOptions};
use tessera_nn::{ModuleExt, Parameter};
use tessera_tensor::Tensor;

/// Steps of each optimizer, as the issue asks.
const STEPS: u64 = 20;
/// Parameters that end further apart than this are not the same training.
const TOLERANCE: f64 = 1e-4;

pub fn run(scenario: &str, group: &ProcessGroup) -> Result<(), Error> {
    match scenario {
        "sgd_matches_one_process" => matches_one_process(group, Kind::Sgd),
        "adam_matches_one_process" => matches_one_process(group, Kind::Adam),
        "buckets_in_order" => buckets_in_order(group),
        "rank_error" => rank_error(group),
        "agree" => agree(group),
        "sampler" => sampler(group),
        "state_dict" => state_dict(group),
        "no_sync" => no_sync(group),
        other => Err(format!("unknown scenario {other:?}").into()),
    }
}

#[derive(Clone, Copy)]
enum Kind {
    Sgd,
    Adam,
}

fn optimizer(kind: Kind, params: Vec<Tensor>) -> Result<Box<dyn Optimizer>, Error> {
    Ok(match kind {
        Kind::Sgd => Box::new(SGD::new(
            params,
            SgdOptions {
                lr: 0.05,
                momentum: 0.9,
                ..Default::default()
            },
        )?),
        Kind::Adam => Box::new(Adam::new(
            params,
            AdamOptions {
                lr: 1e-3,
                ..Default::default()
            },
        )?),
    })
}

/// This rank's share of a whole batch.
fn shard(group: &ProcessGroup) -> (usize, usize) {
    let per_rank = BATCH / group.world_size();
    (group.rank() * per_rank, per_rank)
}

/// Ranks training a replica each on their share of every batch end where one process
/// training on whole batches ends. Rank 1 starts from other weights, so construction must copy
/// rank 0's.
fn matches_one_process(group: &ProcessGroup, kind: Kind) -> Result<(), Error> {
    let reference = Net::seeded(0)?;
    let mut reference_opt = optimizer(kind, reference.parameter_tensors())?;
    let options = DdpOptions {
        bucket_cap_bytes: 1024,
        ..Default::default()
    };
    let ddp =
        DistributedDataParallel::with_options(Net::seeded(group.rank() as u64)?, group, options)?;
    let mut ddp_opt = optimizer(kind, ddp.parameter_tensors())?;
    let (start, len) = shard(group);
    for step in 0..STEPS {
        let whole = batch(step)?;
        reference_opt.zero_grad(true);
        loss(&reference, &whole)?.backward()?;
        reference_opt.step()?;

        ddp_opt.zero_grad(true);
        loss(&ddp, &rows(&whole, start, len)?)?.backward()?;
        ddp_opt.step()?;
    }
    let difference = max_difference(
        &reference.named_parameters(),
        &ddp.module().named_parameters(),
    )?;
    if difference > TOLERANCE {
        return Err(format!("parameters differ from one-process training by {difference}").into());
    }
    Ok(())
}

/// Buckets are launched in index order, the first while backward still has gradients to
/// compute, and every rank launches the same sequence.
fn buckets_in_order(group: &ProcessGroup) -> Result<(), Error> {
    let options = DdpOptions {
        bucket_cap_bytes: 512,
        ..Default::default()
    };
    let ddp = DistributedDataParallel::with_options(Net::seeded(0)?, group, options)?;
    let (start, len) = shard(group);
    loss(&ddp, &rows(&batch(0)?, start, len)?)?.backward()?;
    let stats = ddp
        .last_sync_stats()
        .ok_or("no synchronised backward recorded")?;
    let count = ddp.buckets().len();
    if count < 3 {
        return Err(format!("expected several buckets, got {count}").into());
    }
    if stats.launch_order != (0..count).collect::<Vec<_>>() {
        return Err(format!("buckets launched out of order: {:?}", stats.launch_order).into());
    }
    if stats.pending_at_launch.first().copied().unwrap_or(0) == 0 {
        return Err("the first bucket was launched only after backward had finished".into());
    }
    // The first bucket holds the last parameters (fc2's), as PyTorch's reverse order does.
    let last_param = ddp.module().named_parameters().len() - 1;
    if ddp.buckets()[0].params.first() != Some(&last_param) {
        return Err(format!("bucket 0 holds {:?}", ddp.buckets()[0].params).into());
    }
    let order: Vec<f64> = stats.launch_order.iter().map(|&b| b as f64).collect();
    let gathered = group.all_gather(&Tensor::from_slice(&order, &[order.len()])?)?;
    for (rank, theirs) in gathered.iter().enumerate() {
        if theirs.to_vec_f64()? != order {
            return Err(format!("rank {rank} launched buckets in another order").into());
        }
    }
    Ok(())
}

/// Rank 1 fails in its third step while rank 0 goes on: every rank must end with an error
/// (the failing rank aborts the world) instead of rank 0 waiting forever in an all-reduce.
fn rank_error(group: &ProcessGroup) -> Result<(), Error> {
    let ddp = DistributedDataParallel::new(Net::seeded(0)?, group)?;
    let mut opt = optimizer(Kind::Sgd, ddp.parameter_tensors())?;
    let (start, len) = shard(group);
    for step in 0..STEPS {
        let mut data = rows(&batch(step)?, start, len)?;
        if step == 2 && group.rank() == 1 {
            data.0 = data.0.narrow(3, 0, 7)?; // A wrong image size: fc1 refuses it.
        }
        opt.zero_grad(true);
        loss(&ddp, &data)?.backward()?;
        opt.step()?;
    }
    Ok(())
}

/// `agree` gives every rank an error when one rank failed, naming the failed rank.
fn agree(group: &ProcessGroup) -> Result<(), Error> {
    let outcome = if group.rank() == 1 {
        Err(DistributedError::Invalid {
            op: "agree scenario",
            reason: "rank 1 fails on purpose".into(),
        })
    } else {
        Ok(())
    };
    match group.agree(outcome) {
        Err(DistributedError::RemoteFailure { failed, .. })
            if group.rank() == 0 && failed == [1] =>
        {
            Ok(())
        }
        Err(DistributedError::Invalid { .. }) if group.rank() == 1 => Ok(()),
        other => Err(format!("rank {} got {other:?}", group.rank()).into()),
    }
}

/// Ranks get disjoint shards covering the dataset, and a new shuffle each epoch.
fn sampler(group: &ProcessGroup) -> Result<(), Error> {
    let len = 10;
    let mut sampler = DistributedSampler::new(len, group)?.seed(7);
    let mut epochs = Vec::new();
    for epoch in 0..2 {
        sampler.set_epoch(epoch);
        let mine: Vec<f64> = sampler.indices().iter().map(|&i| i as f64).collect();
        let all = group.all_gather(&Tensor::from_slice(&mine, &[mine.len()])?)?;
        let mut union: Vec<f64> = Vec::new();
        for shard in &all {
            union.extend(shard.to_vec_f64()?);
        }
        let mut sorted = union.clone();
        sorted.sort_by(f64::total_cmp);
        if sorted != (0..len).map(|i| i as f64).collect::<Vec<_>>() {
            return Err(
                format!("epoch {epoch}: shards {union:?} do not cover the dataset once").into(),
            );
        }
        epochs.push(union);
    }
    if epochs[0] == epochs[1] {
        return Err("the second epoch repeats the first one's order".into());
    }
    Ok(())
}

/// The wrapped module's keys carry `module.`, and stripping it loads into a bare module.
fn state_dict(group: &ProcessGroup) -> Result<(), Error> {
    let ddp = DistributedDataParallel::new(Net::seeded(group.rank() as u64)?, group)?;
    let saved = ddp.state_dict()?;
    if let Some(key) = saved.keys().find(|k| !k.starts_with("module.")) {
        return Err(format!("key {key} has no module. prefix").into());
    }
    let bare = Net::seeded(99)?;
    bare.load_state_dict(
        &consume_prefix_in_state_dict_if_present(&saved, "module."),
        true,
        false,
    )?;
    let difference = max_difference(&bare.named_parameters(), &ddp.module().named_parameters())?;
    if difference != 0.0 {
        return Err(format!("the loaded module differs by {difference}").into());
    }
    Ok(())
}

/// Under `no_sync` gradients stay local; the next synchronised backward averages everything
/// accumulated, as one process summing both micro-batches' losses of every rank would.
fn no_sync(group: &ProcessGroup) -> Result<(), Error> {
    let ddp = DistributedDataParallel::new(Net::seeded(0)?, group)?;
    let whole = (batch(0)?, batch(1)?);
    let (start, len) = shard(group);
    {
        let _local = ddp.no_sync();
        loss(&ddp, &rows(&whole.0, start, len)?)?.backward()?;
    }
    let local = first_grad(&ddp.module().named_parameters())?;
    let all = group.all_gather(&local)?;
    if all[0].to_vec_f64()? == all[1].to_vec_f64()? {
        return Err("gradients were synchronised inside no_sync".into());
    }
    loss(&ddp, &rows(&whole.1, start, len)?)?.backward()?;

    let reference = Net::seeded(0)?;
    let mut total: Option<Tensor> = None;
    for rank in 0..group.world_size() {
        let (start, len) = (rank * len, len);
        for micro in [&whole.0, &whole.1] {
            let term = loss(&reference, &rows(micro, start, len)?)?;
            total = Some(match total {
                Some(t) => t.add(&term)?,
                None => term,
            });
        }
    }
    let total = total.ok_or("no ranks")?;
    total.div_scalar(group.world_size() as f64)?.backward()?;
    let expected = first_grad(&reference.named_parameters())?;
    let got = first_grad(&ddp.module().named_parameters())?;
    let difference = expected.sub(&got)?.abs()?.max_all()?.item::<f64>()?;
    if difference > TOLERANCE {
        return Err(format!("accumulated gradients differ by {difference}").into());
    }
    // Every rank holds the same averaged gradient.
    let averaged = got.deep_clone()?;
    group.all_reduce(&averaged, ReduceOp::Average)?;
    if averaged.sub(&got)?.abs()?.max_all()?.item::<f64>()? > 1e-7 {
        return Err("ranks hold different gradients after synchronising".into());
    }
    Ok(())
}

fn first_grad(params: &[(String, Parameter)]) -> Result<Tensor, Error> {
    let (name, p) = params.first().ok_or("no parameters")?;
    Ok(p.tensor()
        .grad()
        .ok_or_else(|| format!("{name} has no gradient"))?)
}
