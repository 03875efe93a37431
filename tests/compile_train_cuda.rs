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

use compile_train_cuda_steps::{
    address, batch, mlp, parameters, sgd, sgd_and_adam_update_in_place,
};
use emulated_driver::EmulatedDriver;
use std::sync::{Arc, OnceLock};
use tessera::cuda::{CudaBackend, init_with_driver};
use tessera::nn::ModuleExt;
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

#[test]
fn sgd_and_adam_steps_on_the_device_update_in_place_and_replay_their_graphs() {
    let _serial = serial();
    let (driver, _) = backend();
    for (device, graphs) in [(0, true), (1, false)] {
        let mut last = driver.counters();
        // A warm step copies nothing from the host (no value is written back), and the
        // second call of a program launches nothing outside its replayed graphs.
        let mut more = |s: usize, _| {
            let counters = driver.counters();
            if s == 2 || s == 4 {
                assert_eq!(counters.copies_to_device - last.copies_to_device, 0);
            }
            if graphs && s == 2 {
                assert_eq!(counters.launches - last.launches, 0, "replayed only");
            }
            last = counters;
        };
        sgd_and_adam_update_in_place(Device::Cuda(device), graphs, &mut more);
    }
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
