//! The learnable fake-quantize forwards (per tensor and per channel along each axis) lowered to
//! one kernel whose interpreted and JIT-compiled results equal the eager kernel bit for bit:
//! ties at .5 steps in both directions, NaN and infinite inputs, scales and zero points, zero
//! points rounding half to even and outside the range, empty and 0-dim inputs; a range beyond
//! f32's exact integers runs the eager kernel as a fallback.

use crate::common;
use tessera_testkit::exact_bits as bits;

use common::{eager, jit_run, lowered};
use tessera_kernel::{Interpreter, NoEnvironment, run_program};
use tessera_tensor::op::FakeQuantOp;
use tessera_tensor::{Op, Tensor};
use tessera_testkit::fake_quant_cases::{integer_zero_points, parameters, x_values};

/// `op` on `inputs` lowered with no fallback; interpreter, JIT and eager equal bit for bit.
fn agrees(op: Op, inputs: &[Tensor]) {
    let graph = common::op_graph(op, inputs);
    let program = lowered(&graph, inputs);
    assert!(program.fallbacks.is_empty(), "{program}");
    assert_eq!(program.kernels().count(), 1, "{program}");
    let want = eager(&graph, inputs);
    let interpreted = run_program(&program, &NoEnvironment, &Interpreter, inputs).unwrap();
    let jitted = jit_run(&program, inputs);
    assert_eq!(
        bits(&interpreted[0]),
        bits(&want[0]),
        "interpreter\n{program}"
    );
    assert_eq!(bits(&jitted[0]), bits(&want[0]), "jit\n{program}");
}

const RANGES: [(i64, i64); 4] = [(0, 255), (-128, 127), (3, 3), (-(1 << 24), 1 << 24)];

#[test]
fn learnable_per_tensor_fake_quant_is_one_kernel_equal_to_eager_bit_for_bit() {
    for (quant_min, quant_max) in RANGES {
        let op = Op::FakeQuant(FakeQuantOp::LearnablePerTensor {
            quant_min,
            quant_max,
            grad_factor: 1.0,
        });
        for seed in 0..9 {
            for shape in [vec![5, 13], vec![0, 3], vec![97]] {
                let n = shape.iter().product();
                let x = Tensor::from_vec(x_values(n, seed), &shape).unwrap();
                let (scale, zero) = parameters(1, seed);
                agrees(op.clone(), &[x, scale, zero]);
            }
            let x = Tensor::from_vec(x_values(1, seed), &[]).unwrap();
            let (scale, zero) = parameters(1, seed);
            let (scale, zero) = (scale.reshape(&[]).unwrap(), zero.reshape(&[]).unwrap());
            agrees(op.clone(), &[x, scale, zero]);
        }
    }
}

#[test]
fn learnable_per_channel_fake_quant_along_each_axis_equals_eager_bit_for_bit() {
    for (quant_min, quant_max) in RANGES {
        for (shape, axis) in [
            (vec![4, 3, 5], 0),
            (vec![4, 3, 5], 1),
            (vec![4, 3, 5], 2),
            (vec![9], 0),
            (vec![0, 6], 1),
            (vec![6, 0], 0),
        ] {
            let op = Op::FakeQuant(FakeQuantOp::LearnablePerChannel {
                axis,
                quant_min,
                quant_max,
                grad_factor: 0.5,
            });
            for seed in 0..4 {
                let x = Tensor::from_vec(x_values(shape.iter().product(), seed), &shape).unwrap();
                let (scale, zero) = parameters(shape[axis], seed);
                agrees(op.clone(), &[x, scale, zero]);
            }
        }
    }
}

#[test]
fn a_transposed_input_is_read_in_place() {
    let op = Op::FakeQuant(FakeQuantOp::LearnablePerChannel {
        axis: 1,
        quant_min: -8,
        quant_max: 7,
        grad_factor: 1.0,
    });
    let x = Tensor::from_vec(x_values(35, 3), &[5, 7])
        .unwrap()
        .transpose(0, 1)
        .unwrap();
    let (scale, zero) = parameters(5, 1);
    agrees(op, &[x, scale, zero]);
}

#[test]
fn a_range_beyond_exact_f32_integers_runs_the_eager_kernel() {
    let op = Op::FakeQuant(FakeQuantOp::LearnablePerTensor {
        quant_min: 0,
        quant_max: (1 << 24) + 1,
        grad_factor: 1.0,
    });
    let x = Tensor::from_vec(x_values(10, 0), &[10]).unwrap();
    let (scale, zero) = parameters(1, 0);
    let inputs = [x, scale, zero];
    let graph = common::op_graph(op, &inputs);
    let program = lowered(&graph, &inputs);
    assert_eq!(program.fallbacks.len(), 1, "{program}");
    assert!(
        program.fallbacks[0]
            .reason
            .contains("exceeds f32's exact integers"),
        "{program}"
    );
    assert_eq!(
        bits(&jit_run(&program, &inputs)[0]),
        bits(&eager(&graph, &inputs)[0])
    );
}

#[test]
fn per_tensor_and_per_channel_fake_quant_with_integer_zero_points_equal_eager_bit_for_bit() {
    for range in RANGES {
        let (quant_min, quant_max) = range;
        let per_tensor = Op::FakeQuant(FakeQuantOp::PerTensor {
            quant_min,
            quant_max,
        });
        for seed in 0..6 {
            let x = Tensor::from_vec(x_values(65, seed), &[5, 13]).unwrap();
            let (scale, _) = parameters(1, seed);
            let zero = integer_zero_points(1, range, seed);
            agrees(per_tensor.clone(), &[x, scale.clone(), zero.clone()]);
            let x = Tensor::from_vec(x_values(1, seed), &[]).unwrap();
            let (scale, zero) = (scale.reshape(&[]).unwrap(), zero.reshape(&[]).unwrap());
            agrees(per_tensor.clone(), &[x, scale, zero]);
        }
        for (shape, axis) in [(vec![4, 3, 5], 0), (vec![4, 3, 5], 2), (vec![0, 6], 1)] {
            let op = Op::FakeQuant(FakeQuantOp::PerChannel {
                axis,
                quant_min,
                quant_max,
            });
            for seed in 0..4 {
                let x = Tensor::from_vec(x_values(shape.iter().product(), seed), &shape).unwrap();
                let (scale, _) = parameters(shape[axis], seed);
                let zero = integer_zero_points(shape[axis], range, seed);
                agrees(op.clone(), &[x, scale, zero]);
            }
        }
    }
}

#[test]
fn an_integer_zero_point_outside_the_range_fails_the_run_as_eager_fails() {
    let op = Op::FakeQuant(FakeQuantOp::PerChannel {
        axis: 0,
        quant_min: -128,
        quant_max: 127,
    });
    let x = Tensor::from_vec(x_values(12, 1), &[3, 4]).unwrap();
    let (scale, _) = parameters(3, 0);
    let zero = Tensor::from_vec(vec![0i64, 128, -3], &[3]).unwrap();
    // The kernel reports `zero_point - quant_min` against the range's size.
    common::faults(op.clone(), &[x.clone(), scale.clone(), zero], 256, 256);
    let zero = Tensor::from_vec(vec![0i64, -129, -3], &[3]).unwrap();
    common::faults(op, &[x, scale, zero], -1, 256);
}

#[test]
fn the_straight_through_gradient_of_integer_zero_point_fake_quant_equals_eager_bit_for_bit() {
    for range in RANGES {
        let (quant_min, quant_max) = range;
        for (shape, axis) in [
            (vec![5, 13], None),
            (vec![4, 3, 5], Some(1)),
            (vec![], None),
        ] {
            let op = Op::FakeQuantBackward(match axis {
                None => FakeQuantOp::PerTensor {
                    quant_min,
                    quant_max,
                },
                Some(axis) => FakeQuantOp::PerChannel {
                    axis,
                    quant_min,
                    quant_max,
                },
            });
            let channels = axis.map_or(1, |a| shape[a]);
            for seed in 0..4 {
                let n = shape.iter().product();
                let x = Tensor::from_vec(x_values(n, seed), &shape).unwrap();
                let grad = Tensor::from_vec(x_values(n, seed + 5), &shape).unwrap();
                let (scale, _) = parameters(channels, seed);
                let mut zero = integer_zero_points(channels, range, seed);
                if axis.is_none() && shape.is_empty() {
                    zero = zero.reshape(&[]).unwrap();
                }
                agrees(op.clone(), &[grad, x, scale, zero]);
            }
        }
    }
}
