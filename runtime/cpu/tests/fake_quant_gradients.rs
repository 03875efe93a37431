//! The learnable fake-quantize backward (per tensor and per channel along each axis) lowered
//! to one reduction kernel: `dX` equal to the eager kernel's bit for bit, `dScale` and
//! `dZeroPoint` (sums in f64 over each channel) within the rounding of the summation order
//! (`tessera_testkit::fake_quant_cases::sums_agree`), through the interpreter and the JIT;
//! ties, NaN and infinite inputs and parameters, empty inputs and a transposed input. A range
//! beyond f32's exact integers runs the eager kernel.

use crate::common;
use tessera_testkit::exact_bits as bits;

use common::{eager, jit_run, lowered};
use tessera_fx::Graph;
use tessera_kernel::{Interpreter, NoEnvironment, run_program};
use tessera_tensor::op::FakeQuantOp;
use tessera_tensor::{Op, Tensor};
use tessera_testkit::fake_quant_cases::{
    gradient_case, gradients_agree, learnable_form, parameters,
};

/// `(dX, dScale, dZeroPoint) = op(grad, x, scale, zero_point)`, each an output.
fn gradients_graph(op: Op, inputs: &[Tensor]) -> Graph {
    common::op_graph_outputs(op, inputs, Some(3))
}

/// `op` on `inputs` is one kernel with no fallback whose interpreted and compiled gradients
/// agree with eager.
fn agrees(op: Op, inputs: &[Tensor]) {
    let form = learnable_form(&op).expect("a learnable backward");
    let graph = gradients_graph(op, inputs);
    let program = lowered(&graph, inputs);
    assert!(program.fallbacks.is_empty(), "{program}");
    assert_eq!(program.kernels().count(), 1, "{program}");
    let want = eager(&graph, inputs);
    let interpreted = run_program(&program, &NoEnvironment, &Interpreter, inputs).unwrap();
    gradients_agree("interpreter", &interpreted, &want, inputs, form);
    gradients_agree("jit", &jit_run(&program, inputs), &want, inputs, form);
}

const RANGES: [(i64, i64); 4] = [(0, 255), (-128, 127), (3, 3), (-(1 << 24), 1 << 24)];

/// Upstream gradients and inputs without NaN or infinities: steps of 1/16 and 1/8.
fn plain_case(shape: &[usize], channels: usize, seed: usize) -> Vec<Tensor> {
    let n: usize = shape.iter().product();
    let values = |mul: usize, div: f32| -> Vec<f32> {
        (0..n)
            .map(|i| ((i * mul + seed * 31) % 401) as f32 / div - 200.0 / div)
            .collect()
    };
    let x = Tensor::from_vec(values(7919, 8.0), shape).unwrap();
    let grad = Tensor::from_vec(values(104_729, 16.0), shape).unwrap();
    let scale: Vec<f32> = (0..channels)
        .map(|c| [0.5, 0.1, 2.0, 0.37][(c + seed) % 4])
        .collect();
    let zero: Vec<f32> = (0..channels)
        .map(|c| [0.0, 2.5, -3.5, 10.2][(c * 3 + seed) % 4])
        .collect();
    vec![
        grad,
        x,
        Tensor::from_vec(scale, &[channels]).unwrap(),
        Tensor::from_vec(zero, &[channels]).unwrap(),
    ]
}

#[test]
fn learnable_per_tensor_gradients_are_one_kernel_agreeing_with_eager() {
    for (quant_min, quant_max) in RANGES {
        let op = Op::FakeQuantBackward(FakeQuantOp::LearnablePerTensor {
            quant_min,
            quant_max,
            grad_factor: 1.0,
        });
        for seed in 0..9 {
            for shape in [vec![5, 13], vec![0, 3], vec![97]] {
                agrees(op.clone(), &gradient_case(&shape, 1, seed));
                agrees(op.clone(), &plain_case(&shape, 1, seed));
            }
            let mut scalar = gradient_case(&[], 1, seed);
            for t in &mut scalar[2..] {
                *t = t.reshape(&[]).unwrap();
            }
            agrees(op.clone(), &scalar);
        }
    }
}

#[test]
fn learnable_per_channel_gradients_along_each_axis_agree_with_eager() {
    for (quant_min, quant_max) in RANGES {
        for (shape, axis) in [
            (vec![4, 3, 5], 0),
            (vec![4, 3, 5], 1),
            (vec![4, 3, 5], 2),
            (vec![9], 0),
            (vec![0, 6], 1),
            (vec![6, 0], 0),
            (vec![0, 6], 0),
        ] {
            let op = Op::FakeQuantBackward(FakeQuantOp::LearnablePerChannel {
                axis,
                quant_min,
                quant_max,
                grad_factor: 0.3,
            });
            for seed in 0..4 {
                agrees(op.clone(), &gradient_case(&shape, shape[axis], seed));
                agrees(op.clone(), &plain_case(&shape, shape[axis], seed));
            }
        }
    }
}

#[test]
fn the_gradients_of_a_transposed_input_are_read_in_place() {
    let op = Op::FakeQuantBackward(FakeQuantOp::LearnablePerChannel {
        axis: 1,
        quant_min: -8,
        quant_max: 7,
        grad_factor: 1.0,
    });
    let mut inputs = plain_case(&[5, 7], 5, 3);
    for t in &mut inputs[..2] {
        *t = t.reshape(&[7, 5]).unwrap().transpose(0, 1).unwrap();
    }
    let (scale, zero) = parameters(7, 1);
    inputs[2] = scale;
    inputs[3] = zero;
    agrees(op, &inputs);
}

#[test]
fn learnable_gradients_over_a_range_beyond_exact_f32_integers_run_the_eager_kernel() {
    let op = Op::FakeQuantBackward(FakeQuantOp::LearnablePerTensor {
        quant_min: 0,
        quant_max: (1 << 24) + 1,
        grad_factor: 1.0,
    });
    let inputs = gradient_case(&[10], 1, 0);
    let graph = gradients_graph(op, &inputs);
    let program = lowered(&graph, &inputs);
    assert_eq!(program.fallbacks.len(), 1, "{program}");
    assert!(
        program.fallbacks[0]
            .reason
            .contains("exceeds f32's exact integers"),
        "{program}"
    );
    let want = eager(&graph, &inputs);
    for (got, want) in jit_run(&program, &inputs).iter().zip(&want) {
        assert_eq!(bits(got), bits(want));
    }
}
