//! Compiled training steps on a CUDA device against the same steps compiled for the CPU: an
//! MLP classifier (cross entropy) stepped by one optimizer on each, from the same weights and
//! batch; each step's loss and parameters must agree, the device parameters must keep their
//! memory (updated in place), and a parameter swapped for a new tensor mid-run (other memory)
//! must be updated right too. Shared by the emulated test and the GPU one.

use std::sync::Arc;
use tessera::cuda::{CudaRunStats, CudaStorage};
use tessera::functional as F;
use tessera::nn::layers::{Linear, ReLU};
use tessera::nn::optim::{Adam, AdamOptions, Optimizer, SGD, SgdOptions};
use tessera::nn::{Module, ModuleExt, Sequential};
use tessera::tensor::{DType, Device, Generator, Tensor};
use tessera::{CompileOptions, CompiledTrainStep, compile_train_step};
use tessera_testkit::assert_close;

/// `Linear(6, 16) -> ReLU -> Linear(16, 4)`, every parameter drawn from `N(0, 0.3^2)` by a
/// generator seeded by `seed`.
pub fn mlp(seed: u64) -> Arc<Sequential> {
    let mut model = Sequential::new();
    model.push(Box::new(Linear::new(6, 16).unwrap()));
    model.push(Box::new(ReLU::new()));
    model.push(Box::new(Linear::new(16, 4).unwrap()));
    let mut g = Generator::new(seed);
    let _guard = tessera::no_grad();
    for p in parameters(&model) {
        let init = Tensor::randn_with(&p.shape(), DType::F32, &mut g).unwrap();
        p.copy_(&init.mul_scalar(0.3).unwrap()).unwrap();
    }
    Arc::new(model)
}

pub fn parameters(model: &dyn Module) -> Vec<Tensor> {
    model
        .named_parameters()
        .into_iter()
        .map(|(_, p)| p.tensor().clone())
        .collect()
}

fn cross_entropy(out: &Tensor, target: &Tensor) -> tessera::nn::Result<Tensor> {
    Ok(F::cross_entropy(out, target, Default::default())?)
}

/// Eight rows of 6 features and their classes (of 4).
pub fn batch(seed: u64) -> (Tensor, Tensor) {
    let x = Tensor::randn_with(&[8, 6], DType::F32, &mut Generator::new(seed)).unwrap();
    let classes: Vec<i64> = (0..8).map(|i| (i * 3 + 1) % 4).collect();
    (x, Tensor::from_vec(classes, &[8]).unwrap())
}

/// The device address of `t`'s memory.
pub fn address(t: &Tensor) -> u64 {
    t.with_device_memory(|m, layout| {
        let s = (m as &dyn std::any::Any)
            .downcast_ref::<CudaStorage>()
            .expect("CUDA memory");
        s.ptr().address() + (layout.offset * m.dtype().size_in_bytes()) as u64
    })
    .expect("a device tensor")
}

fn cpu(t: &Tensor) -> Tensor {
    t.to_device(Device::Cpu).unwrap()
}

/// The device model's step, for `check` to look at after each step.
pub type DeviceStep<O> = CompiledTrainStep<Sequential, O>;

/// `steps` steps of the MLP compiled for `device` (CUDA graphs on when `graphs`) against the
/// same steps compiled for the CPU, the optimizers made by `make`; after step `swap_at`, the
/// first weight is replaced on both by a new tensor of half its values. After each step the
/// losses and parameters agree within 1e-5, every device parameter is where it was before
/// the step (the one swapped in: where it was put), and `check(step, device_step)` runs.
pub fn device_steps_agree<O: Optimizer>(
    device: Device,
    graphs: bool,
    make: &dyn Fn(Vec<Tensor>) -> O,
    steps: usize,
    swap_at: usize,
    check: &mut dyn FnMut(usize, &DeviceStep<O>),
) {
    let (on_cpu, on_device) = (mlp(11), mlp(11));
    on_device.to_device(device).unwrap();
    let (x, t) = batch(12);
    let (xd, td) = (x.to_device(device).unwrap(), t.to_device(device).unwrap());
    let mut cpu_step = compile_train_step(
        on_cpu.clone(),
        cross_entropy,
        make(parameters(&*on_cpu)),
        (&x, &t),
        CompileOptions::default(),
    )
    .unwrap();
    let options = CompileOptions {
        device,
        cuda_graphs: graphs,
        ..CompileOptions::default()
    };
    let mut device_step = compile_train_step(
        on_device.clone(),
        cross_entropy,
        make(parameters(&*on_device)),
        (&xd, &td),
        options,
    )
    .unwrap();
    for s in 0..steps {
        let before: Vec<u64> = parameters(&*on_device).iter().map(address).collect();
        let want = cpu_step.step(&x, &t).unwrap();
        let got = device_step.step(&xd, &td).unwrap();
        let what = format!("step {s} on {device}");
        assert_eq!(got.device(), device, "{what}");
        assert_close(&cpu(&got), &want, 1e-5, 1e-5, &format!("{what}: loss"));
        let pairs = parameters(&*on_device)
            .into_iter()
            .zip(parameters(&*on_cpu));
        for (i, (d, c)) in pairs.enumerate() {
            assert_close(&cpu(&d), &c, 1e-5, 1e-5, &format!("{what}: parameter {i}"));
            assert_eq!(address(&d), before[i], "{what}: parameter {i} moved");
        }
        check(s, &device_step);
        if s == swap_at {
            let _guard = tessera::no_grad();
            for model in [&on_cpu, &on_device] {
                let p = &parameters(&**model)[0];
                p.set_data(&p.mul_scalar(0.5).unwrap());
            }
        }
    }
}

/// The counters a device step must show after each step: from step `from` on, `per_param`
/// outputs per parameter written in place (in the report and in the counters) and `copied`
/// outputs copied out; with CUDA graphs, the second call of a program records nothing, and
/// the step after a swap records a graph again.
pub struct InPlaceCounts {
    pub per_param: usize,
    pub copied: u64,
    pub from: usize,
    pub graphs: bool,
    /// The step after which a parameter is swapped.
    pub swap_at: usize,
    pub last: CudaRunStats,
}

/// The parameters of [`mlp`].
pub const PARAMS: usize = 4;

impl InPlaceCounts {
    /// Checks step `s`; what changed in the counters since the last step.
    pub fn check<O: Optimizer>(&mut self, s: usize, step: &DeviceStep<O>) -> CudaRunStats {
        let stats = step.cuda_stats();
        let d = delta(stats, self.last);
        self.last = stats;
        if s >= self.from {
            let in_place = self.per_param * PARAMS;
            assert_eq!(step.report().in_place, in_place, "step {s}");
            assert_eq!(d.outputs_in_place, in_place as u64, "step {s}: {d:?}");
            assert_eq!(d.outputs_copied, self.copied, "step {s}: {d:?}");
        }
        if !self.graphs {
            assert_eq!((d.graphs_captured, d.graph_launches), (0, 0), "{d:?}");
        } else if s == self.from + 1 && s <= self.swap_at {
            assert_eq!(
                (d.graphs_captured, d.graphs_recaptured),
                (0, 0),
                "step {s}: {d:?}"
            );
            assert!(d.graph_launches >= 1, "step {s}: {d:?}");
        } else if s == self.swap_at + 1 {
            assert!(d.graphs_recaptured >= 1, "step {s}: {d:?}");
        } else if s == self.swap_at + 2 {
            assert_eq!(
                d.graphs_captured, 0,
                "the new weight's graph replays: {d:?}"
            );
        }
        d
    }
}

/// What changed between two snapshots of the counters.
pub fn delta(after: CudaRunStats, before: CudaRunStats) -> CudaRunStats {
    CudaRunStats {
        calls: after.calls - before.calls,
        kernel_launches: after.kernel_launches - before.kernel_launches,
        graphs_captured: after.graphs_captured - before.graphs_captured,
        graph_launches: after.graph_launches - before.graph_launches,
        graphs_recaptured: after.graphs_recaptured - before.graphs_recaptured,
        host_steps: after.host_steps - before.host_steps,
        outputs_in_place: after.outputs_in_place - before.outputs_in_place,
        outputs_copied: after.outputs_copied - before.outputs_copied,
    }
}

/// SGD with momentum and weight decay.
pub fn sgd(params: Vec<Tensor>) -> SGD {
    let options = SgdOptions {
        lr: 0.1,
        momentum: 0.9,
        weight_decay: 1e-2,
        ..Default::default()
    };
    SGD::new(params, options).unwrap()
}

/// Adam with weight decay.
pub fn adam(params: Vec<Tensor>) -> Adam {
    let options = AdamOptions {
        lr: 0.01,
        weight_decay: 1e-2,
        ..Default::default()
    };
    Adam::new(params, options).unwrap()
}

/// SGD steps (the first makes the momentum buffers: a program of its own; from the second
/// on each parameter and its buffer are written in place, only the loss copied out) and
/// Adam steps (each parameter and its two moments in place; the step counts, kept on the CPU
/// as PyTorch keeps them, come back with the loss), on `device`; `more(step, counters)` adds
/// checks of its own after each SGD step.
pub fn sgd_and_adam_update_in_place(
    device: Device,
    graphs: bool,
    more: &mut dyn FnMut(usize, CudaRunStats),
) {
    let mut counts = InPlaceCounts {
        per_param: 2,
        copied: 1,
        from: 1,
        graphs,
        swap_at: 2,
        last: CudaRunStats::default(),
    };
    let mut check = |s: usize, step: &DeviceStep<SGD>| more(s, counts.check(s, step));
    device_steps_agree(device, graphs, &sgd, 5, 2, &mut check);
    let mut counts = InPlaceCounts {
        per_param: 3,
        copied: 1 + PARAMS as u64,
        from: 0,
        graphs,
        swap_at: 2,
        last: CudaRunStats::default(),
    };
    let mut check = |s: usize, step: &DeviceStep<Adam>| {
        counts.check(s, step);
    };
    device_steps_agree(device, graphs, &adam, 4, 2, &mut check);
}
