//! `tessera::compile` for a CUDA device, on the emulated driver (the PTX emulator runs the
//! generated kernels on the CPU, so this runs on every machine): an elementwise+reduction
//! chain, an MLP and the small CNN give the CPU eager results with their linear layers and
//! convolutions as generated GEMM/convolution kernels on the device (no host step); the
//! second call replays the captured CUDA graph (driver counters) and the arena is allocated
//! once (allocator counters); CUDA graphs can be turned off; the updates of several
//! parameters are one launch; a CPU input is refused with a typed error. (Its own test binary: the backend
//! registry is per process.)

#[path = "../runtime/cuda/tests/emulated_driver/mod.rs"]
mod emulated_driver;
#[path = "../runtime/cuda/tests/emulator/mod.rs"]
mod emulator;

use emulated_driver::EmulatedDriver;
use std::sync::{Arc, OnceLock};
use tessera::cuda::{CudaBackend, init_with_driver};
use tessera::fx::trace::{LeafPolicy, trace};
use tessera::fx::{Graph, GraphModule};
use tessera::nn::models::SmallCnn;
use tessera::nn::{Call, Linear, ModuleExt, ReLU, Sequential};
use tessera::tensor::op::{BinaryOp, ReduceKind, ReduceOp, UnaryOp};
use tessera::tensor::{DType, Device, Op, Tensor, TensorMeta};
use tessera::{CompileError, CompileOptions, compile};
use tessera_testkit::{assert_close, update_cases};

/// The emulated driver and the backend registered on it, once for the binary. Each test
/// uses a device of its own, so counters see no other test's work.
fn backend() -> &'static (Arc<EmulatedDriver>, Arc<CudaBackend>) {
    static BACKEND: OnceLock<(Arc<EmulatedDriver>, Arc<CudaBackend>)> = OnceLock::new();
    BACKEND.get_or_init(|| {
        let driver = Arc::new(EmulatedDriver::new(7));
        let backend = init_with_driver(driver.clone()).expect("registering the backend");
        (driver, backend)
    })
}

/// The driver's counters are global: the tests run one at a time.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

fn options(device: usize, graphs: bool) -> CompileOptions {
    backend();
    CompileOptions {
        device: Device::Cuda(device),
        cuda_graphs: graphs,
        ..CompileOptions::default()
    }
}

/// `y = sum(exp(x * w) - relu(x), dim 1)`: an elementwise chain and a reduction.
fn chain() -> GraphModule {
    let mut g = Graph::new();
    let x = g.placeholder("x", TensorMeta::new([5, 37], DType::F32));
    let w = g.placeholder("w", TensorMeta::new([37], DType::F32));
    let m = g
        .call_function(Op::Binary(BinaryOp::Mul), &[&x, &w])
        .unwrap();
    let e = g.call_function(Op::Unary(UnaryOp::Exp), &[&m]).unwrap();
    let r = g.call_function(Op::Unary(UnaryOp::Relu), &[&x]).unwrap();
    let d = g
        .call_function(Op::Binary(BinaryOp::Sub), &[&e, &r])
        .unwrap();
    let s = g
        .call_function(
            Op::Reduce(ReduceOp {
                kind: ReduceKind::Sum,
                dims: vec![1],
                keepdim: false,
            }),
            &[&d],
        )
        .unwrap();
    g.output(&[&s, &d]).unwrap();
    GraphModule::from_graph(g)
}

fn chain_inputs(seed: f32) -> Vec<Tensor> {
    let x: Vec<f32> = (0..5 * 37)
        .map(|i| ((i as f32 * 0.37 + seed).sin()) * 2.0)
        .collect();
    let w: Vec<f32> = (0..37).map(|i| (i as f32 * 0.11 - seed).cos()).collect();
    vec![
        Tensor::from_vec(x, &[5, 37]).unwrap(),
        Tensor::from_vec(w, &[37]).unwrap(),
    ]
}

fn on(device: usize, inputs: &[Tensor]) -> Vec<Tensor> {
    backend();
    inputs
        .iter()
        .map(|t| t.to_device(Device::Cuda(device)).unwrap())
        .collect()
}

fn cpu(t: &Tensor) -> Tensor {
    t.to_device(Device::Cpu).unwrap()
}

#[test]
fn elementwise_and_reduction_chain_runs_on_the_device_and_replays_its_cuda_graph() {
    let _serial = serial();
    let (driver, backend) = backend();
    let gm = chain();
    let reference = compile(&gm, &chain_inputs(0.0), CompileOptions::default()).unwrap();
    let compiled = compile(&gm, &on(0, &chain_inputs(0.0)), options(0, true)).unwrap();
    let report = compiled.report();
    assert!(report.host_steps.is_empty(), "{report}");
    assert!(report.device_kernels >= 2, "{report}");
    let allocations_before = backend.memory_stats(0).unwrap().driver_allocations;
    let before = driver.counters();
    for (call, seed) in [0.0f32, 1.5, -0.7].into_iter().enumerate() {
        let inputs = chain_inputs(seed);
        let got = compiled.run(&on(0, &inputs)).unwrap();
        let want = reference.run(&inputs).unwrap();
        assert_eq!(got[0].device(), Device::Cuda(0));
        assert_close(&cpu(&got[0]), &want[0], 1e-5, 1e-5, "sum over dim 1");
        assert_close(&cpu(&got[1]), &want[1], 0.0, 0.0, "exp(x * w) - relu(x)");
        let stats = compiled.cuda_stats();
        assert_eq!(stats.calls, call as u64 + 1);
        assert_eq!(stats.graphs_captured, 1, "captured on the first call only");
        assert_eq!(stats.graph_launches, call as u64 + 1);
    }
    let after = driver.counters();
    // The kernels were recorded once, and never launched one by one.
    assert_eq!(after.launches - before.launches, 0, "{after:?}");
    assert_eq!(after.graphs_instantiated - before.graphs_instantiated, 1);
    assert_eq!(after.graph_launches - before.graph_launches, 3);
    assert_eq!(
        after.replayed_launches - before.replayed_launches,
        3 * report.device_kernels as u64
    );
    // Warm calls allocate nothing from the driver: the arena was allocated when compiling,
    // and the inputs' and outputs' blocks come back from the caching allocator.
    let allocations_after = backend.memory_stats(0).unwrap().driver_allocations;
    assert!(
        allocations_after - allocations_before <= 4,
        "{allocations_before} -> {allocations_after}"
    );
    let warm = backend.memory_stats(0).unwrap().driver_allocations;
    compiled.run(&on(0, &chain_inputs(2.0))).unwrap();
    assert_eq!(backend.memory_stats(0).unwrap().driver_allocations, warm);
}

#[test]
fn without_cuda_graphs_every_call_launches_its_kernels() {
    let _serial = serial();
    let (driver, _) = backend();
    let gm = chain();
    let compiled = compile(&gm, &on(1, &chain_inputs(0.0)), options(1, false)).unwrap();
    let kernels = compiled.report().device_kernels as u64;
    let before = driver.counters();
    let reference = compile(&gm, &chain_inputs(0.3), CompileOptions::default()).unwrap();
    for _ in 0..2 {
        let got = compiled.run(&on(1, &chain_inputs(0.3))).unwrap();
        let want = reference.run(&chain_inputs(0.3)).unwrap();
        assert_close(&cpu(&got[0]), &want[0], 1e-5, 1e-5, "sum over dim 1");
    }
    let after = driver.counters();
    assert_eq!(after.launches - before.launches, 2 * kernels);
    assert_eq!(after.graph_launches, before.graph_launches);
    let stats = compiled.cuda_stats();
    assert_eq!((stats.graphs_captured, stats.graph_launches), (0, 0));
    assert_eq!(stats.kernel_launches, 2 * kernels);
}

/// SGD with momentum over parameters of 5, 33 x 17 and 1031 elements (the learning rate,
/// then parameter, gradient and buffer each): the new parameters and buffers.
fn sgd_updates() -> (GraphModule, Vec<Tensor>) {
    let shapes: [&[usize]; 3] = [&[5], &[33, 17], &[1031]];
    let (g, inputs) = update_cases::updates(&update_cases::sgd_momentum(), &shapes, 2);
    (GraphModule::from_graph(g), inputs)
}

#[test]
fn the_updates_of_several_parameters_are_one_launch_on_the_device() {
    let _serial = serial();
    let (driver, _) = backend();
    let (gm, inputs) = sgd_updates();
    let reference = compile(&gm, &inputs, CompileOptions::default()).unwrap();
    let compiled = compile(&gm, &on(6, &inputs), options(6, false)).unwrap();
    let report = compiled.report();
    assert_eq!(report.launch_groups, vec![3], "{report}");
    assert_eq!(report.device_kernels, 1, "{report}");
    let before = driver.counters();
    let got = compiled.run(&on(6, &inputs)).unwrap();
    let want = reference.run(&inputs).unwrap();
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_close(&cpu(g), w, 0.0, 0.0, &format!("output {i}"));
    }
    assert_eq!(driver.counters().launches - before.launches, 1);
}

/// Runs `compiled` (a traced `model`) on three fresh inputs of `shape` on device `device`,
/// each against the eager CPU model within `tolerance`, and checks that the first call
/// captured the CUDA graph and every call replayed it: no kernel launched one by one, no host
/// step, every device kernel replayed on each call.
fn runs_on_the_device_and_replays(
    what: &str,
    model: &dyn Fn(Tensor) -> Tensor,
    compiled: &tessera::CompiledModule,
    device: usize,
    shape: &[usize],
    tolerance: f64,
) {
    let (driver, _) = backend();
    let report = compiled.report();
    let before = driver.counters();
    for call in 1..=3u64 {
        let x = Tensor::randn(shape, DType::F32).unwrap();
        let want = model(x.clone());
        let got = compiled.run(&on(device, std::slice::from_ref(&x))).unwrap();
        assert_eq!(got[0].device(), Device::Cuda(device));
        assert_close(&cpu(&got[0]), &want, tolerance, tolerance, what);
        let stats = compiled.cuda_stats();
        assert_eq!(stats.calls, call, "{what}");
        assert_eq!(
            stats.graphs_captured, 1,
            "{what}: captured on the first call only"
        );
        assert_eq!(stats.graph_launches, call, "{what}");
        assert_eq!(stats.host_steps, 0, "{what}");
    }
    let after = driver.counters();
    assert_eq!(after.launches - before.launches, 0, "{what}: {after:?}");
    assert_eq!(after.graph_launches - before.graph_launches, 3, "{what}");
    assert_eq!(
        after.replayed_launches - before.replayed_launches,
        3 * report.device_kernels as u64,
        "{what}"
    );
}

#[test]
fn mlp_runs_its_linear_layers_as_device_gemm_kernels_and_replays_its_cuda_graph() {
    let _serial = serial();
    let mut seq = Sequential::new();
    seq.push(Box::new(Linear::new(12, 16).unwrap()));
    seq.push(Box::new(ReLU::new()));
    seq.push(Box::new(Linear::new(16, 5).unwrap()));
    let model = Arc::new(seq);
    model.train(false);
    let x = Tensor::randn(&[3, 12], DType::F32).unwrap();
    let gm = GraphModule::new(
        model.clone(),
        trace(&*model, &x, LeafPolicy::default()).unwrap(),
    );
    let compiled = compile(&gm, &on(2, std::slice::from_ref(&x)), options(2, true)).unwrap();
    let report = compiled.report();
    assert!(report.host_steps.is_empty(), "{report}");
    assert_eq!(
        report.device_products, 2,
        "one GEMM kernel per linear layer\n{report}"
    );
    assert!(
        report.to_string().contains("(2 GEMM/convolution)"),
        "{report}"
    );
    let eager = |x: Tensor| model.call(x).unwrap();
    runs_on_the_device_and_replays("mlp", &eager, &compiled, 2, &[3, 12], 1e-5);
}

#[test]
fn small_cnn_runs_its_convolutions_and_linear_layer_on_the_device_and_matches_cpu_eager() {
    let _serial = serial();
    let model = Arc::new(SmallCnn::new().unwrap());
    model.train(false);
    let x = Tensor::randn(&[2, 3, 8, 8], DType::F32).unwrap();
    let gm = GraphModule::new(
        model.clone(),
        trace(&*model, &x, LeafPolicy::default()).unwrap(),
    );
    let compiled = compile(&gm, &on(3, std::slice::from_ref(&x)), options(3, true)).unwrap();
    let report = compiled.report();
    assert!(report.host_steps.is_empty(), "{report}");
    assert_eq!(
        report.device_products, 3,
        "two convolutions and the linear layer\n{report}"
    );
    let eager = |x: Tensor| model.call(x).unwrap();
    runs_on_the_device_and_replays("small cnn", &eager, &compiled, 3, &[2, 3, 8, 8], 1e-4);
}

/// `e = exp(x @ w)` (a batched matmul: no kernel yet, an eager call), `s = sum(e, dim 2)`,
/// and `h = gelu(b)` on a bf16 input: a kernel that rounds to bf16, which the PTX renderer
/// refuses below sm_80, so on an sm_75 device the CPU runs it.
fn host_step_graph() -> GraphModule {
    let mut g = Graph::new();
    let x = g.placeholder("x", TensorMeta::new([2, 4, 9], DType::F32));
    let w = g.placeholder("w", TensorMeta::new([2, 9, 6], DType::F32));
    let b = g.placeholder("b", TensorMeta::new([3, 5], DType::BF16));
    let m = g.call_function(Op::Matmul, &[&x, &w]).unwrap();
    let e = g.call_function(Op::Unary(UnaryOp::Exp), &[&m]).unwrap();
    let s = g
        .call_function(
            Op::Reduce(ReduceOp {
                kind: ReduceKind::Sum,
                dims: vec![2],
                keepdim: false,
            }),
            &[&e],
        )
        .unwrap();
    let h = g
        .call_function(Op::Unary(UnaryOp::Gelu { tanh: false }), &[&b])
        .unwrap();
    g.output(&[&e, &s, &h]).unwrap();
    GraphModule::from_graph(g)
}

fn host_step_inputs(seed: usize) -> Vec<Tensor> {
    let scaled = |shape: &[usize]| {
        let t = Tensor::randn(shape, DType::F32).unwrap();
        t.mul_scalar_(0.3 + seed as f64 * 0.1).unwrap();
        t
    };
    vec![
        scaled(&[2, 4, 9]),
        scaled(&[2, 9, 6]),
        scaled(&[3, 5]).to_dtype(DType::BF16).unwrap(),
    ]
}

#[test]
fn steps_the_device_does_not_generate_run_on_the_host_between_replayed_graphs() {
    let _serial = serial();
    let (driver, _) = backend();
    driver.set_compute_capability(5, (7, 5));
    let gm = host_step_graph();
    let compiled = compile(&gm, &on(5, &host_step_inputs(0)), options(5, true)).unwrap();
    let report = compiled.report();
    assert_eq!(report.host_steps.len(), 2, "{report}");
    let reasons: Vec<&str> = report
        .host_steps
        .iter()
        .map(|h| h.reason.as_str())
        .collect();
    assert!(
        reasons
            .iter()
            .any(|r| r.contains("(matmul) runs an eager kernel") && r.contains("2-D matmul")),
        "{report}"
    );
    assert!(
        reasons
            .iter()
            .any(|r| r.contains("not rendered to PTX") && r.contains("bf16 below sm_80")),
        "{report}"
    );
    assert!(report.device_kernels >= 1, "{report}");
    let reference = compile(&gm, &host_step_inputs(0), CompileOptions::default()).unwrap();
    for call in 1..=2u64 {
        let x = host_step_inputs(call as usize);
        let got = compiled.run(&on(5, &x)).unwrap();
        let want = reference.run(&x).unwrap();
        assert_close(&cpu(&got[0]), &want[0], 1e-5, 1e-5, "exp(x @ w)");
        assert_close(&cpu(&got[1]), &want[1], 1e-5, 1e-5, "sum");
        assert_close(&cpu(&got[2]), &want[2], 0.0, 0.0, "gelu in bf16");
        let stats = compiled.cuda_stats();
        assert_eq!(stats.host_steps, call * 2);
        assert!(stats.graph_launches >= call, "{stats:?}");
    }
}

#[test]
fn a_cpu_input_is_refused_with_a_typed_error() {
    let _serial = serial();
    let gm = chain();
    let compiled = compile(&gm, &on(4, &chain_inputs(0.0)), options(4, true)).unwrap();
    let mut inputs = on(4, &chain_inputs(0.0));
    inputs[1] = chain_inputs(0.0)[1].clone();
    match compiled.run(&inputs) {
        Err(CompileError::InputDevice {
            input,
            expected,
            found,
        }) => {
            assert!(input.starts_with('1'), "{input}");
            assert_eq!((expected, found), (Device::Cuda(4), Device::Cpu));
        }
        other => panic!("expected InputDevice, got {other:?}"),
    }
    let message = compiled.run(&chain_inputs(0.0)).unwrap_err().to_string();
    assert!(
        message.contains("cuda:4") && message.contains("cpu"),
        "{message}"
    );
}
