//! `tessera::compile_train_step` on a CUDA device, on the emulated driver (the PTX emulator
//! runs the generated kernels on the CPU): SGD with momentum and Adam steps equal the same
//! steps compiled for the CPU; the update kernels write the new parameters and optimizer
//! state straight into the tensors' device memory (counted: written in place, nothing copied
//! out or back for them; the parameters keep their memory); later calls replay the captured
//! CUDA graphs; a parameter swapped for a tensor in other memory makes the graph be recorded
//! again and is updated right; a step that fails (a class out of range) writes nothing. A
//! `CudaProgram` writes in place only targets that fit (packed CUDA tensors of its device,
//! the inputs they update or new ones) and never one tensor for two outputs, and equals its
//! copying run bit for bit. Eager Adam on the device makes its moments there, as
//! `torch.zeros_like` does. (Its own test binary: the backend registry is per process.)

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
use tessera::cuda::{CudaBackend, CudaProgram, init_with_driver};
use tessera::fx::Graph;
use tessera::kernel::Interpreter;
use tessera::nn::optim::Optimizer;
use tessera::nn::{Call, ModuleExt};
use tessera::tensor::op::{BinaryOp, OptimOp, ReduceKind, ReduceOp};
use tessera::tensor::{DType, Op, TensorMeta};
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

/// `s = sum(p * g)` (reading `p` before its update, as a forward does) and SGD with
/// momentum's new `p` and `b`, over `[37]` vectors; inputs `lr, p, g, b`.
fn sgd_program() -> (tessera::kernel::Program, Vec<Tensor>) {
    let sgd = Op::Optim(OptimOp::SgdUpdate {
        momentum: 0.9,
        dampening: 0.0,
        weight_decay: 1e-3,
        nesterov: false,
        maximize: false,
    });
    let mut g = Graph::new();
    let lr = g.placeholder("lr", TensorMeta::new([], DType::F64));
    let meta = TensorMeta::new([37], DType::F32);
    let [p, grad, b] = ["p", "g", "b"].map(|n| g.placeholder(n, meta.clone()));
    let pg = g
        .call_function(Op::Binary(BinaryOp::Mul), &[&p, &grad])
        .unwrap();
    let sum = Op::Reduce(ReduceOp {
        kind: ReduceKind::Sum,
        dims: vec![0],
        keepdim: false,
    });
    let s = g.call_function(sum, &[&pg]).unwrap();
    let update = g.call_function(sgd, &[&p, &grad, &b, &lr]).unwrap();
    let (p_new, b_new) = (
        g.getitem(&update, 0).unwrap(),
        g.getitem(&update, 1).unwrap(),
    );
    g.output(&[&s, &p_new, &b_new]).unwrap();
    let program = tessera::kernel::lower(&g, &[]).unwrap();
    let vector = |k: usize| {
        let v: Vec<f32> = (0..37).map(|i| ((i * 5 + k) as f32 * 0.37).sin()).collect();
        Tensor::from_vec(v, &[37]).unwrap()
    };
    let inputs = vec![Tensor::scalar(0.05f64), vector(0), vector(1), vector(2)];
    (program, inputs)
}

fn host_values(t: &Tensor) -> Vec<f32> {
    t.to_device(Device::Cpu).unwrap().to_vec::<f32>().unwrap()
}

#[test]
fn a_cuda_program_writes_in_place_only_the_targets_that_fit() {
    let _serial = serial();
    let (driver, backend) = backend();
    let device = Device::Cuda(2);
    let (program, host) = sgd_program();
    let plan = tessera::kernel::MemoryPlan::new(&program);
    let no_attribute = |name: &str| Err(format!("no attribute {name}"));
    let prepared = CudaProgram::new(backend, 2, &program, &plan, &no_attribute, true).unwrap();
    let on = |ts: &[Tensor]| -> Vec<Tensor> {
        ts.iter().map(|t| t.to_device(device).unwrap()).collect()
    };
    let want: Vec<Vec<f32>> = prepared
        .run(&on(&host), &Interpreter)
        .unwrap()
        .iter()
        .map(host_values)
        .collect();
    let zeros = || {
        Tensor::zeros(&[37], DType::F32)
            .unwrap()
            .to_device(device)
            .unwrap()
    };
    // Each case: the targets of outputs 1 and 2 (given the inputs), and which of them are
    // written in place: packed CUDA tensors of the device, the inputs they update or not.
    // A case may replace inputs.
    type Targets<'a> = dyn Fn(&mut [Tensor]) -> [Tensor; 2] + 'a;
    let strided = || {
        let t = Tensor::zeros(&[37, 2], DType::F32)
            .unwrap()
            .to_device(device)
            .unwrap();
        t.select(1, 0).unwrap()
    };
    let cases: [(&str, &Targets<'_>, [bool; 2]); 6] = [
        (
            "the inputs",
            &|i| [i[1].clone(), i[3].clone()],
            [true, true],
        ),
        ("new tensors", &|_| [zeros(), zeros()], [true, true]),
        // One kernel writes both: a target that does not fit keeps both out of place.
        (
            "a CPU tensor",
            &|i| [Tensor::zeros(&[37], DType::F32).unwrap(), i[3].clone()],
            [false, false],
        ),
        (
            "a strided view",
            &|i| [i[1].clone(), strided()],
            [false, false],
        ),
        // `p` in the second half of a block whose first half is its target: not where the
        // update kernel would read it.
        (
            "another part of an input's memory",
            &|i| {
                let block = Tensor::zeros(&[74], DType::F32)
                    .unwrap()
                    .to_device(device)
                    .unwrap();
                let p = block.narrow(0, 37, 37).unwrap();
                p.copy_(&i[1]).unwrap();
                i[1] = p;
                [block.narrow(0, 0, 37).unwrap(), i[3].clone()]
            },
            [false, false],
        ),
        // Two outputs never write one tensor; the second, returned, is written by the
        // kernel writing the first, which then writes neither in place (nothing that could
        // fail, on the CPU an allocation, may follow an in-place write).
        (
            "one tensor twice",
            &|_| {
                let t = zeros();
                [t.clone(), t]
            },
            [false, false],
        ),
    ];
    for (what, targets, in_place) in cases {
        let mut inputs = on(&host);
        let [p, b] = targets(&mut inputs);
        let before = [host_values(&p), host_values(&b)];
        let (stats, copies) = (prepared.stats(), driver.counters().copies_on_device);
        let out = prepared
            .run_updating(
                &inputs,
                &[None, Some(p.clone()), Some(b.clone())],
                &Interpreter,
            )
            .unwrap();
        // Device copies: the four inputs in and the three outputs out, less the inputs read
        // where they are and the outputs written in place.
        let bound_inputs = if what == "the inputs" { 2 } else { 0 };
        let in_place_outputs = in_place.iter().filter(|b| **b).count() as u64;
        assert_eq!(
            driver.counters().copies_on_device - copies,
            (4 - bound_inputs) + (3 - in_place_outputs),
            "{what}"
        );
        assert_eq!(
            host_values(out[0].as_ref().unwrap()),
            want[0],
            "{what}: the sum"
        );
        let written = (prepared.stats().outputs_in_place - stats.outputs_in_place) as usize;
        assert_eq!(written, in_place.iter().filter(|b| **b).count(), "{what}");
        for (k, target) in [&p, &b].into_iter().enumerate() {
            let out = &out[k + 1];
            assert_eq!(out.is_none(), in_place[k], "{what}: output {}", k + 1);
            match out {
                None => assert_eq!(host_values(target), want[k + 1], "{what}: {k}"),
                Some(value) => {
                    assert_eq!(host_values(value), want[k + 1], "{what}: {k}");
                    assert_eq!(host_values(target), before[k], "{what}: {k} untouched");
                }
            }
        }
        let untouched = if what == "the inputs" { [2] } else { [1] };
        for i in untouched {
            assert_eq!(
                host_values(&inputs[i]),
                host_values(&host[i]),
                "{what}: input {i}"
            );
        }
    }
    let err = prepared
        .run_updating(&on(&host), &[None], &Interpreter)
        .unwrap_err();
    assert!(err.to_string().contains("1 update targets"), "{err}");
}

#[test]
fn eager_adam_on_the_device_makes_its_moments_there_and_equals_the_cpu() {
    let _serial = serial();
    backend();
    let device = Device::Cuda(3);
    let (on_cpu, on_device) = (mlp(8), mlp(8));
    on_device.to_device(device).unwrap();
    let mut cpu_opt = compile_train_cuda_steps::adam(parameters(&*on_cpu));
    let mut device_opt = compile_train_cuda_steps::adam(parameters(&*on_device));
    let (x, t) = batch(9);
    let (xd, td) = (x.to_device(device).unwrap(), t.to_device(device).unwrap());
    for s in 0..2 {
        for (model, opt, x, t) in [
            (&on_cpu, &mut cpu_opt, &x, &t),
            (&on_device, &mut device_opt, &xd, &td),
        ] {
            opt.zero_grad(true);
            ce(&model.call(x.clone()).unwrap(), t)
                .unwrap()
                .backward()
                .unwrap();
            opt.step().unwrap();
        }
        for (i, (d, c)) in parameters(&*on_device)
            .iter()
            .zip(parameters(&*on_cpu))
            .enumerate()
        {
            let d = d.to_device(Device::Cpu).unwrap();
            tessera_testkit::assert_close(&d, &c, 1e-5, 1e-5, &format!("step {s}: {i}"));
        }
    }
    // The moments on the parameters' device, the step counts on the CPU (as PyTorch's).
    let state = format!("{:?}", device_opt.state_dict());
    let tensors: Vec<&str> = state.split("Tensor(shape=").skip(1).collect();
    assert_eq!(tensors.len(), 3 * 4, "{state}");
    for t in tensors {
        let device = if t.starts_with("[]") {
            "device=cpu"
        } else {
            "device=cuda:3"
        };
        assert!(t.contains(device), "{t}");
    }
}
