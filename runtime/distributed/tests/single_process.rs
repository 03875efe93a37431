//! What runs without a launcher: a world of one, the launcher's variables, the sampler's
//! shards, and the typed errors of backends this build or machine lacks.

use std::collections::HashMap;
use tessera_distributed::{
    Backend, DdpOptions, DistributedDataParallel, DistributedError, DistributedSampler, LaunchInfo,
    ProcessGroup, ReduceOp, consume_prefix_in_state_dict_if_present, init_process_group,
};
use tessera_nn::layers::Linear;
use tessera_nn::optim::{Optimizer, SGD, SgdOptions};
use tessera_nn::{Call, ModuleExt};
use tessera_tensor::{DType, Tensor};

type Error = Box<dyn std::error::Error>;

#[cfg(not(feature = "nccl"))]
#[test]
fn nccl_backend_without_the_feature_names_the_feature() {
    let err = init_process_group(Backend::Nccl).err().expect("an error");
    assert!(
        matches!(
            err,
            DistributedError::FeatureDisabled {
                backend: Backend::Nccl,
                feature: "nccl"
            }
        ),
        "{err}"
    );
}

/// Runs only where the `nccl` feature is on and neither libcuda nor libnccl can be loaded (this
/// machine): the error is typed, not a panic. With both libraries the GPU tests of
/// `tests/nccl_gpu.rs` apply instead.
#[cfg(feature = "nccl")]
#[test]
fn nccl_backend_reports_backend_unavailable_where_it_cannot_run() {
    let culib = unsafe { cudarc::nccl::sys::is_culib_present() };
    if culib && tessera_cuda::driver_present() {
        eprintln!("libcuda and libnccl are present: see tests/nccl_gpu.rs");
        return;
    }
    let err = init_process_group(Backend::Nccl).err().expect("an error");
    assert!(
        matches!(
            err,
            DistributedError::BackendUnavailable {
                backend: Backend::Nccl,
                ..
            }
        ),
        "{err}"
    );
    eprintln!("{err}");
}

#[cfg(not(feature = "mpi"))]
#[test]
fn mpi_backend_without_the_feature_names_the_feature() {
    let err = init_process_group(Backend::Mpi).err().expect("an error");
    assert!(
        matches!(
            err,
            DistributedError::FeatureDisabled { feature: "mpi", .. }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("`mpi` feature"), "{err}");
}

fn lookup(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let map: HashMap<String, String> = vars
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    move |name| map.get(name).cloned()
}

#[test]
fn launch_info_reads_mpirun_and_torchrun_variables() -> Result<(), Error> {
    let mpirun = LaunchInfo::from_lookup(lookup(&[
        ("OMPI_COMM_WORLD_RANK", "1"),
        ("OMPI_COMM_WORLD_SIZE", "4"),
        ("OMPI_COMM_WORLD_LOCAL_RANK", "0"),
    ]))?;
    assert_eq!(
        mpirun,
        Some(LaunchInfo {
            rank: 1,
            world_size: 4,
            local_rank: 0
        })
    );
    let torchrun = LaunchInfo::from_lookup(lookup(&[("RANK", "2"), ("WORLD_SIZE", "3")]))?;
    assert_eq!(
        torchrun,
        Some(LaunchInfo {
            rank: 2,
            world_size: 3,
            local_rank: 2
        })
    );
    assert_eq!(LaunchInfo::from_lookup(lookup(&[]))?, None);
    Ok(())
}

#[test]
fn launch_info_rejects_malformed_or_inconsistent_variables() {
    let bad = LaunchInfo::from_lookup(lookup(&[("RANK", "two"), ("WORLD_SIZE", "3")]));
    assert!(matches!(bad, Err(DistributedError::Launcher(ref m)) if m.contains("RANK")));
    let outside = LaunchInfo::from_lookup(lookup(&[("RANK", "3"), ("WORLD_SIZE", "3")]));
    assert!(matches!(outside, Err(DistributedError::Launcher(_))));
    let local = LaunchInfo::from_lookup(lookup(&[
        ("RANK", "0"),
        ("WORLD_SIZE", "2"),
        ("LOCAL_RANK", "-1"),
    ]));
    assert!(matches!(local, Err(DistributedError::Launcher(ref m)) if m.contains("LOCAL_RANK")));
    // Half of a launcher's pair is an error naming the missing half, not a world of one.
    let no_size = LaunchInfo::from_lookup(lookup(&[("RANK", "1")])).unwrap_err();
    assert!(no_size.to_string().contains("WORLD_SIZE"), "{no_size}");
    let no_rank = LaunchInfo::from_lookup(lookup(&[("OMPI_COMM_WORLD_SIZE", "2")])).unwrap_err();
    assert!(
        no_rank.to_string().contains("OMPI_COMM_WORLD_RANK"),
        "{no_rank}"
    );
}

#[test]
fn distributed_sampler_shards_cover_the_dataset_once_and_reshuffle_per_epoch() -> Result<(), Error>
{
    let shards = |epoch| -> Result<Vec<Vec<usize>>, Error> {
        (0..3)
            .map(|rank| {
                let mut s = DistributedSampler::with_replicas(9, 3, rank)?.seed(5);
                s.set_epoch(epoch);
                Ok(s.indices())
            })
            .collect()
    };
    let (first, second) = (shards(0)?, shards(1)?);
    let mut all: Vec<usize> = first.concat();
    all.sort();
    assert_eq!(all, (0..9).collect::<Vec<_>>());
    assert_ne!(first, second);
    assert_eq!(shards(0)?, first, "the same epoch gives the same order");
    Ok(())
}

#[test]
fn distributed_sampler_pads_or_drops_the_uneven_tail() -> Result<(), Error> {
    let padded = DistributedSampler::with_replicas(5, 2, 1)?.shuffle(false);
    assert_eq!(padded.indices(), [1, 3, 0]);
    let dropped = DistributedSampler::with_replicas(5, 2, 1)?
        .shuffle(false)
        .drop_last(true);
    assert_eq!(dropped.indices(), [1, 3]);
    assert!(DistributedSampler::with_replicas(5, 2, 2).is_err());
    Ok(())
}

/// Three SGD steps on the squared outputs of `forward` for input `x`.
fn train_three_steps(
    forward: &dyn Fn(Tensor) -> tessera_nn::Result<Tensor>,
    params: Vec<Tensor>,
    x: &Tensor,
) -> Result<(), Error> {
    let mut opt = SGD::new(
        params,
        SgdOptions {
            lr: 0.1,
            ..Default::default()
        },
    )?;
    for _ in 0..3 {
        opt.zero_grad(true);
        forward(x.clone())?.pow_scalar(2.0)?.sum_all()?.backward()?;
        opt.step()?;
    }
    Ok(())
}

#[test]
fn ddp_in_a_world_of_one_trains_like_the_bare_module() -> Result<(), Error> {
    let group = ProcessGroup::single();
    let bare = Linear::new(4, 3)?;
    let small_buckets = DdpOptions {
        bucket_cap_bytes: 16,
        ..Default::default()
    };
    let wrapped = DistributedDataParallel::with_options(Linear::new(4, 3)?, &group, small_buckets)?;
    // Tests share the global generator, so the replica starts from a copy, not from a seed.
    wrapped
        .module()
        .load_state_dict(&bare.state_dict()?, true, false)?;
    let x = Tensor::randn(&[5, 4], DType::F32)?;
    train_three_steps(&|x| bare.call(x), bare.parameter_tensors(), &x)?;
    train_three_steps(&|x| wrapped.call(x), wrapped.parameter_tensors(), &x)?;
    assert_eq!(
        bare.weight.tensor().to_vec::<f32>()?,
        wrapped.module().weight.tensor().to_vec::<f32>()?
    );
    Ok(())
}

#[test]
fn ddp_records_bucket_launches_in_order_in_a_world_of_one() -> Result<(), Error> {
    let group = ProcessGroup::single();
    let options = DdpOptions {
        bucket_cap_bytes: 16,
        ..Default::default()
    };
    let ddp = DistributedDataParallel::with_options(Linear::new(4, 3)?, &group, options)?;
    // Weight (48 bytes) and bias (12 bytes) cannot share a 16-byte bucket; bias comes first.
    assert_eq!(ddp.buckets().len(), 2);
    assert_eq!(ddp.buckets()[0].params, [1]);
    ddp.call(Tensor::ones(&[2, 4], DType::F32)?)?
        .sum_all()?
        .backward()?;
    let stats = ddp.last_sync_stats().ok_or("no stats")?;
    assert_eq!(stats.launch_order, [0, 1]);
    Ok(())
}

#[test]
fn ddp_no_sync_skips_the_reduction_of_that_backward() -> Result<(), Error> {
    let group = ProcessGroup::single();
    let ddp = DistributedDataParallel::new(Linear::new(4, 3)?, &group)?;
    {
        let _guard = ddp.no_sync();
        ddp.call(Tensor::ones(&[2, 4], DType::F32)?)?
            .sum_all()?
            .backward()?;
    }
    assert_eq!(ddp.last_sync_stats(), None);
    ddp.call(Tensor::ones(&[2, 4], DType::F32)?)?
        .sum_all()?
        .backward()?;
    assert!(ddp.last_sync_stats().is_some());
    Ok(())
}

/// A module whose forward leaves one child out.
#[derive(tessera_nn::Module)]
struct OneHeadUsed {
    core: tessera_nn::ModuleCore,
    used: Linear,
    unused: Linear,
}

impl tessera_nn::Forward for OneHeadUsed {
    type Output = Tensor;
    fn forward(&self, x: Tensor) -> tessera_nn::Result<Tensor> {
        self.used.call(x)
    }
}

#[test]
fn ddp_refuses_a_forward_after_a_backward_that_missed_a_parameter() -> Result<(), Error> {
    let group = ProcessGroup::single();
    let module = OneHeadUsed {
        core: Default::default(),
        used: Linear::new(4, 3)?,
        unused: Linear::new(4, 3)?,
    };
    let ddp = DistributedDataParallel::new(module, &group)?;
    let x = Tensor::ones(&[2, 4], DType::F32)?;
    ddp.call(x.clone())?.sum_all()?.backward()?;
    let err = ddp.call(x).err().ok_or("no error")?;
    assert!(err.to_string().contains("unused.weight"), "{err}");
    Ok(())
}

#[test]
fn ddp_forward_without_grad_between_forward_and_backward_keeps_the_synchronisation()
-> Result<(), Error> {
    let group = ProcessGroup::single();
    let ddp = DistributedDataParallel::new(Linear::new(4, 3)?, &group)?;
    let x = Tensor::ones(&[2, 4], DType::F32)?;
    let loss = ddp.call(x.clone())?.sum_all()?;
    {
        let _evaluation = tessera_tensor::no_grad();
        ddp.call(x)?;
    }
    loss.backward()?;
    assert!(
        ddp.last_sync_stats().is_some(),
        "the backward was not synchronised"
    );
    Ok(())
}

#[test]
fn ddp_state_dict_keys_carry_the_module_prefix_which_loading_strips() -> Result<(), Error> {
    let group = ProcessGroup::single();
    let ddp = DistributedDataParallel::new(Linear::new(2, 2)?, &group)?;
    let saved = ddp.state_dict()?;
    assert_eq!(
        saved.keys().collect::<Vec<_>>(),
        ["module.weight", "module.bias"]
    );
    let bare = Linear::new(2, 2)?;
    bare.load_state_dict(
        &consume_prefix_in_state_dict_if_present(&saved, "module."),
        true,
        false,
    )?;
    assert_eq!(
        bare.weight.tensor().to_vec::<f32>()?,
        ddp.module().weight.tensor().to_vec::<f32>()?
    );
    Ok(())
}

#[test]
fn collectives_in_a_world_of_one_keep_the_data() -> Result<(), Error> {
    let group = ProcessGroup::single();
    let t = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0], &[2, 2])?;
    group.all_reduce(&t, ReduceOp::Average)?;
    group.broadcast(&t, 0)?;
    assert_eq!(t.to_vec::<f32>()?, [1.0, 2.0, 3.0, 4.0]);
    let gathered = group.all_gather(&t)?;
    assert_eq!(gathered.len(), 1);
    assert_eq!(group.reduce_scatter(&t, ReduceOp::Sum)?.shape(), [2, 2]);
    assert!(group.broadcast(&t, 1).is_err());
    let ints = Tensor::from_slice(&[1i64, 2], &[2])?;
    assert!(matches!(
        group.all_reduce(&ints, ReduceOp::Sum),
        Err(DistributedError::UnsupportedDType { .. })
    ));
    group.barrier()?;
    Ok(())
}
