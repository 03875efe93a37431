//! `tessera::compile_train_step`: PyTorch's 20-step SGD, Adam and AdamW trajectories of the
//! Modules-note Net reproduced by compiled steps; compiled steps equal eager ones on an MLP with
//! cross entropy, through the JIT and the interpreter; eager and compiled steps mix on one
//! optimizer (with a scheduler changing the learning rate) and continue identically; a new
//! batch shape traces again; an optimizer without update ops is refused with a typed error.

use std::sync::Arc;
use tessera::functional as F;
use tessera::nn::layers::{Linear, ReLU};
use tessera::nn::models::SmallCnn;
use tessera::nn::models::note::Net;
use tessera::nn::optim::{
    Adam, AdamOptions, AdamW, AdamWOptions, GroupOptions, LrScheduler, Optimizer, RMSprop,
    RmsPropOptions, SGD, SgdOptions, StepLR,
};
use tessera::nn::{Call, Module, ModuleExt, Sequential, Value, load_pt_state_dict};
use tessera::tensor::{DType, Generator, Tensor};
use tessera::{Backend, CompileError, CompileOptions, compile_train_step};
use tessera_testkit::{Case, assert_close, conformance_dir};

const KEYS: [&str; 4] = ["l0.weight", "l0.bias", "l1.weight", "l1.bias"];

fn note_net(case: &str) -> Arc<Net> {
    let model = Arc::new(Net::new().unwrap());
    let path = conformance_dir().join(case).join("state_dict.pt");
    model
        .load_state_dict(&load_pt_state_dict(path).unwrap(), true, false)
        .unwrap();
    model
}

fn parameters(model: &dyn Module) -> Vec<Tensor> {
    model
        .named_parameters()
        .into_iter()
        .map(|(_, p)| p.tensor().clone())
        .collect()
}

/// The case's loss, `out.abs().sum()`; the target is not read.
fn abs_sum(out: &Tensor, _target: &Tensor) -> tessera::nn::Result<Tensor> {
    Ok(out.abs()?.sum_all()?)
}

fn state_tensor<'a>(sd: &'a Value, index: i64, key: &str) -> &'a Tensor {
    let Value::Dict(d) = sd else {
        panic!("state_dict")
    };
    let Value::Dict(state) = &d[&tessera::nn::Key::from("state")] else {
        panic!("state")
    };
    let Value::Dict(entry) = &state[&tessera::nn::Key::Int(index)] else {
        panic!("state {index}")
    };
    entry[&tessera::nn::Key::from(key)]
        .as_tensor()
        .expect("a tensor")
}

fn check_trajectory<O: Optimizer>(
    name: &str,
    make: impl FnOnce(Vec<Tensor>) -> O,
    state_keys: &[&str],
) {
    let case = Case::load(name);
    let model = note_net(name);
    let inputs = case.io("inputs").to_dtype(DType::F32).unwrap();
    let losses = case.io("losses");
    let unused_target = Tensor::zeros(&[1], DType::F32).unwrap();
    let x0 = inputs.select(0, 0).unwrap();
    let mut step = compile_train_step(
        model.clone(),
        abs_sum,
        make(parameters(&*model)),
        (&x0, &unused_target),
        CompileOptions::default(),
    )
    .unwrap();
    for s in 1..=20 {
        let x = inputs.select(0, s - 1).unwrap();
        let loss = step.step(&x, &unused_target).unwrap();
        let expected = losses.select(0, s - 1).unwrap();
        assert_close(
            &loss,
            &expected,
            case.rtol,
            case.atol,
            &format!("{name} loss {s}"),
        );
        if [1, 5, 20].contains(&s) {
            for (k, p) in KEYS.iter().zip(parameters(&*model)) {
                case.check(&format!("after_step_{s}/{k}"), &p);
            }
        }
    }
    let sd = step.optimizer().state_dict();
    for (i, k) in KEYS.iter().enumerate() {
        for key in state_keys {
            let t = state_tensor(&sd, i as i64, key);
            case.check(&format!("opt_state_after_step_20/{k}/{key}"), t);
        }
    }
}

#[test]
fn sgd_trajectory_matches_pytorch_as_compiled_steps() {
    let options = SgdOptions {
        lr: 1e-2,
        momentum: 0.9,
        weight_decay: 1e-2,
        ..Default::default()
    };
    check_trajectory(
        "f_train_sgd",
        |p| SGD::new(p, options).unwrap(),
        &["momentum_buffer"],
    );
}

#[test]
fn adam_trajectory_matches_pytorch_as_compiled_steps() {
    check_trajectory(
        "f_train_adam",
        |p| Adam::new(p, AdamOptions::default()).unwrap(),
        &["step", "exp_avg", "exp_avg_sq"],
    );
}

#[test]
fn adamw_trajectory_matches_pytorch_as_compiled_steps() {
    check_trajectory(
        "f_train_adamw",
        |p| AdamW::new(p, AdamWOptions::default()).unwrap(),
        &["step", "exp_avg", "exp_avg_sq"],
    );
}

/// `model` with every parameter drawn from `N(0, scale^2)` by a generator seeded by `seed`
/// (not the global one, which tests running in parallel share).
fn seeded(model: Sequential, seed: u64, scale: f64) -> Arc<Sequential> {
    let mut g = Generator::new(seed);
    let _guard = tessera::no_grad();
    for p in parameters(&model) {
        let init = Tensor::randn_with(&p.shape(), DType::F32, &mut g).unwrap();
        p.copy_(&init.mul_scalar(scale).unwrap()).unwrap();
    }
    Arc::new(model)
}

/// An MLP classifier (`Linear(20, 32) -> ReLU -> Linear(32, 5)`), seeded by `seed`.
fn mlp(seed: u64) -> Arc<Sequential> {
    let mut model = Sequential::new();
    model.push(Box::new(Linear::new(20, 32).unwrap()));
    model.push(Box::new(ReLU::new()));
    model.push(Box::new(Linear::new(32, 5).unwrap()));
    seeded(model, seed, 0.2)
}

fn cross_entropy(out: &Tensor, target: &Tensor) -> tessera::nn::Result<Tensor> {
    Ok(F::cross_entropy(out, target, Default::default())?)
}

/// A compiled cross-entropy training step of `model` with `optimizer`, for batches like `(x, t)`.
fn ce_step<M: tessera::nn::Layer + 'static, O: Optimizer>(
    model: Arc<M>,
    optimizer: O,
    x: &Tensor,
    t: &Tensor,
) -> tessera::CompiledTrainStep<M, O> {
    compile_train_step(
        model,
        cross_entropy,
        optimizer,
        (x, t),
        CompileOptions::default(),
    )
    .unwrap()
}

fn batch(rows: usize, g: &mut Generator) -> (Tensor, Tensor) {
    let x = Tensor::randn_with(&[rows, 20], DType::F32, g).unwrap();
    let classes: Vec<i64> = (0..rows as i64).map(|i| (i * 7 + 3) % 5).collect();
    (x, Tensor::from_vec(classes, &[rows]).unwrap())
}

/// One eager step of `model` with `opt` on `(x, t)`; the loss.
fn eager_step(model: &Sequential, opt: &mut dyn Optimizer, x: &Tensor, t: &Tensor) -> f32 {
    opt.zero_grad(true);
    let loss = cross_entropy(&model.call(x.clone()).unwrap(), t).unwrap();
    loss.backward().unwrap();
    opt.step().unwrap();
    loss.item::<f32>().unwrap()
}

fn assert_same_parameters(a: &dyn Module, b: &dyn Module, tolerance: f64, what: &str) {
    for ((name, pa), (_, pb)) in a.named_parameters().into_iter().zip(b.named_parameters()) {
        assert_close(
            pa.tensor(),
            pb.tensor(),
            tolerance,
            tolerance,
            &format!("{what}: {name}"),
        );
    }
}

#[test]
fn compiled_steps_equal_eager_steps_on_an_mlp_through_the_jit_and_the_interpreter() {
    for backend in [Backend::Interpreter, Backend::Jit] {
        for adam in [false, true] {
            let (eager, compiled) = (mlp(3), mlp(3));
            let make = |model: &dyn Module| -> Box<dyn Optimizer> {
                if adam {
                    Box::new(Adam::new(parameters(model), AdamOptions::default()).unwrap())
                } else {
                    let options = SgdOptions {
                        lr: 0.05,
                        momentum: 0.9,
                        nesterov: true,
                        weight_decay: 1e-3,
                        ..Default::default()
                    };
                    Box::new(SGD::new(parameters(model), options).unwrap())
                }
            };
            let mut eager_opt = make(&*eager);
            let mut g = Generator::new(11);
            let (x, t) = batch(16, &mut g);
            let mut step = compile_train_step(
                compiled.clone(),
                cross_entropy,
                make(&*compiled),
                (&x, &t),
                CompileOptions {
                    backend,
                    ..Default::default()
                },
            )
            .unwrap();
            for s in 0..5 {
                let (x, t) = batch(16, &mut g);
                let expected = eager_step(&eager, &mut *eager_opt, &x, &t);
                let loss = step.step(&x, &t).unwrap().item::<f32>().unwrap();
                let what = format!("{backend:?}, adam {adam}, step {s}");
                assert!(
                    (loss - expected).abs() <= 1e-5 * expected.abs(),
                    "{what}: {loss} vs {expected}"
                );
                assert_same_parameters(&*compiled, &*eager, 1e-5, &what);
            }
            // SGD with momentum compiles a second program once its buffers exist; Adam's
            // state exists from the first step on.
            assert_eq!(step.report().programs, if adam { 1 } else { 2 });
            // Cross entropy's nll and its gradient are kernels (checked gathers): the only
            // nodes left to eager kernels are the GEMMs, external calls by design on the CPU.
            let report = &step.report().last;
            let unexpected: Vec<String> = report
                .fallbacks
                .iter()
                .filter(|f| !matches!(f.op.as_str(), "linear" | "matmul"))
                .map(ToString::to_string)
                .collect();
            assert!(unexpected.is_empty(), "fallbacks: {unexpected:?}\n{report}");
            // Each weight's update is the epilogue of the GEMM computing its gradient (which
            // is never stored): it launches with it. The biases' updates are kernels of one
            // launch group, as a fused PyTorch optimizer's; Adam's per-parameter step scalars
            // are one more.
            let params = parameters(&*compiled).len();
            let weights = params / 2;
            let groups = if adam {
                vec![params, params - weights]
            } else {
                vec![params - weights]
            };
            assert_eq!(report.launch_groups, groups, "{report}");
            assert_eq!(step.report().update_launches, 1 + weights, "{report}");
        }
    }
}

/// Three compiled steps of an MLP on batches of 1024 rows (the last `linear` a GEMM kernel
/// too, so no eager call reads a weight) with the optimizer `make` gives, each following an
/// eager twin; `check(step, report, params)` then looks at what the step wrote in place.
fn in_place_steps<O: Optimizer>(
    seed: u64,
    make: impl Fn(Vec<Tensor>) -> O,
    check: impl Fn(usize, &tessera::TrainStepReport, usize),
) {
    let (eager, compiled) = (mlp(seed), mlp(seed));
    let mut eager_opt = make(parameters(&*eager));
    let (x, t) = batch(1024, &mut Generator::new(seed + 7));
    let mut step = ce_step(compiled.clone(), make(parameters(&*compiled)), &x, &t);
    let params = parameters(&*compiled).len();
    for s in 0..3 {
        let expected = eager_step(&eager, &mut eager_opt, &x, &t);
        let loss = step.step(&x, &t).unwrap().item::<f32>().unwrap();
        let what = format!("step {s}");
        assert!((loss - expected).abs() <= 1e-5 * expected.abs(), "{what}");
        assert_same_parameters(&*compiled, &*eager, 1e-5, &what);
        check(s, step.report(), params);
    }
}

#[test]
fn a_step_whose_weights_only_kernels_read_updates_every_parameter_in_place() {
    // At 16 rows the last `linear` is an eager call, which reads its weight and bias, so their
    // updates would be copied instead.
    let options = SgdOptions {
        lr: 0.05,
        momentum: 0.9,
        ..Default::default()
    };
    in_place_steps(
        5,
        |p| SGD::new(p, options.clone()).unwrap(),
        |s, report, params| {
            // SGD's first step creates the momentum buffers (its own program); from the second
            // on, each parameter and its buffer are written in place by its update kernel.
            if s > 0 {
                assert_eq!(report.in_place, 2 * params, "step {s}");
            }
            // In place; the weights' updates in the launches of the GEMMs computing their
            // gradients, the biases' in one more.
            assert_eq!(report.update_launches, 1 + params / 2, "step {s}");
        },
    );
}

#[test]
fn an_adam_step_writes_its_parameters_moments_and_step_counts_in_place() {
    // Adam records each parameter's step scalars before its update: the updates move past
    // the later parameters' scalars to the end of the step, the biases' as one launch group,
    // the weights' (each the epilogue of the GEMM computing its gradient) just before it; each
    // writes its parameter and moments in place. The scalars, then side by side, are one
    // launch group too, and write the step counts in place (their other outputs, the bias
    // corrections, live in the arena: nothing after the first in-place write allocates).
    let options = AdamOptions {
        lr: 0.01,
        weight_decay: 1e-2,
        ..Default::default()
    };
    in_place_steps(
        6,
        |p| Adam::new(p, options.clone()).unwrap(),
        |s, report, params| {
            assert_eq!(report.in_place, 4 * params, "step {s}");
            // The weights' updates launch with the GEMMs computing their gradients.
            assert_eq!(report.update_launches, 1 + params / 2, "step {s}");
            assert_eq!(
                report.last.launch_groups,
                vec![params, params / 2],
                "step {s}"
            );
        },
    );
}

#[test]
fn eager_and_compiled_steps_mix_on_one_optimizer_with_a_scheduler() {
    let options = SgdOptions {
        lr: 0.1,
        momentum: 0.8,
        dampening: 0.1,
        ..Default::default()
    };
    let (reference, mixed) = (mlp(5), mlp(5));
    let mut reference_opt = SGD::new(parameters(&*reference), options.clone()).unwrap();
    let mut reference_sched = StepLR::new(&mut reference_opt, 2, 0.5).unwrap();
    let mut g = Generator::new(2);
    let batches: Vec<(Tensor, Tensor)> = (0..6).map(|_| batch(8, &mut g)).collect();
    for (x, t) in &batches {
        eager_step(&reference, &mut reference_opt, x, t);
        reference_sched.step(&mut reference_opt).unwrap();
    }

    let mut opt = SGD::new(parameters(&*mixed), options).unwrap();
    let mut sched = StepLR::new(&mut opt, 2, 0.5).unwrap();
    let mut step = ce_step(mixed.clone(), opt, &batches[0].0, &batches[0].1);
    for (i, (x, t)) in batches.iter().enumerate() {
        if (2..4).contains(&i) {
            eager_step(&mixed, step.optimizer_mut(), x, t);
        } else {
            step.step(x, t).unwrap();
        }
        sched.step(step.optimizer_mut()).unwrap();
    }
    assert_same_parameters(&*mixed, &*reference, 1e-6, "mixed vs eager");
    let (a, b) = (step.optimizer().state_dict(), reference_opt.state_dict());
    for i in 0..4 {
        assert_close(
            state_tensor(&a, i, "momentum_buffer"),
            state_tensor(&b, i, "momentum_buffer"),
            1e-6,
            1e-6,
            &format!("momentum buffer {i}"),
        );
    }
}

#[test]
fn a_batch_of_another_shape_traces_and_compiles_again() {
    let model = mlp(1);
    let mut g = Generator::new(4);
    let (x, t) = batch(8, &mut g);
    let opt = SGD::new(parameters(&*model), SgdOptions::default()).unwrap();
    let mut step = ce_step(model, opt, &x, &t);
    step.step(&x, &t).unwrap();
    let (x3, t3) = batch(3, &mut g);
    let loss = step.step(&x3, &t3).unwrap();
    assert_eq!(loss.shape(), Vec::<usize>::new());
    step.step(&x, &t).unwrap();
    assert_eq!(step.report().programs, 2);
}

/// Runs one compiled step of `model` with `opt` that fails after recording the update (CPU
/// batches for a program compiled for a CUDA device: no device, or a device mismatch) and
/// hands the optimizer back.
fn a_failed_step<O: Optimizer>(model: &Arc<Sequential>, opt: O, x: &Tensor, t: &Tensor) -> O {
    let on_cuda = CompileOptions {
        device: tessera::Device::Cuda(0),
        ..Default::default()
    };
    let mut step = compile_train_step(model.clone(), cross_entropy, opt, (x, t), on_cuda).unwrap();
    assert!(step.step(x, t).is_err());
    step.into_optimizer()
}

#[test]
fn a_step_that_fails_to_compile_leaves_the_optimizer_and_the_parameters_untouched() {
    // Dampening makes a zero momentum buffer differ from none: a buffer left behind by the
    // failed first step would change every later eager step.
    let options = SgdOptions {
        lr: 0.1,
        momentum: 0.9,
        dampening: 0.5,
        ..Default::default()
    };
    let (model, twin) = (mlp(8), mlp(8));
    let (x, t) = batch(6, &mut Generator::new(9));
    let opt = SGD::new(parameters(&*model), options.clone()).unwrap();
    let mut opt = a_failed_step(&model, opt, &x, &t);
    let Value::Dict(sd) = opt.state_dict() else {
        panic!("state_dict")
    };
    let Value::Dict(state) = &sd[&tessera::nn::Key::from("state")] else {
        panic!("state")
    };
    assert!(
        state.is_empty(),
        "the failed step left optimizer state behind"
    );
    assert_same_parameters(&*model, &*twin, 0.0, "after the failed step");
    let mut twin_opt = SGD::new(parameters(&*twin), options).unwrap();
    for _ in 0..3 {
        let a = eager_step(&model, &mut opt, &x, &t);
        let b = eager_step(&twin, &mut twin_opt, &x, &t);
        assert_eq!(a, b);
    }
    assert_same_parameters(&*model, &*twin, 0.0, "eager steps after the failed step");
}

#[test]
fn a_failed_step_after_amsgrad_is_switched_on_leaves_no_maximum_buffer_behind() {
    // Two eager Adam steps make the state; AMSGrad switched on afterwards makes the next step
    // add a `max_exp_avg_sq` to each existing entry while it records. The step then fails (a
    // program for a CUDA device, CPU batches): the state must be as before it, keys included.
    let model = mlp(8);
    let (x, t) = batch(6, &mut Generator::new(9));
    let mut opt = Adam::new(parameters(&*model), AdamOptions::default()).unwrap();
    for _ in 0..2 {
        eager_step(&model, &mut opt, &x, &t);
    }
    let keys = |opt: &dyn Optimizer| -> Vec<String> {
        let sd = opt.state_dict();
        let Value::Dict(d) = &sd else {
            panic!("state_dict")
        };
        let Value::Dict(state) = &d[&tessera::nn::Key::from("state")] else {
            panic!("state")
        };
        let mut keys = Vec::new();
        for (param, entry) in state {
            let Value::Dict(entry) = entry else {
                panic!("entry")
            };
            keys.extend(entry.keys().map(|k| format!("{param:?}.{k:?}")));
        }
        keys
    };
    let before = keys(&opt);
    for group in opt.param_groups_mut() {
        if let GroupOptions::Adam(o) = &mut group.options {
            o.amsgrad = true;
        }
    }
    let opt = a_failed_step(&model, opt, &x, &t);
    assert_eq!(
        keys(&opt),
        before,
        "the failed step changed the optimizer's state"
    );
}

#[test]
fn an_optimizer_without_update_ops_is_refused_with_a_typed_error() {
    let model = mlp(1);
    let mut g = Generator::new(4);
    let (x, t) = batch(4, &mut g);
    let opt = RMSprop::new(parameters(&*model), RmsPropOptions::default()).unwrap();
    let before = parameters(&*model)[0].to_vec::<f32>().unwrap();
    let mut step = ce_step(model.clone(), opt, &x, &t);
    let err = step.step(&x, &t).unwrap_err();
    assert!(matches!(err, CompileError::Optimizer { .. }), "{err}");
    assert!(err.to_string().contains("no update ops"), "{err}");
    assert_eq!(parameters(&*model)[0].to_vec::<f32>().unwrap(), before);
}

#[test]
fn param_groups_keep_their_own_learning_rates() {
    let (eager, compiled) = (mlp(8), mlp(8));
    let make = |model: &dyn Module| {
        let params = parameters(model);
        let group = |lr: f64| SgdOptions {
            lr,
            momentum: 0.5,
            ..Default::default()
        };
        let mut opt = SGD::new(params[..2].to_vec(), group(0.2)).unwrap();
        opt.add_param_group(params[2..].to_vec(), group(0.01))
            .unwrap();
        opt
    };
    let mut eager_opt = make(&*eager);
    let mut g = Generator::new(9);
    let (x, t) = batch(8, &mut g);
    let mut step = ce_step(compiled.clone(), make(&*compiled), &x, &t);
    for s in 0..3 {
        let (x, t) = batch(8, &mut g);
        eager_step(&eager, &mut eager_opt, &x, &t);
        step.step(&x, &t).unwrap();
        assert_same_parameters(&*compiled, &*eager, 1e-6, &format!("step {s}"));
    }
}

/// The conformance small CNN in training mode with the case's weights and running statistics.
fn small_cnn_train() -> Arc<SmallCnn> {
    let model = Arc::new(SmallCnn::new().unwrap());
    let path = conformance_dir().join("d_cnn_train").join("state_dict.pt");
    model
        .load_state_dict(&load_pt_state_dict(path).unwrap(), true, false)
        .unwrap();
    model.train(true);
    model
}

#[test]
fn batch_norm_running_statistics_are_updated_by_compiled_steps_as_by_pytorch_and_eager() {
    let case = Case::load("d_cnn_train");
    let (x, t) = (case.io("input"), case.io("target"));
    let model = small_cnn_train();
    let before: Vec<(String, Tensor)> = model
        .named_parameters()
        .into_iter()
        .map(|(name, p)| (name, p.tensor().deep_clone().unwrap()))
        .collect();
    let opt = SGD::new(
        parameters(&*model),
        SgdOptions {
            lr: 0.1,
            ..Default::default()
        },
    )
    .unwrap();
    let mut step = ce_step(model.clone(), opt, &x, &t);
    let loss = step.step(&x, &t).unwrap();
    case.check("loss", &loss);
    for bn in ["bn1", "bn2"] {
        for stat in ["running_mean", "running_var", "num_batches_tracked"] {
            let key = format!("{bn}.{stat}");
            let buffer = model.get_buffer(&key).unwrap();
            case.check(&format!("after/{key}"), &buffer);
        }
    }
    // One plain SGD step: each parameter moved by -lr times PyTorch's gradient.
    for (name, p0) in &before {
        let expected = p0
            .sub(&case.io(&format!("grad/{name}")).mul_scalar(0.1).unwrap())
            .unwrap();
        let p = model.get_parameter(name).unwrap();
        assert_close(
            p.tensor(),
            &expected,
            1e-4,
            1e-5,
            &format!("{name} after one step"),
        );
    }

    // Three more steps against an eager twin: the same parameters and buffers.
    let eager = Arc::new(SmallCnn::new().unwrap());
    eager
        .load_state_dict(&model.state_dict().unwrap(), true, false)
        .unwrap();
    eager.train(true);
    let mut eager_opt = SGD::new(
        parameters(&*eager),
        SgdOptions {
            lr: 0.1,
            ..Default::default()
        },
    )
    .unwrap();
    let mut g = Generator::new(1);
    for s in 0..3 {
        let x = Tensor::randn_with(&[4, 3, 16, 16], DType::F32, &mut g).unwrap();
        let t = Tensor::from_vec(vec![1i64, 7, 3, 0], &[4]).unwrap();
        eager_opt.zero_grad(true);
        let loss = cross_entropy(&eager.call(x.clone()).unwrap(), &t).unwrap();
        loss.backward().unwrap();
        eager_opt.step().unwrap();
        step.step(&x, &t).unwrap();
        let what = format!("step {s}");
        assert_same_parameters(&*model, &*eager, 1e-4, &what);
        for ((name, a), (_, b)) in model.named_buffers().into_iter().zip(eager.named_buffers()) {
            let (a, b) = (
                a.to_dtype(DType::F64).unwrap(),
                b.to_dtype(DType::F64).unwrap(),
            );
            assert_close(&a, &b, 1e-5, 1e-6, &format!("{what}: {name}"));
        }
    }
}

/// A tiny token classifier (`Embedding(10, 4) -> Flatten -> Linear(12, 3)` over 3 tokens per
/// sample), seeded by `seed`.
fn token_classifier(seed: u64) -> Arc<Sequential> {
    let mut model = Sequential::new();
    model.push(Box::new(tessera::nn::Embedding::new(10, 4).unwrap()));
    model.push(Box::new(tessera::nn::Flatten::new()));
    model.push(Box::new(Linear::new(12, 3).unwrap()));
    seeded(model, seed, 0.3)
}

/// Four SGD steps of `model()` compiled for `backend` follow four eager steps of an identical
/// model on `batch(0..4)` (after `batch(0)` as the example): losses and parameters within
/// 1e-5; the last step falls back only for ops `allowed` names.
fn sgd_steps_follow_eager(
    model: impl Fn() -> Arc<Sequential>,
    options: SgdOptions,
    mut batch: impl FnMut(i64) -> (Tensor, Tensor),
    backend: Backend,
    allowed: impl Fn(&str) -> bool,
) {
    let (eager, compiled) = (model(), model());
    let mut eager_opt = SGD::new(parameters(&*eager), options.clone()).unwrap();
    let (x, t) = batch(0);
    let mut step = compile_train_step(
        compiled.clone(),
        cross_entropy,
        SGD::new(parameters(&*compiled), options).unwrap(),
        (&x, &t),
        CompileOptions {
            backend,
            ..Default::default()
        },
    )
    .unwrap();
    for s in 0..4 {
        let (x, t) = batch(s);
        let expected = eager_step(&eager, &mut eager_opt, &x, &t);
        let loss = step.step(&x, &t).unwrap().item::<f32>().unwrap();
        let what = format!("{backend:?}, step {s}");
        assert!(
            (loss - expected).abs() <= 1e-5 * expected.abs(),
            "{what}: {loss} vs {expected}"
        );
        assert_same_parameters(&*compiled, &*eager, 1e-5, &what);
    }
    let report = &step.report().last;
    let unexpected: Vec<String> = report
        .fallbacks
        .iter()
        .filter(|f| !allowed(&f.op))
        .map(ToString::to_string)
        .collect();
    assert!(unexpected.is_empty(), "fallbacks: {unexpected:?}\n{report}");
}

#[test]
fn a_compiled_step_of_an_embedding_model_scatters_its_gradient_in_a_kernel_and_follows_eager() {
    for backend in [Backend::Interpreter, Backend::Jit] {
        let options = SgdOptions {
            lr: 0.1,
            ..Default::default()
        };
        // Repeated tokens in a batch: the weight gradient adds several rows into one.
        let batch = |s: i64| {
            let ids: Vec<i64> = (0..24).map(|i| (i * 7 + s * 3) % 10 / 2).collect();
            let classes: Vec<i64> = (0..8).map(|i| (i + s) % 3).collect();
            (
                Tensor::from_vec(ids, &[8, 3]).unwrap(),
                Tensor::from_vec(classes, &[8]).unwrap(),
            )
        };
        // The embedding, its gradient (a scatter-add) and the loss are kernels: only the GEMMs
        // are left to eager kernels.
        sgd_steps_follow_eager(
            || token_classifier(5),
            options,
            batch,
            backend,
            |op| matches!(op, "linear" | "matmul"),
        );
    }
}

/// A small CNN whose max pooling windows overlap (ResNet's 3x3, stride 2, padding 1):
/// `Conv2d(2, 4, 3, padding 1) -> ReLU -> MaxPool2d(3, 2, 1) -> Flatten -> Linear(64, 3)` over
/// 8x8 inputs, seeded by `seed`.
fn overlapping_pool_cnn(seed: u64) -> Arc<Sequential> {
    use tessera::nn::layers::{Conv2d, Conv2dOptions, MaxPool2d, MaxPool2dOptions, Size2};
    let conv = Conv2dOptions {
        padding: Size2::Int(1),
        ..Default::default()
    };
    let pool = MaxPool2dOptions {
        stride: Some(Size2::Int(2)),
        padding: Size2::Int(1),
        ..Default::default()
    };
    let mut model = Sequential::new();
    model.push(Box::new(Conv2d::with_options(2, 4, 3, conv).unwrap()));
    model.push(Box::new(ReLU::new()));
    model.push(Box::new(MaxPool2d::with_options(3, pool)));
    model.push(Box::new(tessera::nn::Flatten::new()));
    model.push(Box::new(Linear::new(64, 3).unwrap()));
    seeded(model, seed, 0.3)
}

#[test]
fn a_compiled_step_of_a_cnn_with_overlapping_max_pooling_reads_the_saved_indices_and_follows_eager()
{
    for backend in [Backend::Interpreter, Backend::Jit] {
        let options = SgdOptions {
            lr: 0.05,
            momentum: 0.9,
            ..Default::default()
        };
        let mut g = Generator::new(17);
        let batch = |s: i64| {
            let x = Tensor::randn_with(&[4, 2, 8, 8], DType::F32, &mut g).unwrap();
            let classes: Vec<i64> = (0..4).map(|i| (i + s) % 3).collect();
            (x, Tensor::from_vec(classes, &[4]).unwrap())
        };
        // The max pooling backward is a kernel reading the indices its forward kernel saved:
        // only the products are left to eager kernels.
        sgd_steps_follow_eager(
            || overlapping_pool_cnn(9),
            options,
            batch,
            backend,
            |op| op.starts_with("conv") || matches!(op, "linear" | "matmul"),
        );
    }
}

/// LSQ fake quantization of its input with learnable `scale` and `zero_point` (per tensor, or
/// per channel along dim 1), as `LearnableFakeQuantize` in learning mode computes it but
/// traceable (that module reads its flags on the host).
#[derive(tessera::nn::Module)]
struct Lsq {
    core: tessera::nn::ModuleCore,
    scale: tessera::nn::Parameter,
    zero_point: tessera::nn::Parameter,
    #[module(skip)]
    per_channel: bool,
    #[module(skip)]
    grad_factor: f64,
}

impl Lsq {
    fn new(channels: Option<usize>, grad_factor: f64) -> Box<Lsq> {
        let n = channels.unwrap_or(1);
        let filled =
            |v: f32| tessera::nn::Parameter::new(Tensor::from_vec(vec![v; n], &[n]).unwrap());
        Box::new(Lsq {
            core: Default::default(),
            scale: filled(0.02),
            zero_point: filled(100.0),
            per_channel: channels.is_some(),
            grad_factor,
        })
    }
}

impl tessera::nn::Forward for Lsq {
    type Output = Tensor;
    fn forward(&self, x: Tensor) -> tessera::nn::Result<Tensor> {
        use tessera::tensor::op::{
            fake_quantize_learnable_per_channel_affine, fake_quantize_learnable_per_tensor_affine,
        };
        let (s, z, f) = (
            self.scale.tensor(),
            self.zero_point.tensor(),
            self.grad_factor,
        );
        Ok(match self.per_channel {
            true => fake_quantize_learnable_per_channel_affine(&x, s, z, 1, 0, 255, f)?,
            false => fake_quantize_learnable_per_tensor_affine(&x, s, z, 0, 255, f)?,
        })
    }
}

/// A QAT classifier: `Linear(20, 16) -> Lsq (per tensor) -> Linear(16, 8) -> Lsq (per
/// channel, gradient factor 0.3) -> Linear(8, 5)`, seeded by `seed`, its quantizers learning
/// from scale 0.02 and zero point 100 (a range some activations leave).
fn learnable_qat_mlp(seed: u64) -> Arc<Sequential> {
    let mut model = Sequential::new();
    model.push(Box::new(Linear::new(20, 16).unwrap()));
    model.push(Lsq::new(None, 1.0));
    model.push(Box::new(Linear::new(16, 8).unwrap()));
    model.push(Lsq::new(Some(8), 0.3));
    model.push(Box::new(Linear::new(8, 5).unwrap()));
    let model = seeded(model, seed, 0.3);
    let _guard = tessera::no_grad();
    for (name, p) in model.named_parameters() {
        let value = match name.rsplit('.').next() {
            Some("scale") => 0.02f32,
            Some("zero_point") => 100.0,
            _ => continue,
        };
        let filled = Tensor::from_vec(vec![value; p.tensor().numel()], &p.tensor().shape());
        p.tensor().copy_(&filled.unwrap()).unwrap();
    }
    model
}

#[test]
fn a_compiled_qat_step_with_learnable_fake_quantization_follows_eager_with_no_fallback() {
    for backend in [Backend::Interpreter, Backend::Jit] {
        let options = SgdOptions {
            lr: 0.05,
            ..Default::default()
        };
        let mut g = Generator::new(23);
        let batch = |s: i64| {
            let x = Tensor::randn_with(&[6, 20], DType::F32, &mut g).unwrap();
            let classes: Vec<i64> = (0..6).map(|i| (i * 2 + s) % 5).collect();
            (x, Tensor::from_vec(classes, &[6]).unwrap())
        };
        // The fake quantizers' forward and LSQ backward (scale and zero-point gradients summed
        // in a reduction kernel) are kernels: only the products are left to eager kernels.
        sgd_steps_follow_eager(
            || learnable_qat_mlp(4),
            options,
            batch,
            backend,
            |op| matches!(op, "linear" | "matmul"),
        );
    }
}
