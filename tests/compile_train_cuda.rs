//! `tessera::compile_train_step` on a CUDA device, on the emulated driver (the PTX emulator
//! runs the generated kernels on the CPU): SGD with momentum and Adam steps equal the same
//! steps compiled for the CPU; the update kernels write the new parameters and optimizer
//! state straight into the tensors' device memory (counted: written in place, nothing copied
//! out or back for them; the parameters keep their memory); later calls replay the captured
//! CUDA graphs; a parameter swapped for a tensor in other memory makes the graph be recorded
//! again and is updated right; a step that fails (a class out of range) writes nothing.
//! (Its own test binary: the backend registry is per process.)

mod compile_train_cuda_steps;
#[path = "../runtime/cuda/tests/emulated_driver/mod.rs"]
mod emulated_driver;
#[path = "../runtime/cuda/tests/emulator/mod.rs"]
mod emulator;

use compile_train_cuda_steps::{DeviceStep, address, batch, device_steps_agree, mlp, parameters};
use emulated_driver::EmulatedDriver;
use std::sync::{Arc, OnceLock};
use tessera::cuda::{CudaBackend, CudaRunStats, init_with_driver};
use tessera::nn::ModuleExt;
use tessera::nn::optim::{Adam, AdamOptions, SGD, SgdOptions};
use tessera::tensor::{Device, Tensor};
use tessera::{CompileOptions, compile_train_step};

/// The emulated driver and the backend registered on it, once for the binary. Each test
/// uses a device of its own, so counters see no other test's work.
fn backend() -> &'static (Arc<EmulatedDriver>, Arc<CudaBackend>) {
    static BACKEND: OnceLock<(Arc<EmulatedDriver>, Arc<CudaBackend>)> = OnceLock::new();
    BACKEND.get_or_init(|| {
        let driver = Arc::new(EmulatedDriver::new(4));
        let backend = init_with_driver(driver.clone()).expect("registering the backend");
        (driver, backend)
    })
}

/// The driver's counters are global: the tests run one at a time.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

fn sgd(params: Vec<Tensor>) -> SGD {
    let options = SgdOptions {
        lr: 0.1,
        momentum: 0.9,
        weight_decay: 1e-2,
        ..Default::default()
    };
    SGD::new(params, options).unwrap()
}

fn adam(params: Vec<Tensor>) -> Adam {
    let options = AdamOptions {
        lr: 0.01,
        weight_decay: 1e-2,
        ..Default::default()
    };
    Adam::new(params, options).unwrap()
}

/// What changed between two snapshots of the step's counters.
fn delta(after: CudaRunStats, before: CudaRunStats) -> CudaRunStats {
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

const PARAMS: u64 = 4;

#[test]
fn sgd_steps_on_the_device_write_parameters_and_buffers_in_place_and_replay_their_graphs() {
    let _serial = serial();
    let (driver, _) = backend();
    for (device, graphs) in [(0, true), (1, false)] {
        let mut last = (CudaRunStats::default(), driver.counters());
        let mut check = |s: usize, step: &DeviceStep<SGD>| {
            let (stats, counters) = (step.cuda_stats(), driver.counters());
            let d = delta(stats, last.0);
            // The first step creates the momentum buffers (a program of its own); from the
            // second on, every parameter and its buffer are written in place and only the
            // loss is copied out; a warm step copies nothing from the host.
            if s > 0 {
                assert_eq!(step.report().in_place, 2 * PARAMS as usize, "step {s}");
                assert_eq!((d.outputs_in_place, d.outputs_copied), (2 * PARAMS, 1));
            }
            if s == 2 || s == 4 {
                assert_eq!(counters.copies_to_device - last.1.copies_to_device, 0);
            }
            // The second program's second call replays its graphs as recorded; the call after
            // the swap (step 3) records the range that writes the new weight again.
            if graphs && s == 2 {
                assert_eq!((d.graphs_captured, d.graphs_recaptured), (0, 0), "{d:?}");
                assert_eq!(counters.launches - last.1.launches, 0, "replayed only");
                assert!(d.graph_launches >= 1, "{d:?}");
            }
            if graphs && s == 3 {
                assert!(d.graphs_recaptured >= 1, "{d:?}");
            }
            if graphs && s == 4 {
                assert_eq!(
                    d.graphs_captured, 0,
                    "the new weight's graph replays: {d:?}"
                );
            }
            if !graphs {
                assert_eq!((d.graphs_captured, d.graph_launches), (0, 0), "{d:?}");
            }
            last = (stats, counters);
        };
        device_steps_agree(Device::Cuda(device), graphs, &sgd, 5, 2, &mut check);
    }
}

#[test]
fn adam_steps_on_the_device_write_parameters_and_moments_in_place() {
    let _serial = serial();
    backend();
    let mut last = CudaRunStats::default();
    let mut check = |s: usize, step: &DeviceStep<Adam>| {
        let d = delta(step.cuda_stats(), last);
        // Each parameter and its two moments in place; the step counts, kept on the CPU as
        // PyTorch keeps them, come back (with the loss) for the host to copy.
        assert_eq!(step.report().in_place, 3 * PARAMS as usize, "step {s}");
        assert_eq!(
            (d.outputs_in_place, d.outputs_copied),
            (3 * PARAMS, 1 + PARAMS)
        );
        if s == 1 {
            assert_eq!((d.graphs_captured, d.graphs_recaptured), (0, 0), "{d:?}");
        }
        last = step.cuda_stats();
    };
    device_steps_agree(Device::Cuda(2), true, &adam, 4, 1, &mut check);
}

#[test]
fn a_device_step_that_fails_writes_no_parameter() {
    let _serial = serial();
    backend();
    let device = Device::Cuda(3);
    let (model, twin) = (mlp(5), mlp(5));
    model.to_device(device).unwrap();
    let (x, t) = batch(6);
    let (xd, td) = (x.to_device(device).unwrap(), t.to_device(device).unwrap());
    let options = CompileOptions {
        device,
        ..CompileOptions::default()
    };
    let mut step = compile_train_step(
        model.clone(),
        ce,
        sgd(parameters(&*model)),
        (&xd, &td),
        options,
    )
    .unwrap();
    let cpu_options = CompileOptions::default();
    let mut twin_step = compile_train_step(
        twin.clone(),
        ce,
        sgd(parameters(&*twin)),
        (&x, &t),
        cpu_options,
    )
    .unwrap();
    for _ in 0..2 {
        step.step(&xd, &td).unwrap();
        twin_step.step(&x, &t).unwrap();
    }
    let values = |model: &dyn tessera::nn::Module| -> Vec<Vec<f32>> {
        parameters(model)
            .iter()
            .map(|p| p.to_vec::<f32>().unwrap())
            .collect()
    };
    let before = values(&*model);
    // Class 9 of 4: the loss's gather faults, which the device reports after its kernel ran;
    // the run checks it before the first in-place write.
    let classes: Vec<i64> = vec![0, 1, 2, 3, 9, 1, 2, 3];
    let bad = Tensor::from_vec(classes, &[8])
        .unwrap()
        .to_device(device)
        .unwrap();
    let err = step.step(&xd, &bad).unwrap_err().to_string();
    assert!(err.contains("out of bounds"), "{err}");
    assert_eq!(values(&*model), before, "no parameter written");
    // The momentum buffers are as they were too: the next step is the twin's, which never
    // saw the failed one; in the same memory.
    let addresses: Vec<u64> = parameters(&*model).iter().map(address).collect();
    step.step(&xd, &td).unwrap();
    twin_step.step(&x, &t).unwrap();
    for (i, (d, c)) in parameters(&*model)
        .iter()
        .zip(parameters(&*twin))
        .enumerate()
    {
        let d = d.to_device(Device::Cpu).unwrap();
        tessera_testkit::assert_close(&d, &c, 1e-5, 1e-5, &format!("parameter {i}"));
    }
    let after: Vec<u64> = parameters(&*model).iter().map(address).collect();
    assert_eq!(after, addresses);
}

fn ce(out: &Tensor, target: &Tensor) -> tessera::nn::Result<Tensor> {
    Ok(tessera::functional::cross_entropy(
        out,
        target,
        Default::default(),
    )?)
}
