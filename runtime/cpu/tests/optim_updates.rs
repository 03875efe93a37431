//! The optimizer update ops as generated kernels: SGD (every option, with and without a
//! momentum buffer), Adam's step scalars and Adam/AdamW updates (with and without AMSGrad),
//! lowered from a graph, run by the kernel-IR interpreter and by the JIT, must give the bits
//! of the eager kernels in f32 and f64 (f32 updates vectorised); an SGD step without momentum fuses with the
//! elementwise ops that produce its gradient.

use crate::common;

use common::{eager, jit_run, lowered};
use tessera_fx::{Graph, NodeId};
use tessera_kernel::{Interpreter, NoEnvironment, Program, run_program};
use tessera_tensor::op::{BinaryOp, OptimOp, ScalarOp};
use tessera_tensor::{DType, Op, Tensor, TensorMeta};

/// Deterministic values in about [-2, 2] of `shape` and `dtype`.
fn values(shape: &[usize], seed: u64, dtype: DType) -> Tensor {
    let n: usize = shape.iter().product();
    let v: Vec<f64> = (0..n)
        .map(|i| ((i as u64 * 7919 + seed * 104_729) % 997) as f64 / 997.0 * 4.0 - 2.0)
        .collect();
    Tensor::from_vec(v, shape).unwrap().to_dtype(dtype).unwrap()
}

fn bits(t: &Tensor) -> Vec<u64> {
    let t = t.to_dtype(DType::F64).unwrap();
    t.to_vec::<f64>()
        .unwrap()
        .iter()
        .map(|x| x.to_bits())
        .collect()
}

/// The graph run eagerly, by the interpreter and by the JIT: the same bits everywhere, and
/// every node generated (no fallback).
pub(crate) fn check_bit_exact(graph: &Graph, inputs: &[Tensor], what: &str) -> Program {
    let program = lowered(graph, inputs);
    assert!(
        program.fallbacks.is_empty(),
        "{what}: fallbacks {:?}\n{program}",
        program.fallbacks
    );
    let expected = eager(graph, inputs);
    let interpreted = run_program(&program, &NoEnvironment, &Interpreter, inputs).unwrap();
    let jitted = jit_run(&program, inputs);
    for (i, e) in expected.iter().enumerate() {
        for (backend, got) in [("interpreter", &interpreted[i]), ("jit", &jitted[i])] {
            assert_eq!(e.shape(), got.shape(), "{what} {backend} output {i}");
            assert_eq!(e.dtype(), got.dtype(), "{what} {backend} output {i}");
            let (want, have) = (bits(e), bits(got));
            if let Some(k) = (0..want.len()).find(|&k| want[k] != have[k]) {
                panic!(
                    "{what}: {backend} output {i} element {k}: expected {}, got {}\n{program}",
                    f64::from_bits(want[k]),
                    f64::from_bits(have[k])
                );
            }
        }
    }
    program
}

/// A graph applying `op` to placeholders of `metas`, returning every output.
fn update_graph(op: &OptimOp, metas: &[TensorMeta], outputs: usize) -> Graph {
    let mut g = Graph::new();
    let args: Vec<NodeId> = metas
        .iter()
        .enumerate()
        .map(|(i, m)| g.placeholder(&format!("in{i}"), m.clone()))
        .collect();
    let update = g
        .call_function(Op::Optim(op.clone()), &args.iter().collect::<Vec<_>>())
        .unwrap();
    let outs: Vec<NodeId> = if outputs == 1 {
        vec![update]
    } else {
        (0..outputs)
            .map(|i| g.getitem(&update, i).unwrap())
            .collect()
    };
    g.output(&outs.iter().collect::<Vec<_>>()).unwrap();
    g
}

#[test]
fn sgd_updates_lower_to_kernels_with_the_eager_bits() {
    let shape = [33, 17];
    for dtype in [DType::F32, DType::F64] {
        for momentum in [0.0, 0.9] {
            for (dampening, nesterov) in [(0.0, false), (0.0, true), (0.3, false)] {
                for (weight_decay, maximize) in [(0.0, false), (0.02, true)] {
                    if nesterov && momentum == 0.0 {
                        continue;
                    }
                    let op = OptimOp::SgdUpdate {
                        momentum,
                        dampening,
                        weight_decay,
                        nesterov,
                        maximize,
                    };
                    let with_buffer: &[bool] = if momentum != 0.0 {
                        &[false, true]
                    } else {
                        &[false]
                    };
                    for &buffered in with_buffer {
                        let mut inputs = vec![values(&shape, 1, dtype), values(&shape, 2, dtype)];
                        if buffered {
                            inputs.push(values(&shape, 3, dtype));
                        }
                        inputs.push(Tensor::scalar(0.0371f64));
                        let metas: Vec<TensorMeta> = inputs.iter().map(|t| t.meta()).collect();
                        let outputs = if momentum != 0.0 { 2 } else { 1 };
                        let graph = update_graph(&op, &metas, outputs);
                        let what = format!("{op:?} {dtype} buffered={buffered}");
                        let program = check_bit_exact(&graph, &inputs, &what);
                        assert_eq!(program.kernels().count(), 1, "{what}\n{program}");
                        // The f64 learning rate is computed once, before the vector loop.
                        if dtype == DType::F32 {
                            let kernel = program.kernels().next().unwrap();
                            assert_eq!(kernel.schedule.vector_width, 4, "{what}\n{program}");
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn adam_updates_lower_to_kernels_with_the_eager_bits() {
    let shape = [5, 41];
    for dtype in [DType::F32, DType::F64] {
        for amsgrad in [false, true] {
            for (weight_decay, decoupled_weight_decay, maximize) in [
                (0.0, false, false),
                (0.01, false, true),
                (0.01, true, false),
            ] {
                let (beta1, beta2) = (0.9, 0.999);
                let op = OptimOp::AdamUpdate {
                    beta1,
                    beta2,
                    eps: 1e-8,
                    weight_decay,
                    amsgrad,
                    maximize,
                    decoupled_weight_decay,
                };
                // The whole step: scalars from the step counter and lr, then the update.
                let mut g = Graph::new();
                let meta = TensorMeta::new(shape, dtype);
                let mut state: Vec<NodeId> = ["param", "grad", "exp_avg", "exp_avg_sq"]
                    .iter()
                    .map(|n| g.placeholder(n, meta.clone()))
                    .collect();
                if amsgrad {
                    state.push(g.placeholder("max_exp_avg_sq", meta.clone()));
                }
                let step = g.placeholder("step", TensorMeta::new([], DType::F32));
                let lr = g.placeholder("lr", TensorMeta::new([], DType::F64));
                let scalars = g
                    .call_function(
                        Op::Optim(OptimOp::AdamStepScalars { beta1, beta2 }),
                        &[&step, &lr],
                    )
                    .unwrap();
                let new_step = g.getitem(&scalars, 0).unwrap();
                let step_size = g.getitem(&scalars, 1).unwrap();
                let bc2 = g.getitem(&scalars, 2).unwrap();
                let mut args: Vec<&NodeId> = state.iter().collect();
                args.extend([&lr, &step_size, &bc2]);
                let update = g.call_function(Op::Optim(op.clone()), &args).unwrap();
                let mut outs = vec![new_step];
                for i in 0..(3 + usize::from(amsgrad)) {
                    outs.push(g.getitem(&update, i).unwrap());
                }
                g.output(&outs.iter().collect::<Vec<_>>()).unwrap();

                let mut inputs = vec![
                    values(&shape, 1, dtype),
                    values(&shape, 2, dtype),
                    values(&shape, 3, dtype).mul_scalar(0.1).unwrap(),
                    values(&shape, 4, dtype)
                        .mul(&values(&shape, 4, dtype))
                        .unwrap(),
                ];
                if amsgrad {
                    inputs.push(
                        values(&shape, 5, dtype)
                            .mul(&values(&shape, 5, dtype))
                            .unwrap(),
                    );
                }
                inputs.push(Tensor::scalar(6.0f32));
                inputs.push(Tensor::scalar(0.0123f64));
                let what = format!("{op:?} {dtype}");
                let program = check_bit_exact(&g, &inputs, &what);
                assert_eq!(program.kernels().count(), 2, "{what}\n{program}");
            }
        }
    }
}

#[test]
fn sgd_without_momentum_fuses_with_the_ops_making_its_gradient() {
    let shape = [64, 9];
    let mut g = Graph::new();
    let meta = TensorMeta::new(shape, DType::F32);
    let p = g.placeholder("param", meta.clone());
    let x = g.placeholder("x", meta);
    let lr = g.placeholder("lr", TensorMeta::new([], DType::F64));
    let grad = g
        .call_function(
            Op::Scalar(ScalarOp {
                op: BinaryOp::Mul,
                value: 2.0,
                reversed: false,
            }),
            &[&x],
        )
        .unwrap();
    let op = OptimOp::SgdUpdate {
        momentum: 0.0,
        dampening: 0.0,
        weight_decay: 1e-3,
        nesterov: false,
        maximize: false,
    };
    let new_p = g.call_function(Op::Optim(op), &[&p, &grad, &lr]).unwrap();
    g.output(&[&new_p]).unwrap();
    let inputs = [
        values(&shape, 7, DType::F32),
        values(&shape, 8, DType::F32),
        Tensor::scalar(0.5f64),
    ];
    let program = check_bit_exact(&g, &inputs, "fused sgd");
    assert_eq!(program.kernels().count(), 1, "{program}");
}
