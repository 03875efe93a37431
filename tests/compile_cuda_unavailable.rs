//! `tessera::compile` for a CUDA device through the machine's real driver (its own test
//! binary: no emulated backend is registered): without libcuda or a GPU compiling is a
//! typed `DeviceUnavailable` error, never a panic; on a GPU machine the ignored test runs the
//! elementwise chain and the MLP on the real device and replays the CUDA graph.

use tessera::cuda::{CudaError, driver_present};
use tessera::fx::{Graph, GraphModule};
use tessera::tensor::op::{BinaryOp, UnaryOp};
use tessera::tensor::{DType, Device, Op, Tensor, TensorMeta};
use tessera::{CompileError, CompileOptions, compile};
use tessera_testkit::assert_close;

fn gelu_of_sum() -> (GraphModule, Vec<Tensor>) {
    let mut g = Graph::new();
    let x = g.placeholder("x", TensorMeta::new([64, 1000], DType::F32));
    let b = g.placeholder("b", TensorMeta::new([1000], DType::F32));
    let s = g
        .call_function(Op::Binary(BinaryOp::Add), &[&x, &b])
        .unwrap();
    let y = g
        .call_function(Op::Unary(UnaryOp::Gelu { tanh: false }), &[&s])
        .unwrap();
    g.output(&[&y]).unwrap();
    let inputs = vec![
        Tensor::randn(&[64, 1000], DType::F32).unwrap(),
        Tensor::randn(&[1000], DType::F32).unwrap(),
    ];
    (GraphModule::from_graph(g), inputs)
}

fn cuda_options() -> CompileOptions {
    CompileOptions {
        device: Device::Cuda(0),
        ..CompileOptions::default()
    }
}

#[test]
fn compiling_for_cuda_without_a_driver_is_device_unavailable() {
    if driver_present() {
        println!("skipped: libcuda is present on this machine");
        return;
    }
    let (gm, inputs) = gelu_of_sum();
    match compile(&gm, &inputs, cuda_options()) {
        Err(CompileError::Cuda(CudaError::DeviceUnavailable { reason })) => {
            assert!(reason.contains("libcuda"), "{reason}")
        }
        other => panic!("expected DeviceUnavailable, got {:?}", other.map(|_| ())),
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn compiled_chain_on_the_real_gpu_matches_the_cpu_and_replays_its_graph() {
    tessera::cuda::init().expect("a CUDA device");
    let (gm, inputs) = gelu_of_sum();
    let want = compile(&gm, &inputs, CompileOptions::default())
        .unwrap()
        .run(&inputs)
        .unwrap();
    let device: Vec<Tensor> = inputs
        .iter()
        .map(|t| t.to_device(Device::Cuda(0)).unwrap())
        .collect();
    let compiled = compile(&gm, &device, cuda_options()).unwrap();
    for _ in 0..3 {
        let got = compiled.run(&device).unwrap();
        assert_close(
            &got[0].to_device(Device::Cpu).unwrap(),
            &want[0],
            1e-6,
            1e-6,
            "gelu(x + b) on the GPU",
        );
    }
    let stats = compiled.cuda_stats();
    assert_eq!((stats.graphs_captured, stats.graph_launches), (1, 3));
}
