//! The elementwise quantized ops (quantize and dequantize per tensor and per channel along
//! each axis, to and from u8, i8 and i32, and the static int8 add) and the u8 average pools
//! (windowed and adaptive) lowered to one kernel whose interpreted and JIT-compiled results
//! equal the eager kernel bit for bit: ties at .5 steps, values saturating both ends, NaN and
//! infinities, f32 and f64 inputs, views read in place, pooling windows partly outside the
//! input; per-channel parameters the eager kernel rejects fail the run; the int8 products
//! still run their eager kernels; a quantized residual block compiles with no fallback.

use crate::common;

use common::{eager, jit_run, lowered};
use tessera_kernel::{Interpreter, NoEnvironment, run_program};
use tessera_tensor::op::{ConvParams, PoolOp, QuantOp};
use tessera_tensor::{DType, Op, Tensor};
use tessera_testkit::exact_bits;
use tessera_testkit::fake_quant_cases::integer_zero_points;
use tessera_testkit::quant_cases::{
    POOL_ZERO_POINTS, QUANTIZED_TYPES, U8_ADAPTIVE_BINS, float_inputs, pool_window,
    quantized_inputs, u8_pool_values, u8_pool_windows, valid_scales,
};

/// `op` on `inputs` lowered to one kernel with no fallback; interpreter, JIT and eager give
/// the same dtype and bits.
fn agrees(op: Op, inputs: &[Tensor]) {
    let graph = common::op_graph(op, inputs);
    let program = lowered(&graph, inputs);
    assert!(program.fallbacks.is_empty(), "{program}");
    assert_eq!(program.kernels().count(), 1, "{program}");
    let want = eager(&graph, inputs);
    let interpreted = run_program(&program, &NoEnvironment, &Interpreter, inputs).unwrap();
    let jitted = jit_run(&program, inputs);
    for (what, got) in [("interpreter", &interpreted[0]), ("jit", &jitted[0])] {
        assert_eq!(got.dtype(), want[0].dtype(), "{what}\n{program}");
        assert_eq!(got.shape(), want[0].shape(), "{what}\n{program}");
        assert_eq!(exact_bits(got), exact_bits(&want[0]), "{what}\n{program}");
    }
}

/// Three zero points of a range: both ends and one inside.
fn zero_points((lo, hi): (i64, i64)) -> [i64; 3] {
    [lo, hi, lo / 2 + hi / 2 + 1]
}

#[test]
fn quantize_per_tensor_to_every_type_equals_eager_bit_for_bit() {
    for (dtype, range) in QUANTIZED_TYPES {
        for float in [DType::F32, DType::F64] {
            for (seed, scale) in valid_scales(7, 0)
                .to_vec::<f32>()
                .unwrap()
                .iter()
                .enumerate()
            {
                for zero_point in zero_points(range) {
                    let op = Op::Quant(QuantOp::QuantizePerTensor {
                        scale: f64::from(*scale),
                        zero_point,
                        dtype,
                    });
                    for shape in [vec![5, 13], vec![], vec![0, 3]] {
                        agrees(op.clone(), &[float_inputs(float, &shape, seed)]);
                    }
                }
            }
        }
    }
}

#[test]
fn quantize_per_tensor_with_an_f64_scale_divides_f64_inputs_by_it() {
    let op = Op::Quant(QuantOp::QuantizePerTensor {
        scale: 0.1,
        zero_point: 3,
        dtype: DType::I32,
    });
    agrees(op, &[float_inputs(DType::F64, &[40], 1)]);
}

#[test]
fn quantize_per_channel_along_each_axis_to_every_type_equals_eager_bit_for_bit() {
    for (dtype, range) in QUANTIZED_TYPES {
        for float in [DType::F32, DType::F64] {
            for (shape, axis) in [
                (vec![4, 3, 5], 0),
                (vec![4, 3, 5], 1),
                (vec![4, 3, 5], 2),
                (vec![9], 0),
                (vec![0, 6], 0),
            ] {
                let op = Op::Quant(QuantOp::QuantizePerChannel { axis, dtype });
                for seed in 0..4 {
                    let x = float_inputs(float, &shape, seed);
                    let scales = valid_scales(shape[axis], seed);
                    let zero = integer_zero_points(shape[axis], range, seed);
                    agrees(op.clone(), &[x, scales, zero]);
                }
            }
        }
    }
}

#[test]
fn views_are_read_in_place() {
    let x = float_inputs(DType::F32, &[5, 7], 3)
        .transpose(0, 1)
        .unwrap();
    let op = Op::Quant(QuantOp::QuantizePerChannel {
        axis: 1,
        dtype: DType::I8,
    });
    let zero = integer_zero_points(5, (-128, 127), 1);
    agrees(op, &[x, valid_scales(5, 2), zero]);
    let q = quantized_inputs(DType::U8, &[6, 4], 0)
        .narrow(0, 1, 4)
        .unwrap()
        .transpose(0, 1)
        .unwrap();
    let op = Op::Quant(QuantOp::DequantizePerTensor {
        scale: 0.3,
        zero_point: 128,
    });
    agrees(op, std::slice::from_ref(&q));
    let op = Op::Quant(QuantOp::Add {
        a_scale: 0.5,
        a_zero_point: 3,
        b_scale: 0.25,
        b_zero_point: 200,
        out_scale: 0.5,
        out_zero_point: 7,
        relu: false,
    });
    let b = quantized_inputs(DType::U8, &[4, 4], 1);
    agrees(op, &[q, b]);
}

#[test]
fn dequantize_per_tensor_and_per_channel_from_every_type_equal_eager_bit_for_bit() {
    for (dtype, range) in QUANTIZED_TYPES {
        for seed in 0..4 {
            let scale = valid_scales(7, seed).to_vec::<f32>().unwrap()[0];
            for zero_point in zero_points(range) {
                let op = Op::Quant(QuantOp::DequantizePerTensor {
                    scale: f64::from(scale),
                    zero_point,
                });
                for shape in [vec![5, 13], vec![], vec![0, 3]] {
                    agrees(op.clone(), &[quantized_inputs(dtype, &shape, seed)]);
                }
            }
            for (shape, axis) in [(vec![4, 3, 5], 0), (vec![4, 3, 5], 1), (vec![4, 3, 5], 2)] {
                let op = Op::Quant(QuantOp::DequantizePerChannel { axis });
                let q = quantized_inputs(dtype, &shape, seed);
                let scales = valid_scales(shape[axis], seed);
                let zero = integer_zero_points(shape[axis], range, seed);
                agrees(op, &[q, scales, zero]);
            }
        }
    }
}

#[test]
fn quantized_add_with_ties_and_saturation_equals_eager_bit_for_bit() {
    // Halves and quarters make exact ties at .5 output steps; a small output scale saturates
    // at 255, a large negative shift at 0, ReLU clamps at the output zero point.
    let params = [
        (0.5, 3, 0.25, 200, 0.5, 7),
        (0.1, 0, 0.3, 128, 0.2, 5),
        (1.0, 255, 1.0, 0, 0.01, 128),
        (2.0, 0, 0.5, 255, 1.5, 0),
    ];
    for (i, (a_scale, a_zero_point, b_scale, b_zero_point, out_scale, out_zero_point)) in
        params.into_iter().enumerate()
    {
        for relu in [false, true] {
            let op = Op::Quant(QuantOp::Add {
                a_scale,
                a_zero_point,
                b_scale,
                b_zero_point,
                out_scale,
                out_zero_point,
                relu,
            });
            for shape in [vec![2, 3, 4, 5], vec![], vec![0, 2]] {
                let a = quantized_inputs(DType::U8, &shape, i);
                let b = quantized_inputs(DType::U8, &shape, i + 3);
                agrees(op.clone(), &[a, b]);
            }
        }
    }
}

#[test]
fn per_channel_parameters_eager_rejects_fail_the_run() {
    let x = float_inputs(DType::F32, &[3, 4], 1);
    let op = Op::Quant(QuantOp::QuantizePerChannel {
        axis: 0,
        dtype: DType::U8,
    });
    // The kernel reports `zero_point - qmin` against the range's size, -1 for a bad scale.
    let zero = Tensor::from_vec(vec![0i64, 256, 3], &[3]).unwrap();
    common::faults(op.clone(), &[x.clone(), valid_scales(3, 0), zero], 256, 256);
    let zero = Tensor::from_vec(vec![0i64, 5, 3], &[3]).unwrap();
    for bad in [0.0f32, -0.5, f32::NAN, f32::INFINITY] {
        let scales = Tensor::from_vec(vec![0.5f32, bad, 1.0], &[3]).unwrap();
        common::faults(op.clone(), &[x.clone(), scales, zero.clone()], -1, 256);
    }
    let op = Op::Quant(QuantOp::QuantizePerChannel {
        axis: 1,
        dtype: DType::I8,
    });
    let zero = Tensor::from_vec(vec![0i64, -129, 3, 0], &[4]).unwrap();
    common::faults(op, &[x, valid_scales(4, 0), zero], -1, 256);
}

#[test]
fn an_empty_per_channel_quantize_runs_the_eager_kernel_that_checks_its_channels() {
    let op = Op::Quant(QuantOp::QuantizePerChannel {
        axis: 1,
        dtype: DType::U8,
    });
    let x = float_inputs(DType::F32, &[0, 3], 0);
    let inputs = [x, valid_scales(3, 0), integer_zero_points(3, (0, 255), 0)];
    let graph = common::op_graph(op, &inputs);
    let program = lowered(&graph, &inputs);
    assert_eq!(program.fallbacks.len(), 1, "{program}");
    assert!(program.fallbacks[0].reason.contains("checks"), "{program}");
    assert_eq!(jit_run(&program, &inputs)[0].shape(), vec![0, 3]);
}

#[test]
fn the_int8_products_still_run_their_eager_kernels() {
    let x = quantized_inputs(DType::U8, &[1, 2, 3, 3], 0);
    let w = quantized_inputs(DType::I8, &[2, 2, 1, 1], 1);
    let op = Op::Quant(QuantOp::Conv2d {
        params: ConvParams::conv2d([1, 1], [0, 0], [1, 1], 1),
        x_scale: 0.1,
        x_zero_point: 3,
        out_scale: 0.2,
        out_zero_point: 5,
        relu: false,
        bias: false,
    });
    let inputs = [x, w, valid_scales(2, 0), integer_zero_points(2, (0, 0), 0)];
    let graph = common::op_graph(op, &inputs);
    let program = lowered(&graph, &inputs);
    assert_eq!(program.fallbacks.len(), 1, "{program}");
    assert!(
        program.fallbacks[0].reason.contains("eager GEMM"),
        "{program}"
    );
    assert_eq!(
        exact_bits(&jit_run(&program, &inputs)[0]),
        exact_bits(&eager(&graph, &inputs)[0])
    );
}

#[test]
fn a_quantized_residual_block_compiles_with_no_fallback_and_equals_eager() {
    // quantize -> int8 add of the value with itself -> dequantize -> relu, as a converted
    // residual connection reads.
    let mut g = tessera_fx::Graph::new();
    let x = g.placeholder(
        "x",
        tessera_tensor::TensorMeta::new(&[3, 4, 5][..], DType::F32),
    );
    let q = g
        .call_function(
            Op::Quant(QuantOp::QuantizePerTensor {
                scale: 0.5,
                zero_point: 128,
                dtype: DType::U8,
            }),
            &[&x],
        )
        .unwrap();
    let sum = g
        .call_function(
            Op::Quant(QuantOp::Add {
                a_scale: 0.5,
                a_zero_point: 128,
                b_scale: 0.5,
                b_zero_point: 128,
                out_scale: 0.25,
                out_zero_point: 100,
                relu: true,
            }),
            &[&q, &q],
        )
        .unwrap();
    let y = g
        .call_function(
            Op::Quant(QuantOp::DequantizePerTensor {
                scale: 0.25,
                zero_point: 100,
            }),
            &[&sum],
        )
        .unwrap();
    let y = g
        .call_function(Op::Unary(tessera_tensor::op::UnaryOp::Relu), &[&y])
        .unwrap();
    g.output(&[&y]).unwrap();
    let inputs = [float_inputs(DType::F32, &[3, 4, 5], 2)];
    let program = lowered(&g, &inputs);
    assert!(program.fallbacks.is_empty(), "{program}");
    let want = eager(&g, &inputs);
    assert_eq!(
        exact_bits(&jit_run(&program, &inputs)[0]),
        exact_bits(&want[0]),
        "{program}"
    );
}

/// The quantized average `pool` of u8 values whose zero point is `zero_point`.
fn quantized_pool(pool: PoolOp, zero_point: i64) -> Op {
    Op::Quant(QuantOp::AvgPool { pool, zero_point })
}

#[test]
fn quantized_avg_pool_with_padding_and_ceil_mode_equals_eager_bit_for_bit() {
    for (i, params) in u8_pool_windows().into_iter().enumerate() {
        for zero_point in POOL_ZERO_POINTS {
            for count_include_pad in [false, params.padding == [0, 0]] {
                let pool = PoolOp::AvgPool2d {
                    params,
                    count_include_pad,
                };
                let op = quantized_pool(pool, zero_point);
                for shape in [vec![2, 3, 11, 10], vec![3, 9, 12]] {
                    agrees(op.clone(), &[u8_pool_values(&shape, i)]);
                }
            }
        }
    }
}

#[test]
fn quantized_adaptive_avg_pool_of_uneven_bins_equals_eager_bit_for_bit() {
    for (seed, (plane, output_size)) in U8_ADAPTIVE_BINS.into_iter().enumerate() {
        for zero_point in POOL_ZERO_POINTS {
            let op = quantized_pool(PoolOp::AdaptiveAvgPool2d { output_size }, zero_point);
            for lead in [vec![2, 3], vec![2]] {
                let mut shape = lead;
                shape.extend(plane);
                agrees(op.clone(), &[u8_pool_values(&shape, seed)]);
            }
        }
    }
}

#[test]
fn quantized_avg_pools_of_uniform_planes_at_both_ends_of_u8_equal_eager() {
    // Every window's sum is n * 255 or 0: the mean is an end of u8 whatever the zero point.
    for value in [0u8, 255] {
        let x = Tensor::from_vec(vec![value; 2 * 7 * 9], &[1, 2, 7, 9]).unwrap();
        for zero_point in POOL_ZERO_POINTS {
            let windowed = PoolOp::AvgPool2d {
                params: pool_window([3, 3], [2, 2], [1, 1], true),
                count_include_pad: false,
            };
            let adaptive = PoolOp::AdaptiveAvgPool2d {
                output_size: [4, 5],
            };
            for pool in [windowed, adaptive] {
                agrees(quantized_pool(pool, zero_point), std::slice::from_ref(&x));
            }
        }
    }
}

#[test]
fn quantized_avg_pools_read_channels_last_and_narrowed_views_in_place() {
    let x = u8_pool_values(&[2, 10, 9, 4], 3);
    let channels_last = x.permute(&[0, 3, 1, 2]).unwrap();
    let narrowed = x.narrow(1, 1, 8).unwrap().transpose(2, 3).unwrap();
    for view in [channels_last, narrowed] {
        for pool in [
            PoolOp::AvgPool2d {
                params: pool_window([3, 2], [2, 1], [1, 1], true),
                count_include_pad: false,
            },
            PoolOp::AdaptiveAvgPool2d {
                output_size: [3, 4],
            },
        ] {
            agrees(quantized_pool(pool, 37), std::slice::from_ref(&view));
        }
    }
}

#[test]
fn u8_avg_pool2d_and_adaptive_avg_pool2d_are_the_quantized_kernels_with_zero_point_0() {
    let x = u8_pool_values(&[2, 3, 9, 8], 1);
    let windowed = PoolOp::AvgPool2d {
        params: pool_window([3, 3], [2, 2], [1, 1], true),
        count_include_pad: false,
    };
    let counted = PoolOp::AvgPool2d {
        params: pool_window([2, 3], [2, 2], [0, 0], true),
        count_include_pad: true,
    };
    let adaptive = PoolOp::AdaptiveAvgPool2d {
        output_size: [4, 3],
    };
    for pool in [windowed, counted, adaptive] {
        agrees(Op::Pool(pool), std::slice::from_ref(&x));
    }
}

#[test]
fn quantized_avg_pools_of_an_empty_batch_are_kernels_over_no_points() {
    let x = u8_pool_values(&[0, 3, 6, 6], 0);
    for pool in [
        PoolOp::AvgPool2d {
            params: pool_window([2, 2], [2, 2], [1, 1], false),
            count_include_pad: false,
        },
        PoolOp::AdaptiveAvgPool2d {
            output_size: [4, 4],
        },
    ] {
        agrees(quantized_pool(pool, 5), std::slice::from_ref(&x));
    }
}

#[test]
fn quantized_adaptive_bins_too_many_to_unroll_run_the_eager_kernel() {
    // 100 -> 99 rows: one block of 99 bins reading 198 rows, too many taps to unroll, and the
    // bins do not tile the input.
    let x = u8_pool_values(&[1, 2, 100, 7], 0);
    let op = quantized_pool(
        PoolOp::AdaptiveAvgPool2d {
            output_size: [99, 3],
        },
        37,
    );
    let inputs = [x];
    let graph = common::op_graph(op, &inputs);
    let program = lowered(&graph, &inputs);
    assert_eq!(program.fallbacks.len(), 1, "{program}");
    assert!(
        program.fallbacks[0].reason.contains("taps per block"),
        "{program}"
    );
    assert_eq!(
        exact_bits(&jit_run(&program, &inputs)[0]),
        exact_bits(&eager(&graph, &inputs)[0])
    );
}
