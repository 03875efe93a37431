//! Optimizer updates fused into the GEMM computing their gradient (a linear's weight gradient):
//! the update is the GEMM kernel's multi-output epilogue, so the gradient is never stored. SGD
//! (momentum, nesterov, dampening, weight decay, maximize, with and without a buffer) and
//! Adam/AdamW (with and without AMSGrad) give the eager bits through the interpreter and the
//! JIT, on one thread and split by rows; a gradient with a second consumer is stored and
//! updated apart; the fused kernel writes parameter and state in place unless its GEMM reads
//! the parameter.

use crate::common;
use crate::in_place::{run_updating, values};
use crate::optim_updates::check_bit_exact;

use common::lowered;
use tessera_cpu::JitProgram;
use tessera_fx::Graph;
use tessera_kernel::{Interpreter, KernelExecutor, NoEnvironment, Program, Step, run_program};
use tessera_tensor::op::{OptimOp, ViewOp};
use tessera_tensor::{DType, Op, Tensor, TensorMeta};
use tessera_testkit::update_cases::{GemmUpdate, gemm_update, sgd_momentum};

/// A GEMM kernel on one thread, and one whose rows are shared out across threads.
const SHAPES: [GemmUpdate; 2] = [
    GemmUpdate {
        rows: 5,
        cols: 7,
        k: 3,
    },
    GemmUpdate {
        rows: 48,
        cols: 40,
        k: 64,
    },
];

/// Every SGD option, with the state tensors each takes (a buffer or none).
fn sgd_cases() -> Vec<(OptimOp, usize)> {
    let mut cases = Vec::new();
    for (momentum, dampening, nesterov) in [
        (0.0, 0.0, false),
        (0.9, 0.0, false),
        (0.9, 0.0, true),
        (0.9, 0.3, false),
    ] {
        for (weight_decay, maximize) in [(0.0, false), (0.02, true)] {
            let op = OptimOp::SgdUpdate {
                momentum,
                dampening,
                weight_decay,
                nesterov,
                maximize,
            };
            let buffers: &[usize] = if momentum != 0.0 { &[0, 1] } else { &[0] };
            cases.extend(buffers.iter().map(|&b| (op.clone(), b)));
        }
    }
    cases
}

/// The one kernel of `program`: it starts with the GEMM and stores `outputs` values, so the
/// gradient is never stored.
fn assert_fused(program: &Program, outputs: usize, what: &str) {
    let steps: Vec<&Step> = program.steps.iter().collect();
    let [
        Step::Kernel {
            kernel,
            outputs: written,
            ..
        },
    ] = steps.as_slice()
    else {
        panic!("{what}: one kernel expected\n{program}");
    };
    assert!(kernel.gemm.is_some(), "{what}: no GEMM\n{program}");
    assert_eq!(written.len(), outputs, "{what}\n{program}");
}

#[test]
fn sgd_fused_into_the_gemm_of_its_gradient_gives_the_eager_bits() {
    for dtype in [DType::F32, DType::F64] {
        for shape in SHAPES {
            for (op, state) in sgd_cases() {
                let (graph, inputs) = gemm_update(&op, shape, dtype, (state, 1), false);
                let what = format!("{op:?} {dtype} {shape:?} state {state}");
                let program = check_bit_exact(&graph, &inputs, &what);
                let momentum = op.sgd_hyper().is_some_and(|h| h.momentum != 0.0);
                assert_fused(&program, 1 + usize::from(momentum), &what);
            }
        }
    }
}

#[test]
fn adam_fused_into_the_gemm_of_its_gradient_gives_the_eager_bits() {
    for dtype in [DType::F32, DType::F64] {
        for shape in SHAPES {
            for amsgrad in [false, true] {
                for (weight_decay, decoupled_weight_decay, maximize) in [
                    (0.0, false, false),
                    (0.01, false, true),
                    (0.01, true, false),
                ] {
                    let op = OptimOp::AdamUpdate {
                        beta1: 0.9,
                        beta2: 0.999,
                        eps: 1e-8,
                        weight_decay,
                        amsgrad,
                        maximize,
                        decoupled_weight_decay,
                    };
                    let state = 2 + usize::from(amsgrad);
                    let (graph, inputs) = gemm_update(&op, shape, dtype, (state, 3), false);
                    let what = format!("{op:?} {dtype} {shape:?}");
                    let program = check_bit_exact(&graph, &inputs, &what);
                    assert_fused(&program, 1 + state, &what);
                }
            }
        }
    }
}

#[test]
fn a_gradient_with_a_second_consumer_is_stored_and_updated_apart() {
    // The gradient is returned too: the GEMM has a user outside the update's group, so it is a
    // kernel of its own (its rows shared out) storing the gradient, which the update reads.
    let (graph, inputs) = gemm_update(&sgd_momentum(), SHAPES[1], DType::F32, (1, 1), true);
    let program = check_bit_exact(&graph, &inputs, "sgd, gradient returned");
    let kernels: Vec<_> = program.kernels().collect();
    assert_eq!(kernels.len(), 2, "{program}");
    let gemm: Vec<_> = kernels.iter().filter(|k| k.gemm.is_some()).collect();
    assert_eq!(gemm.len(), 1, "{program}");
    assert_eq!(
        gemm[0].stores.len(),
        1,
        "the GEMM stores the gradient only\n{program}"
    );
}

#[test]
fn a_fused_update_writes_its_parameter_and_state_in_place() {
    let (graph, inputs) = gemm_update(&sgd_momentum(), SHAPES[1], DType::F32, (1, 1), false);
    let program = lowered(&graph, &inputs);
    assert_fused(&program, 2, "sgd momentum");
    let jit = JitProgram::compile(&program).unwrap();
    for executor in [&jit as &dyn KernelExecutor, &Interpreter] {
        let copied = run_program(&program, &NoEnvironment, executor, &inputs).unwrap();
        // Inputs: param, a, x, buffer, lr.
        let (out, after) = run_updating(&program, executor, &inputs, &[Some(0), Some(3)]);
        let out = out.unwrap();
        assert!(out.iter().all(Option::is_none), "both in place:\n{program}");
        assert_eq!(values(&after[0]), values(&copied[0]));
        assert_eq!(values(&after[3]), values(&copied[1]));
        assert_eq!(values(&after[1]), values(&inputs[1]), "a is only read");
    }
}

/// SGD with momentum of `p: [48, 40]` whose gradient `a^T @ p` reads `p` itself.
fn update_of_a_gradient_reading_its_parameter() -> (Graph, Vec<Tensor>) {
    let (rows, cols) = (48, 40);
    let mut g = Graph::new();
    let p = g.placeholder("p", TensorMeta::new([rows, cols], DType::F32));
    let a = g.placeholder("a", TensorMeta::new([rows, rows], DType::F32));
    let buf = g.placeholder("buf", TensorMeta::new([rows, cols], DType::F32));
    let lr = g.placeholder("lr", TensorMeta::new([], DType::F64));
    let at = g
        .call_function(Op::View(ViewOp::Permute(vec![1, 0])), &[&a])
        .unwrap();
    let grad = g.call_function(Op::Matmul, &[&at, &p]).unwrap();
    let update = g
        .call_function(Op::Optim(sgd_momentum()), &[&p, &grad, &buf, &lr])
        .unwrap();
    let outs = [
        g.getitem(&update, 0).unwrap(),
        g.getitem(&update, 1).unwrap(),
    ];
    g.output(&outs.iter().collect::<Vec<_>>()).unwrap();
    let values = tessera_testkit::update_cases::values;
    let inputs = vec![
        values(&[rows, cols], 1),
        values(&[rows, rows], 2).mul_scalar(0.1).unwrap(),
        values(&[rows, cols], 3),
        Tensor::scalar(0.0371f64),
    ];
    (g, inputs)
}

#[test]
fn a_fused_update_whose_gemm_reads_its_parameter_is_returned_and_the_parameter_untouched() {
    // The GEMM reads all of `p` for every block of rows, also rows another share of the
    // split kernel (or another tile on a device) may have updated already (a race no run here
    // provokes reliably, so the choice itself is checked): `p`'s new value is returned, and so
    // is the buffer's (nothing after a write in place may fail, and this kernel allocates
    // `p`'s new value).
    let (graph, inputs) = update_of_a_gradient_reading_its_parameter();
    let program = check_bit_exact(&graph, &inputs, "sgd of a^T @ p");
    assert_fused(&program, 2, "sgd of a^T @ p");
    let jit = JitProgram::compile(&program).unwrap();
    for executor in [&jit as &dyn KernelExecutor, &Interpreter] {
        let copied = run_program(&program, &NoEnvironment, executor, &inputs).unwrap();
        let (out, after) = run_updating(&program, executor, &inputs, &[Some(0), Some(2)]);
        let out = out.unwrap();
        let returned: Vec<Vec<f32>> = out.iter().flatten().map(values).collect();
        assert_eq!(returned.len(), 2, "both returned:\n{program}");
        assert_eq!(returned[0], values(&copied[0]));
        assert_eq!(returned[1], values(&copied[1]));
        assert_eq!(values(&after[0]), values(&inputs[0]), "p is untouched");
        assert_eq!(values(&after[2]), values(&inputs[2]), "buf is untouched");
    }
}
