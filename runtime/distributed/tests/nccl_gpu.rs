//! The NCCL backend on GPUs: two ranks (one GPU each) check `all_reduce`, `broadcast`,
//! `all_gather`, `reduce_scatter` and `barrier` on CUDA tensors, and that
//! `DistributedDataParallel` on CUDA ends with the parameters of one process trained on the
//! whole batch. Ignored here (no GPU, no libnccl); on a machine with two GPUs and NCCL:
//!
//! ```text
//! cargo test -p tessera-distributed --features nccl --test nccl_gpu -- --ignored --test-threads 1
//! ```
//!
//! Each test launches itself twice as ranks 0 and 1 (`RANK`, `WORLD_SIZE`, `LOCAL_RANK`,
//! `MASTER_ADDR`, `MASTER_PORT` as torchrun sets them) and fails unless both ranks pass.
#![cfg(feature = "nccl")]

use std::process::Command;
use std::time::{Duration, Instant};
use tessera_distributed::{
    Backend, DdpOptions, DistributedDataParallel, ProcessGroup, ReduceOp, init_process_group,
};
use tessera_nn::{Call, Forward, Module, ModuleCore, ModuleExt, Parameter};
use tessera_tensor::{DType, Device, Tensor, no_grad};

type Error = Box<dyn std::error::Error>;

const WORLD: usize = 2;
const LIMIT: Duration = Duration::from_secs(300);

/// In the test process: runs `test` as two ranks and checks both pass. In a rank: `None`.
fn launch_ranks(test: &str, port: u16) -> Option<()> {
    if std::env::var("RANK").is_ok() {
        return None;
    }
    let exe = std::env::current_exe().expect("the test binary");
    let mut children: Vec<_> = (0..WORLD)
        .map(|rank| {
            Command::new(&exe)
                .args(["--exact", test, "--ignored", "--nocapture"])
                .env("RANK", rank.to_string())
                .env("LOCAL_RANK", rank.to_string())
                .env("WORLD_SIZE", WORLD.to_string())
                .env("MASTER_ADDR", "127.0.0.1")
                .env("MASTER_PORT", port.to_string())
                .spawn()
                .expect("a rank starts")
        })
        .collect();
    let start = Instant::now();
    for (rank, child) in children.iter_mut().enumerate() {
        loop {
            if let Some(status) = child.try_wait().expect("a rank can be polled") {
                assert!(status.success(), "{test}: rank {rank} failed: {status}");
                break;
            }
            assert!(start.elapsed() < LIMIT, "{test}: rank {rank} hangs");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    Some(())
}

fn group() -> Result<(ProcessGroup, Device), Error> {
    let group = init_process_group(Backend::Nccl)?;
    let device = group.device();
    assert_eq!(device, Device::Cuda(group.rank()));
    Ok((group, device))
}

fn cuda(values: &[f32], shape: &[usize], device: Device) -> Result<Tensor, Error> {
    Ok(Tensor::from_slice(values, shape)?.to_device(device)?)
}

#[test]
#[ignore = "needs NVIDIA GPUs and NCCL"]
fn collectives_on_cuda_tensors() -> Result<(), Error> {
    if launch_ranks("collectives_on_cuda_tensors", 29641).is_some() {
        return Ok(());
    }
    let (group, device) = group()?;
    let r = group.rank() as f32;

    let t = cuda(&[1.0 + r, 10.0 * r], &[2], device)?;
    group.all_reduce(&t, ReduceOp::Sum)?;
    assert_eq!(t.to_vec::<f32>()?, [3.0, 10.0]);
    let t = cuda(&[1.0 + r, 10.0 * r], &[2], device)?;
    group.all_reduce(&t, ReduceOp::Average)?;
    assert_eq!(t.to_vec::<f32>()?, [1.5, 5.0]);
    let t = cuda(&[r, -r], &[2], device)?;
    group.all_reduce(&t, ReduceOp::Max)?;
    assert_eq!(t.to_vec::<f32>()?, [1.0, 0.0]);

    let t = Tensor::from_slice(&[7 + group.rank() as i64, 9], &[2])?.to_device(device)?;
    group.broadcast(&t, 1)?;
    assert_eq!(t.to_vec::<i64>()?, [8, 9]);

    let parts = group.all_gather(&cuda(&[r, r + 0.5, r + 0.25], &[3, 1], device)?)?;
    assert_eq!(parts.len(), WORLD);
    assert_eq!(parts[0].shape(), [3, 1]);
    assert_eq!(parts[1].to_vec::<f32>()?, [1.0, 1.5, 1.25]);

    // Rows 0..2 go to rank 0, rows 2..4 to rank 1: each gets the sum of its block.
    let t = cuda(&[1.0, 2.0, 3.0, 4.0].map(|v| v * (r + 1.0)), &[4], device)?;
    let block = group.reduce_scatter(&t, ReduceOp::Sum)?;
    let want = if group.rank() == 0 {
        [3.0, 6.0]
    } else {
        [9.0, 12.0]
    };
    assert_eq!(block.to_vec::<f32>()?, want);
    group.barrier()?;

    // A CPU tensor is a typed error naming the collective and the device.
    let err = group
        .all_reduce(&Tensor::zeros(&[2], DType::F32)?, ReduceOp::Sum)
        .unwrap_err();
    assert!(err.to_string().contains("all_reduce") && err.to_string().contains("cpu"));
    Ok(())
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

#[test]
#[ignore = "needs NVIDIA GPUs and NCCL"]
fn ddp_on_cuda_matches_one_process_on_the_whole_batch() -> Result<(), Error> {
    if launch_ranks("ddp_on_cuda_matches_one_process_on_the_whole_batch", 29642).is_some() {
        return Ok(());
    }
    let (group, device) = group()?;
    // Tiny buckets: one per parameter, so two all-reduces per backward.
    let options = DdpOptions {
        bucket_cap_bytes: 8,
        ..DdpOptions::default()
    };
    let ddp = DistributedDataParallel::with_options(affine(device)?, &group, options)?;
    let reference = affine(device)?;
    let half = 4;
    for s in 0..10 {
        let rows = group.rank() * half..(group.rank() + 1) * half;
        let (x, y) = batch(s, rows, device)?;
        // Averaged half-batch sums are half the whole batch's sum: the reference takes lr / 2.
        step(ddp.module(), ddp.call(x)?, &y, 0.01)?;
        let (x, y) = batch(s, 0..WORLD * half, device)?;
        step(&reference, reference.call(x)?, &y, 0.005)?;
    }
    assert_eq!(ddp.buckets().len(), 2);
    for ((name, p), (_, q)) in ddp
        .module()
        .named_parameters()
        .iter()
        .zip(reference.named_parameters())
    {
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
