//! The NCCL backend on GPUs: `all_reduce`, `broadcast`, `all_gather`, `reduce_scatter` and
//! `barrier` on CUDA tensors, and `DistributedDataParallel` on CUDA ending with the parameters
//! of one process trained on the whole batch: in a world of one GPU and in a world of two
//! ranks on two GPUs (NCCL does not run two ranks of one world on one GPU). Ignored without a
//! GPU; on a machine with the CUDA driver, libnccl on the loader's path and one GPU or more:
//!
//! ```text
//! cargo test -p tessera-distributed --features nccl --test nccl_gpu -- --ignored --test-threads 1
//! ```
//!
//! With a single GPU the two-GPU tests fail at once saying so; run the others with
//! `-- --ignored one_gpu`. Each test starts the test binary again as every rank of its world
//! (`RANK`, `WORLD_SIZE`, `LOCAL_RANK`, `MASTER_ADDR`, `MASTER_PORT`, as torchrun sets them)
//! and fails unless every rank passes; a rank that fails or hangs past five minutes ends the
//! others.
#![cfg(feature = "nccl")]

use std::process::{Child, Command};
use std::time::{Duration, Instant};
use tessera_distributed::{
    Backend, DdpOptions, DistributedDataParallel, ProcessGroup, ReduceOp, init_process_group,
};
use tessera_nn::{Call, Forward, Module, ModuleCore, ModuleExt, Parameter};
use tessera_tensor::{DType, Device, Tensor, no_grad};

type Error = Box<dyn std::error::Error>;

const LIMIT: Duration = Duration::from_secs(300);

/// The GPUs this machine has, or why the tests cannot run here.
fn gpus() -> Result<usize, String> {
    if !unsafe { cudarc::nccl::sys::is_culib_present() } {
        return Err("libnccl cannot be loaded (install NCCL or set LD_LIBRARY_PATH)".into());
    }
    tessera_cuda::SystemDriver::new()
        .map(|d| tessera_cuda::CudaDriver::device_count(&d))
        .map_err(|e| e.to_string())
}

/// Ends the ranks still running (after one failed or hung).
fn end_all(children: &mut [Child]) {
    for child in children {
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// In the test process: runs `test` as `world` ranks, one GPU each, and checks they all pass.
/// In a rank (`RANK` is set): `None`, and the caller runs the test's body.
fn launch_ranks(test: &str, world: usize) -> Option<()> {
    if std::env::var("RANK").is_ok() {
        return None;
    }
    let gpus = gpus().unwrap_or_else(|why| panic!("{test}: {why}"));
    assert!(
        gpus >= world,
        "{test} needs {world} GPUs (one per rank: NCCL does not run two ranks of a world on one \
         GPU); this machine has {gpus}"
    );
    // A port free now, for rank 0's unique-id store.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let exe = std::env::current_exe().expect("the test binary");
    let mut children: Vec<Child> = (0..world)
        .map(|rank| {
            Command::new(&exe)
                .args(["--exact", test, "--ignored", "--nocapture"])
                .env("RANK", rank.to_string())
                .env("LOCAL_RANK", rank.to_string())
                .env("WORLD_SIZE", world.to_string())
                .env("MASTER_ADDR", "127.0.0.1")
                .env("MASTER_PORT", port.to_string())
                .spawn()
                .expect("a rank starts")
        })
        .collect();
    let start = Instant::now();
    let mut running: Vec<usize> = (0..world).collect();
    while !running.is_empty() {
        let mut failed = None;
        running.retain(|&rank| match children[rank].try_wait() {
            Ok(None) => true,
            Ok(Some(status)) if status.success() => false,
            Ok(Some(status)) => {
                failed = Some(format!("rank {rank} failed: {status}"));
                false
            }
            Err(e) => {
                failed = Some(format!("rank {rank} cannot be polled: {e}"));
                false
            }
        });
        if failed.is_none() && start.elapsed() > LIMIT {
            failed = Some(format!("ranks {running:?} still run after {LIMIT:?}"));
        }
        if let Some(why) = failed {
            end_all(&mut children);
            panic!("{test}: {why}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Some(())
}

fn group(world: usize) -> Result<(ProcessGroup, Device), Error> {
    let group = init_process_group(Backend::Nccl)?;
    let device = group.device();
    assert_eq!(device, Device::Cuda(group.rank()));
    assert_eq!(
        (group.backend(), group.world_size()),
        (Backend::Nccl, world)
    );
    Ok((group, device))
}

fn cuda(values: &[f32], shape: &[usize], device: Device) -> Result<Tensor, Error> {
    Ok(Tensor::from_slice(values, shape)?.to_device(device)?)
}

/// Every collective on CUDA tensors in a world of `world` ranks, checked against what each
/// rank contributed (rank r sends values made of r).
fn collectives(world: usize) -> Result<(), Error> {
    let (group, device) = group(world)?;
    let r = group.rank() as f32;
    let w = world as f32;
    // The sum over ranks of r, and of 1.
    let sum_r = w * (w - 1.0) / 2.0;

    let t = cuda(&[1.0 + r, 10.0 * r], &[2], device)?;
    group.all_reduce(&t, ReduceOp::Sum)?;
    assert_eq!(t.to_vec::<f32>()?, [w + sum_r, 10.0 * sum_r]);
    let t = cuda(&[1.0 + r, 10.0 * r], &[2], device)?;
    group.all_reduce(&t, ReduceOp::Average)?;
    assert_eq!(t.to_vec::<f32>()?, [(w + sum_r) / w, 10.0 * sum_r / w]);
    let t = cuda(&[r, -r], &[2], device)?;
    group.all_reduce(&t, ReduceOp::Max)?;
    assert_eq!(t.to_vec::<f32>()?, [w - 1.0, 0.0]);
    let t = Tensor::from_slice(&[group.rank() as i64 + 1], &[1])?.to_device(device)?;
    group.all_reduce(&t, ReduceOp::Min)?;
    assert_eq!(t.to_vec::<i64>()?, [1]);
    // A view at an offset into its storage reduces only its own elements.
    let whole = cuda(&[5.0, 1.0 + r, 2.0, 6.0], &[4], device)?;
    group.all_reduce(&whole.narrow(0, 1, 2)?, ReduceOp::Sum)?;
    assert_eq!(whole.to_vec::<f32>()?, [5.0, w + sum_r, 2.0 * w, 6.0]);

    let root = world - 1;
    let t = Tensor::from_slice(&[7 + group.rank() as i64, 9], &[2])?.to_device(device)?;
    group.broadcast(&t, root)?;
    assert_eq!(t.to_vec::<i64>()?, [7 + root as i64, 9]);

    let parts = group.all_gather(&cuda(&[r, r + 0.5, r + 0.25], &[3, 1], device)?)?;
    assert_eq!(parts.len(), world);
    for (k, part) in parts.iter().enumerate() {
        let k = k as f32;
        assert_eq!(part.shape(), [3, 1]);
        assert_eq!(part.device(), device);
        assert_eq!(part.to_vec::<f32>()?, [k, k + 0.5, k + 0.25]);
    }

    // Rank r sends (i + 1) * (r + 1) at element i; it gets block r (elements 2r, 2r + 1) of
    // the sum over ranks, (i + 1) * w (w + 1) / 2.
    let values: Vec<f32> = (0..2 * world)
        .map(|i| (i as f32 + 1.0) * (r + 1.0))
        .collect();
    let block = group.reduce_scatter(&cuda(&values, &[2 * world], device)?, ReduceOp::Sum)?;
    let ranks_sum = w * (w + 1.0) / 2.0;
    let i = 2.0 * r;
    assert_eq!(block.device(), device);
    assert_eq!(
        block.to_vec::<f32>()?,
        [(i + 1.0) * ranks_sum, (i + 2.0) * ranks_sum]
    );
    group.barrier()?;

    // Host values through the device: what DDP's checks and `agree` use.
    assert!(group.agree(Ok(())).is_ok());

    // A CPU tensor, or a transposed view, is a typed error naming the collective.
    let err = group
        .all_reduce(&Tensor::zeros(&[2], DType::F32)?, ReduceOp::Sum)
        .unwrap_err();
    assert!(err.to_string().contains("all_reduce") && err.to_string().contains("cpu"));
    let square = cuda(&[1.0, 2.0, 3.0, 4.0], &[2, 2], device)?;
    let err = group
        .all_reduce(&square.transpose(0, 1)?, ReduceOp::Sum)
        .unwrap_err();
    assert!(err.to_string().contains("contiguous"), "{err}");
    Ok(())
}

#[test]
#[ignore = "needs an NVIDIA GPU and NCCL"]
fn collectives_on_cuda_tensors_one_gpu() -> Result<(), Error> {
    if launch_ranks("collectives_on_cuda_tensors_one_gpu", 1).is_some() {
        return Ok(());
    }
    collectives(1)
}

#[test]
#[ignore = "needs two NVIDIA GPUs and NCCL"]
fn collectives_on_cuda_tensors_two_gpus() -> Result<(), Error> {
    if launch_ranks("collectives_on_cuda_tensors_two_gpus", 2).is_some() {
        return Ok(());
    }
    collectives(2)
}

/// `x * weight + bias`, elementwise ops only (what eager CUDA kernels cover).
#[derive(Module)]
struct Affine {
    core: ModuleCore,
    weight: Parameter,
    bias: Parameter,
}

impl Forward for Affine {
    type Output = Tensor;
    fn forward(&self, x: Tensor) -> tessera_nn::Result<Tensor> {
        Ok(x.mul(&self.weight)?.add(&self.bias)?)
    }
}

fn affine(device: Device) -> Result<Affine, Error> {
    let model = Affine {
        core: ModuleCore::default(),
        weight: Parameter::new(Tensor::from_slice(&[0.5f32, -1.0, 2.0, 0.25], &[4])?),
        bias: Parameter::new(Tensor::from_slice(&[0.1f32], &[1])?),
    };
    model.to_device(device)?;
    Ok(model)
}

/// Rows `rows` of the batch of `step`: inputs `[rows, 4]` and targets `[rows, 4]`.
fn batch(
    step: usize,
    rows: std::ops::Range<usize>,
    device: Device,
) -> Result<(Tensor, Tensor), Error> {
    let x: Vec<f32> = rows
        .clone()
        .flat_map(|i| (0..4).map(move |j| ((i * 4 + j + step) % 7) as f32 - 3.0))
        .collect();
    let y: Vec<f32> = x.iter().map(|v| 0.3 * v - 0.2).collect();
    let n = rows.len();
    Ok((cuda(&x, &[n, 4], device)?, cuda(&y, &[n, 4], device)?))
}

/// Sum of squared errors, one SGD step of `lr` on every parameter.
fn step(model: &dyn Module, out: Tensor, y: &Tensor, lr: f32) -> Result<(), Error> {
    let diff = out.sub(y)?;
    diff.mul(&diff)?.sum_all()?.backward()?;
    let _guard = no_grad();
    for (_, p) in model.named_parameters() {
        let grad = p.tensor().grad().ok_or("no gradient")?;
        let lr = Tensor::from_slice(&[lr], &[1])?.to_device(grad.device())?;
        p.tensor().sub_(&grad.mul(&lr)?)?;
        p.tensor().set_grad(None);
    }
    Ok(())
}

/// DDP over `world` ranks, each on its share of every batch, against one model on the whole
/// batch with the learning rate divided by `world` (averaged gradients of half-batch sums).
fn ddp_matches_the_whole_batch(world: usize) -> Result<(), Error> {
    let (group, device) = group(world)?;
    // Tiny buckets: one per parameter, so two all-reduces per backward.
    let options = DdpOptions {
        bucket_cap_bytes: 8,
        ..DdpOptions::default()
    };
    let ddp = DistributedDataParallel::with_options(affine(device)?, &group, options)?;
    let reference = affine(device)?;
    let share = 4;
    let lr = 0.01;
    for s in 0..10 {
        let rows = group.rank() * share..(group.rank() + 1) * share;
        let (x, y) = batch(s, rows, device)?;
        step(ddp.module(), ddp.call(x)?, &y, lr)?;
        let (x, y) = batch(s, 0..world * share, device)?;
        step(&reference, reference.call(x)?, &y, lr / world as f32)?;
    }
    assert_eq!(ddp.buckets().len(), 2);
    for ((name, p), (_, q)) in ddp
        .module()
        .named_parameters()
        .iter()
        .zip(reference.named_parameters())
    {
        assert_eq!(p.tensor().device(), device, "{name}");
        let (p, q) = (p.tensor().to_vec::<f32>()?, q.tensor().to_vec::<f32>()?);
        for (a, b) in p.iter().zip(&q) {
            assert!(
                (a - b).abs() <= 1e-5 * (1.0 + b.abs()),
                "{name}: {p:?} vs {q:?}"
            );
        }
    }
    Ok(())
}

#[test]
#[ignore = "needs an NVIDIA GPU and NCCL"]
fn ddp_on_cuda_matches_the_whole_batch_one_gpu() -> Result<(), Error> {
    if launch_ranks("ddp_on_cuda_matches_the_whole_batch_one_gpu", 1).is_some() {
        return Ok(());
    }
    ddp_matches_the_whole_batch(1)
}

#[test]
#[ignore = "needs two NVIDIA GPUs and NCCL"]
fn ddp_on_cuda_matches_the_whole_batch_two_gpus() -> Result<(), Error> {
    if launch_ranks("ddp_on_cuda_matches_the_whole_batch_two_gpus", 2).is_some() {
        return Ok(());
    }
    ddp_matches_the_whole_batch(2)
}
