//! Rematerialisation in compiled training steps: with it on and off, the MLP, the shapes CNN
//! and a two-block GELU+LayerNorm MLP train along identical loss trajectories (bit for bit);
//! it never keeps more bytes for the backward nor makes the step program's arena larger, and
//! on the GELU model (whose GELU outputs the backward reads) it keeps fewer bytes and the
//! arena shrinks. Run with `--nocapture` to see each report and both arena sizes.

use std::sync::Arc;
use tessera::functional as F;
use tessera::nn::layers::{
    AdaptiveAvgPool2d, BatchNorm2d, Conv2d, Conv2dOptions, Flatten, GELU, LayerNorm, Linear,
    MaxPool2d, ReLU,
};
use tessera::nn::optim::{SGD, SgdOptions};
use tessera::nn::{Module, ModuleExt, Sequential};
use tessera::passes::RematReport;
use tessera::tensor::{DType, Generator, Tensor};
use tessera::{CompileOptions, TrainStepOptions, compile_train_step};

fn cross_entropy(out: &Tensor, target: &Tensor) -> tessera::nn::Result<Tensor> {
    Ok(F::cross_entropy(out, target, Default::default())?)
}

/// Draws every parameter of `model` from a generator seeded by `seed` (not the global one,
/// which tests running in parallel share).
fn init(model: &dyn Module, seed: u64) {
    let mut g = Generator::new(seed);
    let _guard = tessera::no_grad();
    for (_, p) in model.named_parameters() {
        let p = p.tensor();
        let init = Tensor::randn_with(&p.shape(), DType::F32, &mut g).unwrap();
        p.copy_(&init.mul_scalar(0.2).unwrap()).unwrap();
    }
}

/// The benchmark MLP, 784-256-128-10 with ReLU (narrowed to 64-32-16-10 to keep the test
/// quick).
fn mlp() -> Sequential {
    Sequential::new()
        .add(Linear::new(64, 32).unwrap())
        .add(ReLU::new())
        .add(Linear::new(32, 16).unwrap())
        .add(ReLU::new())
        .add(Linear::new(16, 10).unwrap())
}

/// Two MLP blocks with GELU and LayerNorm, 64-48-48-10.
fn gelu_mlp() -> Sequential {
    Sequential::new()
        .add(Linear::new(64, 48).unwrap())
        .add(GELU::new())
        .add(LayerNorm::new(&[48]).unwrap())
        .add(Linear::new(48, 48).unwrap())
        .add(GELU::new())
        .add(LayerNorm::new(&[48]).unwrap())
        .add(Linear::new(48, 10).unwrap())
}

/// The shapes CNN of `examples/shapes_net.rs`: two conv blocks (conv, batch norm, ReLU, the
/// first max-pooled), global average pooling and a linear classifier.
fn shapes_cnn() -> Sequential {
    let same = || Conv2dOptions::default().padding(1);
    Sequential::new()
        .add(Conv2d::with_options(1, 8, 3, same()).unwrap())
        .add(BatchNorm2d::new(8).unwrap())
        .add(ReLU::new())
        .add(MaxPool2d::new(2))
        .add(Conv2d::with_options(8, 16, 3, same()).unwrap())
        .add(BatchNorm2d::new(16).unwrap())
        .add(ReLU::new())
        .add(AdaptiveAvgPool2d::new(1))
        .add(Flatten::new())
        .add(Linear::new(16, 10).unwrap())
}

/// A batch of `rows` inputs shaped `sample` and class targets, from `g`.
fn batch(rows: usize, sample: &[usize], g: &mut Generator) -> (Tensor, Tensor) {
    let mut shape = vec![rows];
    shape.extend_from_slice(sample);
    let x = Tensor::randn_with(&shape, DType::F32, g).unwrap();
    let classes: Vec<i64> = (0..rows as i64).map(|i| (i * 7 + 3) % 10).collect();
    (x, Tensor::from_vec(classes, &[rows]).unwrap())
}

/// What a run of compiled steps gave: the losses, the final parameters, the remat report and
/// the arena bytes of the program compiled last.
struct Run {
    losses: Vec<f32>,
    parameters: Vec<Vec<f32>>,
    remat: Option<RematReport>,
    arena_bytes: usize,
}

/// Trains a fresh `make()` (parameters from seed 3; training mode) for 4 SGD steps with
/// momentum on batches of `rows` samples shaped `sample`, rematerialisation on or off.
fn train(make: fn() -> Sequential, sample: &[usize], rows: usize, remat: bool) -> Run {
    let model = Arc::new(make());
    init(&*model, 3);
    model.train(true);
    let options = SgdOptions {
        lr: 0.05,
        momentum: 0.9,
        ..Default::default()
    };
    let opt = SGD::new(model.parameter_tensors(), options).unwrap();
    let mut g = Generator::new(11);
    let (x, t) = batch(rows, sample, &mut g);
    let options = TrainStepOptions {
        compile: CompileOptions::default(),
        rematerialize: remat,
    };
    let mut step =
        compile_train_step(model.clone(), cross_entropy, opt, (&x, &t), options).unwrap();
    let losses = (0..4)
        .map(|_| {
            let (x, t) = batch(rows, sample, &mut g);
            step.step(&x, &t).unwrap().item::<f32>().unwrap()
        })
        .collect();
    let parameters = model
        .named_parameters()
        .into_iter()
        .map(|(_, p)| p.tensor().to_vec::<f32>().unwrap())
        .collect();
    let report = step.report();
    Run {
        losses,
        parameters,
        remat: report.remat.clone(),
        arena_bytes: report.last.arena_bytes,
    }
}

/// Trains `make()` with rematerialisation on and off; asserts identical trajectories, no more
/// bytes kept and no larger arena; returns (on, off).
fn compare(what: &str, make: fn() -> Sequential, sample: &[usize], rows: usize) -> (Run, Run) {
    let (on, off) = (
        train(make, sample, rows, true),
        train(make, sample, rows, false),
    );
    assert_eq!(on.losses, off.losses, "{what}: loss trajectories");
    assert_eq!(
        on.parameters, off.parameters,
        "{what}: parameters after training"
    );
    assert!(off.remat.is_none(), "{what}: remat off reports nothing");
    let report = on.remat.as_ref().expect("remat on reports");
    assert!(
        report.bytes_after() <= report.bytes_before(),
        "{what}: {report}"
    );
    assert!(
        on.arena_bytes <= off.arena_bytes,
        "{what}: the arena grew from {} to {} bytes with remat\n{report}",
        off.arena_bytes,
        on.arena_bytes
    );
    println!(
        "{what}: {report}arena {} bytes with remat, {} without",
        on.arena_bytes, off.arena_bytes
    );
    (on, off)
}

#[test]
fn remat_leaves_the_mlp_training_trajectory_and_never_grows_the_arena() {
    compare("mlp b64", mlp, &[64], 64);
}

#[test]
fn remat_leaves_the_shapes_cnn_training_trajectory_and_never_grows_the_arena() {
    compare("shapes cnn b16", shapes_cnn, &[1, 16, 16], 16);
}

#[test]
fn remat_recomputes_gelu_in_the_backward_and_shrinks_the_arena() {
    let (on, off) = compare("gelu mlp b64", gelu_mlp, &[64], 64);
    let report = on.remat.unwrap();
    let recomputed: Vec<&str> = report.recomputed.iter().map(|(o, _)| o.as_str()).collect();
    assert_eq!(recomputed, ["gelu", "gelu_1"], "{report}");
    // Neither GELU output, [64, 48] f32 each, is kept for the backward any more: the first
    // lived in the arena through the second block's backward, where the arena peaks.
    assert_eq!(report.bytes_saved(), 2 * 64 * 48 * 4, "{report}");
    assert!(
        on.arena_bytes < off.arena_bytes,
        "{} vs {}",
        on.arena_bytes,
        off.arena_bytes
    );
}

#[test]
fn compile_options_convert_into_train_step_options_with_remat_on() {
    let options: TrainStepOptions = CompileOptions::default().into();
    assert!(options.rematerialize);
    assert_eq!(TrainStepOptions::default(), options);
}
