//! Data-parallel training across processes: `mpirun -np 2 target/release/examples/ddp_train`
//! starts two ranks that each train a replica of the shapes CNN (or ResNet-18) on their shard
//! of every batch, averaging gradients through MPI, and prints per-rank throughput and how
//! much of the communication backward hid.

use clap::{Parser, ValueEnum};
use std::time::{Duration, Instant};
use tessera::datasets::{accuracy, shapes};
use tessera::functional as F;
use tessera::nn::models::ResNet18;
use tessera::nn::optim::{Optimizer, SGD, SgdOptions};
use tessera::nn::{Call, Module, ModuleExt};
use tessera::{Generator, Tensor, manual_seed};
use tessera_distributed::{
    Backend, DdpOptions, DistributedDataParallel, DistributedSampler, ProcessGroup, ReduceOp,
    SyncStats, init_process_group,
};

#[path = "shapes_net.rs"]
mod shapes_net;
use shapes_net::ShapesNet;

type Error = Box<dyn std::error::Error>;

#[derive(Clone, Copy, ValueEnum)]
enum Model {
    /// The shapes CNN of `train_shapes` on 1x16x16 generated shapes.
    Shapes,
    /// torchvision's ResNet-18 on random 3x32x32 images of 10 classes.
    Resnet18,
}

#[derive(Parser)]
#[command(about = "Train a model data-parallel on every rank mpirun starts")]
struct Args {
    #[arg(long, value_enum, default_value_t = Model::Shapes)]
    model: Model,
    /// Steps to time (after 3 warm-up steps).
    #[arg(long, default_value_t = 30)]
    steps: usize,
    /// Images per step over all ranks; each rank takes its share.
    #[arg(long, default_value_t = 64)]
    batch: usize,
    /// Gradient bucket size in MiB (PyTorch's bucket_cap_mb).
    #[arg(long, default_value_t = 25)]
    bucket_cap_mb: usize,
    /// SGD learning rate (momentum 0.9).
    #[arg(long, default_value_t = 0.01)]
    lr: f64,
    /// Compute threads per rank (default: this machine's cores shared among the local ranks).
    #[arg(long)]
    threads: Option<usize>,
}

fn main() {
    let args = Args::parse();
    let group = match init_process_group(Backend::Mpi) {
        Ok(group) => group,
        Err(e) => {
            eprintln!("ddp_train: {e}");
            std::process::exit(2);
        }
    };
    let result = match args.model {
        Model::Shapes => run(&args, &group, ShapesNet::new, shapes),
        Model::Resnet18 => run(&args, &group, || ResNet18::new(10), random_images),
    };
    group.exit_on_error(result);
}

/// `n` random 3x32x32 images with labels of 10 classes (ResNet-18 measures speed, not
/// learning).
fn random_images(n: usize, g: &mut Generator) -> tessera::Result<(Tensor, Tensor)> {
    let pixels: Vec<f32> = (0..n * 3 * 32 * 32).map(|_| g.normal() as f32).collect();
    let labels: Vec<i64> = (0..n).map(|_| g.integer(0, 10)).collect();
    Ok((
        Tensor::from_vec(pixels, &[n, 3, 32, 32])?,
        Tensor::from_vec(labels, &[n])?,
    ))
}

/// Per-step measurements of one rank.
#[derive(Default)]
struct Totals {
    step: Duration,
    communication: Duration,
    exposed: Duration,
}

impl Totals {
    fn add(&mut self, step: Duration, stats: Option<SyncStats>) {
        self.step += step;
        if let Some(stats) = stats {
            self.communication += stats.communication;
            self.exposed += stats.exposed;
        }
    }
}

fn run<M, B, D>(args: &Args, group: &ProcessGroup, build: B, data: D) -> Result<(), Error>
where
    M: Module + Call<Tensor, Output = Tensor>,
    B: Fn() -> tessera::nn::Result<M>,
    D: Fn(usize, &mut Generator) -> tessera::Result<(Tensor, Tensor)>,
{
    let (rank, world) = (group.rank(), group.world_size());
    if !args.batch.is_multiple_of(world) || args.batch == 0 {
        return Err(format!("--batch {} does not split over {world} ranks", args.batch).into());
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    tessera::tensor::set_num_threads(args.threads.unwrap_or((cores / world).max(1)))?;

    // Every rank generates the same dataset and takes its shard of each epoch's order.
    let dataset_len = args.batch * 8;
    let (images, labels) = data(dataset_len, &mut Generator::new(0))?;
    let mut sampler = DistributedSampler::new(dataset_len, group)?.seed(1);
    manual_seed(rank as u64); // Replicas start apart: construction copies rank 0's weights.
    let options = DdpOptions {
        bucket_cap_bytes: args.bucket_cap_mb << 20,
        ..Default::default()
    };
    let model = DistributedDataParallel::with_options(build()?, group, options)?;
    let mut optimizer = SGD::new(
        model.parameter_tensors(),
        SgdOptions {
            lr: args.lr,
            momentum: 0.9,
            ..Default::default()
        },
    )?;

    let per_rank = args.batch / world;
    let steps_per_epoch = sampler.num_samples() / per_rank;
    let mut order = Vec::new();
    let mut totals = Totals::default();
    let (mut last_loss, mut last_accuracy) = (f64::NAN, f64::NAN);
    for step in 0..args.steps + 3 {
        let within = step % steps_per_epoch;
        if within == 0 {
            sampler.set_epoch((step / steps_per_epoch) as u64);
            order = sampler.indices().iter().map(|&i| i as i64).collect();
        }
        let index = Tensor::from_slice(
            &order[within * per_rank..(within + 1) * per_rank],
            &[per_rank],
        )?;
        let (x, y) = (
            images.index_select(0, &index)?,
            labels.index_select(0, &index)?,
        );
        let start = Instant::now();
        let logits = model.call(x)?;
        let loss = F::cross_entropy(&logits, &y, F::CrossEntropyOptions::default())?;
        optimizer.zero_grad(true);
        loss.backward()?;
        optimizer.step()?;
        if step >= 3 {
            totals.add(start.elapsed(), model.last_sync_stats());
        }
        (last_loss, last_accuracy) = (loss.item::<f64>()?, accuracy(&logits, &y)?);
    }

    let steps = args.steps.max(1) as f64;
    let step_ms = totals.step.as_secs_f64() * 1e3 / steps;
    let comm_ms = totals.communication.as_secs_f64() * 1e3 / steps;
    let hidden = if totals.communication.is_zero() {
        1.0
    } else {
        1.0 - totals.exposed.as_secs_f64() / totals.communication.as_secs_f64()
    };
    println!(
        "rank {rank}/{world}: {:.1} ms/step, {:.1} images/s, all-reduce {comm_ms:.1} ms/step, {:.0}% hidden behind backward; last loss {last_loss:.4}, batch accuracy {:.0}%",
        step_ms,
        per_rank as f64 * 1e3 / step_ms,
        100.0 * hidden.clamp(0.0, 1.0),
        100.0 * last_accuracy
    );
    // The world's throughput: every rank's images per second, summed on every rank.
    let throughput = Tensor::from_slice(&[per_rank as f64 * 1e3 / step_ms], &[1])?;
    group.all_reduce(&throughput, ReduceOp::Sum)?;
    if rank == 0 {
        let params: usize = model.parameters().iter().map(|p| p.tensor().numel()).sum();
        println!(
            "{world} rank(s), {params} parameters in {} bucket(s), batch {} ({per_rank} per rank): {:.1} images/s in all",
            model.buckets().len(),
            args.batch,
            throughput.to_vec::<f64>()?[0]
        );
    }
    Ok(())
}
