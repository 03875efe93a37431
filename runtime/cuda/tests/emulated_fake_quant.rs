//! The fake-quantize forwards (learnable, and with integer zero points), the elementwise
//! quantized ops (quantize and dequantize per tensor and per channel to and from u8, i8 and
//! i32, the static int8 add), the u8 average pools (windowed and adaptive), the int8
//! linears, static and dynamic, and the static int8 conv2d (lowered with product kernels, as
//! for a device; the conv2d with padding, stride, dilation and channels-last inputs), on the
//! PTX backend: rendered to PTX, assembled by ptxas (sm_80 and sm_90) when it is installed,
//! run in the emulator and checked bit for bit against the kernel-IR interpreter and the eager
//! CPU kernel on ties at .5 steps, NaN and infinite inputs, scales and zero points, zero points
//! outside the range, padded and ceil-mode windows, uneven bins, empty and 0-dim inputs; and
//! as eager ops on CUDA tensors (the emulated driver) equal to the CPU. The learnable
//! fake-quantize backward's `dX` likewise; its `dScale` and `dZeroPoint` sums (a tree on the
//! device, in order on the CPU) within the rounding of the summation order.

use crate::common;
use crate::emulated;

use emulated::EmulatedPtx;
use tessera_kernel::{Interpreter, LowerOptions, NoEnvironment, run_program};
use tessera_tensor::op::{ConvParams, FakeQuantOp, PoolOp, QuantOp};
use tessera_tensor::{DType, Device, Op, Tensor};
use tessera_testkit::exact_bits;
use tessera_testkit::exact_bits as bits;
use tessera_testkit::fake_quant_cases::{
    gradient_case, gradients_agree, integer_zero_points, learnable_form, parameters, x_values,
};
use tessera_testkit::quant_cases::{
    POOL_ZERO_POINTS, QUANTIZED_TYPES, U8_ADAPTIVE_BINS, float_inputs, pool_window,
    quantized_inputs, u8_pool_values, u8_pool_windows, valid_scales,
};
use tessera_testkit::quant_conv_cases::static_conv_cases;
use tessera_testkit::quant_linear_cases::{dynamic_linear_cases, static_linear_cases};

/// `op` on `inputs`: emulated PTX, the interpreter and eager execution agree bit for bit.
fn agrees(op: Op, inputs: &[Tensor]) {
    let program = common::lowered(op.clone(), inputs, 1);
    let want = run_program(&program, &NoEnvironment, &Interpreter, inputs).unwrap();
    let got = run_program(&program, &NoEnvironment, &EmulatedPtx::default(), inputs).unwrap();
    let refs: Vec<&Tensor> = inputs.iter().collect();
    let eager = op.apply(&refs).unwrap();
    assert_eq!(
        bits(&got[0]),
        bits(&want[0]),
        "emulated PTX vs interpreter\n{program}"
    );
    assert_eq!(
        bits(&want[0]),
        bits(&eager[0]),
        "interpreter vs eager\n{program}"
    );
}

const RANGES: [(i64, i64); 3] = [(0, 255), (-128, 127), (-(1 << 24), 1 << 24)];

#[test]
fn learnable_fake_quant_on_emulated_ptx_equals_the_interpreter_and_eager() {
    for (quant_min, quant_max) in RANGES {
        let per_tensor = Op::FakeQuant(FakeQuantOp::LearnablePerTensor {
            quant_min,
            quant_max,
            grad_factor: 1.0,
        });
        for seed in 0..9 {
            for shape in [vec![5, 13], vec![0, 3]] {
                let n = shape.iter().product();
                let x = Tensor::from_vec(x_values(n, seed), &shape).unwrap();
                let (scale, zero) = parameters(1, seed);
                agrees(per_tensor.clone(), &[x, scale, zero]);
            }
            let x = Tensor::from_vec(x_values(1, seed), &[]).unwrap();
            let (scale, zero) = parameters(1, seed);
            let (scale, zero) = (scale.reshape(&[]).unwrap(), zero.reshape(&[]).unwrap());
            agrees(per_tensor.clone(), &[x, scale, zero]);
        }
        for (shape, axis) in [(vec![4, 3, 5], 0), (vec![4, 3, 5], 1), (vec![4, 3, 5], 2)] {
            let per_channel = Op::FakeQuant(FakeQuantOp::LearnablePerChannel {
                axis,
                quant_min,
                quant_max,
                grad_factor: 0.5,
            });
            for seed in 0..4 {
                let x = Tensor::from_vec(x_values(60, seed), &shape).unwrap();
                let (scale, zero) = parameters(shape[axis], seed);
                agrees(per_channel.clone(), &[x, scale, zero]);
            }
        }
    }
}

#[test]
fn fake_quant_with_integer_zero_points_on_emulated_ptx_equals_the_interpreter_and_eager() {
    for range in RANGES {
        let (quant_min, quant_max) = range;
        let per_tensor = Op::FakeQuant(FakeQuantOp::PerTensor {
            quant_min,
            quant_max,
        });
        for seed in 0..4 {
            let x = Tensor::from_vec(x_values(65, seed), &[5, 13]).unwrap();
            let (scale, _) = parameters(1, seed);
            agrees(
                per_tensor.clone(),
                &[x, scale, integer_zero_points(1, range, 0)],
            );
        }
        for (shape, axis) in [(vec![4, 3, 5], 0), (vec![4, 3, 5], 2)] {
            let per_channel = Op::FakeQuant(FakeQuantOp::PerChannel {
                axis,
                quant_min,
                quant_max,
            });
            let x = Tensor::from_vec(x_values(60, axis), &shape).unwrap();
            let (scale, _) = parameters(shape[axis], 1);
            let zero = integer_zero_points(shape[axis], range, 0);
            agrees(per_channel, &[x, scale, zero]);
        }
    }
}

#[test]
fn the_straight_through_gradient_on_emulated_ptx_equals_the_interpreter_and_eager() {
    for range in RANGES {
        let (quant_min, quant_max) = range;
        let op = Op::FakeQuantBackward(FakeQuantOp::PerChannel {
            axis: 1,
            quant_min,
            quant_max,
        });
        let x = Tensor::from_vec(x_values(60, 2), &[4, 3, 5]).unwrap();
        let grad = Tensor::from_vec(x_values(60, 7), &[4, 3, 5]).unwrap();
        let (scale, _) = parameters(3, 1);
        agrees(op, &[grad, x, scale, integer_zero_points(3, range, 0)]);
    }
}

#[test]
fn fake_quant_of_cuda_tensors_equals_the_cpu_and_reports_a_zero_point_outside_the_range() {
    crate::eager_common::backend();
    let op = Op::FakeQuant(FakeQuantOp::LearnablePerChannel {
        axis: 1,
        quant_min: -128,
        quant_max: 127,
        grad_factor: 1.0,
    });
    let x = Tensor::from_vec(x_values(24, 2), &[4, 6]).unwrap();
    let (scale, zero) = parameters(6, 3);
    let want = op.apply(&[&x, &scale, &zero]).unwrap();
    let on = |t: &Tensor| t.to_device(Device::Cuda(0)).unwrap();
    let got = op.apply(&[&on(&x), &on(&scale), &on(&zero)]).unwrap();
    assert_eq!(got[0].device(), Device::Cuda(0));
    let back = got[0].to_device(Device::Cpu).unwrap();
    assert_eq!(bits(&back), bits(&want[0]));
    let op = Op::FakeQuant(FakeQuantOp::PerTensor {
        quant_min: 0,
        quant_max: 255,
    });
    let scale = Tensor::from_vec(vec![0.1f32], &[1]).unwrap();
    let good = Tensor::from_vec(vec![7i64], &[1]).unwrap();
    let want = op.apply(&[&x, &scale, &good]).unwrap();
    let got = op.apply(&[&on(&x), &on(&scale), &on(&good)]).unwrap();
    assert_eq!(
        bits(&got[0].to_device(Device::Cpu).unwrap()),
        bits(&want[0])
    );
    let bad = Tensor::from_vec(vec![300i64], &[1]).unwrap();
    let err = op.apply(&[&on(&x), &on(&scale), &on(&bad)]).unwrap_err();
    let mut text = err.to_string();
    let mut cause = std::error::Error::source(&err);
    while let Some(c) = cause {
        text += &format!(": {c}");
        cause = c.source();
    }
    assert!(text.contains("fake_quantize_per_tensor_affine"), "{text}");
    assert!(
        text.contains("index 300 is out of bounds for a dimension of size 256"),
        "{text}"
    );
}

/// A quantized `op` on `inputs`: emulated PTX, the interpreter and eager execution give the
/// same dtype and bits.
fn quant_agrees(op: Op, inputs: &[Tensor]) {
    quant_agrees_with(op, inputs, LowerOptions::default());
}

/// [`quant_agrees`] lowered with `options`.
fn quant_agrees_with(op: Op, inputs: &[Tensor], options: LowerOptions) {
    let program = common::lowered_with(op.clone(), inputs, 1, options);
    assert!(program.fallbacks.is_empty(), "{program}");
    let want = run_program(&program, &NoEnvironment, &Interpreter, inputs).unwrap();
    let got = run_program(&program, &NoEnvironment, &EmulatedPtx::default(), inputs).unwrap();
    let refs: Vec<&Tensor> = inputs.iter().collect();
    let eager = op.apply(&refs).unwrap();
    assert_eq!(got[0].dtype(), eager[0].dtype(), "{program}");
    assert_eq!(
        exact_bits(&got[0]),
        exact_bits(&want[0]),
        "emulated PTX vs interpreter\n{program}"
    );
    assert_eq!(
        exact_bits(&want[0]),
        exact_bits(&eager[0]),
        "interpreter vs eager\n{program}"
    );
}

#[test]
fn quantize_and_dequantize_on_emulated_ptx_equal_the_interpreter_and_eager() {
    for (dtype, range) in QUANTIZED_TYPES {
        for float in [DType::F32, DType::F64] {
            for (seed, scale) in [0.5f32, 0.1, 1.0e-30].into_iter().enumerate() {
                let op = Op::Quant(QuantOp::QuantizePerTensor {
                    scale: f64::from(scale),
                    zero_point: range.1,
                    dtype,
                });
                quant_agrees(op, &[float_inputs(float, &[5, 13], seed)]);
            }
            for (shape, axis) in [(vec![4, 3, 5], 0), (vec![4, 3, 5], 1), (vec![4, 3, 5], 2)] {
                let op = Op::Quant(QuantOp::QuantizePerChannel { axis, dtype });
                let x = float_inputs(float, &shape, axis);
                let scales = valid_scales(shape[axis], axis);
                let zero = integer_zero_points(shape[axis], range, axis);
                quant_agrees(op, &[x, scales, zero]);
            }
        }
        let op = Op::Quant(QuantOp::DequantizePerTensor {
            scale: 0.1,
            zero_point: range.0,
        });
        quant_agrees(op, &[quantized_inputs(dtype, &[5, 13], 1)]);
        for axis in [0, 2] {
            let op = Op::Quant(QuantOp::DequantizePerChannel { axis });
            let shape = [4, 3, 5];
            let q = quantized_inputs(dtype, &shape, axis);
            let zero = integer_zero_points(shape[axis], range, 2);
            quant_agrees(op, &[q, valid_scales(shape[axis], 1), zero]);
        }
    }
}

#[test]
fn the_int8_add_on_emulated_ptx_equals_the_interpreter_and_eager() {
    for relu in [false, true] {
        let op = Op::Quant(QuantOp::Add {
            a_scale: 0.5,
            a_zero_point: 3,
            b_scale: 0.25,
            b_zero_point: 200,
            out_scale: 0.5,
            out_zero_point: 7,
            relu,
        });
        let a = quantized_inputs(DType::U8, &[2, 3, 4, 5], 0);
        let b = quantized_inputs(DType::U8, &[2, 3, 4, 5], 3);
        quant_agrees(op, &[a, b]);
    }
}

#[test]
fn the_u8_average_pools_on_emulated_ptx_equal_the_interpreter_and_eager() {
    for (i, params) in u8_pool_windows().into_iter().enumerate() {
        let pool = PoolOp::AvgPool2d {
            params,
            count_include_pad: false,
        };
        for zero_point in [POOL_ZERO_POINTS[i % 5], POOL_ZERO_POINTS[(i + 1) % 5]] {
            let op = Op::Quant(QuantOp::AvgPool {
                pool: pool.clone(),
                zero_point,
            });
            quant_agrees(op, &[u8_pool_values(&[2, 2, 11, 10], i)]);
        }
    }
    for (i, (plane, output_size)) in U8_ADAPTIVE_BINS.into_iter().enumerate() {
        let op = Op::Quant(QuantOp::AvgPool {
            pool: PoolOp::AdaptiveAvgPool2d { output_size },
            zero_point: POOL_ZERO_POINTS[i % 5],
        });
        quant_agrees(op, &[u8_pool_values(&[2, plane[0], plane[1]], i)]);
    }
    // A plain average pool of u8 values: the same kernel with zero point 0.
    let op = Op::Pool(PoolOp::AvgPool2d {
        params: pool_window([3, 3], [2, 2], [1, 1], true),
        count_include_pad: false,
    });
    quant_agrees(op, &[u8_pool_values(&[1, 3, 9, 8], 2)]);
}

#[test]
fn u8_average_pools_of_cuda_tensors_equal_the_cpu() {
    crate::eager_common::backend();
    let on = |t: &Tensor| t.to_device(Device::Cuda(0)).unwrap();
    let x = u8_pool_values(&[2, 9, 8, 3], 1);
    let channels_last = x.permute(&[0, 3, 1, 2]).unwrap();
    let windowed = PoolOp::AvgPool2d {
        params: pool_window([3, 2], [2, 2], [1, 1], true),
        count_include_pad: false,
    };
    let adaptive = PoolOp::AdaptiveAvgPool2d {
        output_size: [4, 3],
    };
    for pool in [windowed, adaptive] {
        let op = Op::Quant(QuantOp::AvgPool {
            pool,
            zero_point: 37,
        });
        let want = op.apply(&[&channels_last]).unwrap();
        let got = op.apply(&[&on(&channels_last)]).unwrap();
        assert_eq!(got[0].device(), Device::Cuda(0));
        let back = got[0].to_device(Device::Cpu).unwrap();
        assert_eq!(back.dtype(), DType::U8);
        assert_eq!(exact_bits(&back), exact_bits(&want[0]), "{}", op.name());
    }
}

/// Every case of an int8 product (at least `at_least` of them) lowered with product kernels
/// agrees on emulated PTX with the interpreter and eager.
fn int8_products_agree(
    cases: Vec<tessera_testkit::quant_linear_cases::LinearCase>,
    at_least: usize,
) {
    let options = LowerOptions {
        product_kernels: true,
        weights_as_stored: true,
        ..LowerOptions::default()
    };
    assert!(cases.len() >= at_least);
    for case in cases {
        quant_agrees_with(case.op, &case.inputs, options);
    }
}

#[test]
fn the_static_int8_linear_on_emulated_ptx_equals_the_interpreter_and_eager() {
    int8_products_agree(static_linear_cases(), 150);
}

#[test]
fn the_dynamic_int8_linear_on_emulated_ptx_equals_the_interpreter_and_eager() {
    int8_products_agree(dynamic_linear_cases(), 35);
}

#[test]
fn the_static_int8_conv2d_on_emulated_ptx_equals_the_interpreter_and_eager() {
    int8_products_agree(static_conv_cases(), 270);
}

#[test]
fn dynamic_int8_linears_of_cuda_tensors_equal_the_cpu() {
    crate::eager_common::backend();
    let on = |t: &Tensor| t.to_device(Device::Cuda(0)).unwrap();
    // A transposed input with NaN and infinities, per-channel weight zero points, bias.
    let x = Tensor::from_vec(x_values(21, 4), &[7, 3])
        .unwrap()
        .transpose(0, 1)
        .unwrap();
    let w = quantized_inputs(DType::I8, &[5, 7], 2);
    let scales = valid_scales(5, 1);
    let zero_points = integer_zero_points(5, (-128, 127), 3);
    let bias = Tensor::from_vec(vec![0.25f32, -3.75, 40.5, 1.0e4, 0.0], &[5]).unwrap();
    for reduce_range in [false, true] {
        let op = Op::Quant(QuantOp::LinearDynamic {
            bias: true,
            reduce_range,
        });
        let inputs = [&x, &w, &scales, &zero_points, &bias];
        let want = op.apply(&inputs).unwrap();
        let on_device: Vec<Tensor> = inputs.iter().map(|t| on(t)).collect();
        let got = op.apply(&on_device.iter().collect::<Vec<_>>()).unwrap();
        assert_eq!(got[0].device(), Device::Cuda(0));
        let back = got[0].to_device(Device::Cpu).unwrap();
        assert_eq!(back.dtype(), DType::F32);
        assert_eq!(
            exact_bits(&back),
            exact_bits(&want[0]),
            "reduce_range {reduce_range}"
        );
    }
}

/// The static int8 product `op(relu)` of `x` and `w` (of `n` output channels) with per-channel
/// weight zero points and bias, without and with ReLU: on CUDA tensors equal to the CPU.
fn static_products_of_cuda_tensors_equal_the_cpu(
    op: impl Fn(bool) -> Op,
    x: &Tensor,
    w: &Tensor,
    n: usize,
) {
    crate::eager_common::backend();
    let on = |t: &Tensor| t.to_device(Device::Cuda(0)).unwrap();
    let scales = valid_scales(n, 1);
    let zero_points = integer_zero_points(n, (-128, 127), 3);
    const BIAS: [f32; 5] = [0.25, -3.75, 40.5, 1.0e4, 0.0];
    let bias: Vec<f32> = (0..n).map(|c| BIAS[c % BIAS.len()]).collect();
    let bias = Tensor::from_vec(bias, &[n]).unwrap();
    for relu in [false, true] {
        let op = op(relu);
        let inputs = [x, w, &scales, &zero_points, &bias];
        let want = op.apply(&inputs).unwrap();
        let on_device: Vec<Tensor> = inputs.iter().map(|t| on(t)).collect();
        let got = op.apply(&on_device.iter().collect::<Vec<_>>()).unwrap();
        assert_eq!(got[0].device(), Device::Cuda(0));
        let back = got[0].to_device(Device::Cpu).unwrap();
        assert_eq!(back.dtype(), DType::U8);
        assert_eq!(back.shape(), want[0].shape());
        assert_eq!(
            exact_bits(&back),
            exact_bits(&want[0]),
            "{} relu {relu}",
            op.name()
        );
    }
}

#[test]
fn static_int8_linears_of_cuda_tensors_equal_the_cpu() {
    // A transposed input.
    let x = quantized_inputs(DType::U8, &[7, 3], 1)
        .transpose(0, 1)
        .unwrap();
    let w = quantized_inputs(DType::I8, &[5, 7], 2);
    let linear = |relu| {
        Op::Quant(QuantOp::Linear {
            x_scale: 0.1,
            x_zero_point: 7,
            out_scale: 40.0,
            out_zero_point: 64,
            relu,
            bias: true,
        })
    };
    static_products_of_cuda_tensors_equal_the_cpu(linear, &x, &w, 5);
}

#[test]
fn static_int8_conv2ds_of_cuda_tensors_equal_the_cpu() {
    // A channels-last input (as eager's quantized convolutions return), stride, padding and
    // dilation differing per axis.
    let x = quantized_inputs(DType::U8, &[2, 6, 5, 3], 1)
        .permute(&[0, 3, 1, 2])
        .unwrap();
    let w = quantized_inputs(DType::I8, &[4, 3, 3, 2], 2);
    let conv = |relu| {
        Op::Quant(QuantOp::Conv2d {
            params: ConvParams::conv2d([2, 1], [1, 2], [1, 2], 1),
            x_scale: 0.1,
            x_zero_point: 7,
            out_scale: 0.5,
            out_zero_point: 64,
            relu,
            bias: true,
        })
    };
    static_products_of_cuda_tensors_equal_the_cpu(conv, &x, &w, 4);
}

#[test]
fn a_quantized_conv_block_of_cuda_tensors_equals_the_cpu() {
    crate::eager_common::backend();
    // quantize -> 3x3 conv + ReLU -> strided 1x1 conv -> u8 average pool -> dequantize, each
    // conv reading the previous op's output (channels last on the CPU, packed on the device).
    let x = float_inputs(DType::F32, &[2, 3, 7, 6], 4);
    let w1 = quantized_inputs(DType::I8, &[5, 3, 3, 3], 1);
    let w2 = quantized_inputs(DType::I8, &[4, 5, 1, 1], 2);
    let (s1, z1) = (valid_scales(5, 0), integer_zero_points(5, (-128, 127), 1));
    let (s2, z2) = (
        Tensor::from_vec(vec![0.02f32], &[1]).unwrap(),
        Tensor::from_vec(vec![0i64], &[1]).unwrap(),
    );
    let conv = |params, x_zero_point, out_zero_point, relu| {
        Op::Quant(QuantOp::Conv2d {
            params,
            x_scale: 0.05,
            x_zero_point,
            out_scale: 0.1,
            out_zero_point,
            relu,
            bias: false,
        })
    };
    let block = |place: &dyn Fn(&Tensor) -> Tensor| -> Tensor {
        let one = |op: Op, inputs: &[&Tensor]| op.apply1(inputs).unwrap();
        let q = Op::Quant(QuantOp::QuantizePerTensor {
            scale: 0.05,
            zero_point: 100,
            dtype: DType::U8,
        });
        let y = one(q, &[&place(&x)]);
        let first = conv(ConvParams::conv2d([1, 1], [1, 1], [1, 1], 1), 100, 30, true);
        let y = one(first, &[&y, &place(&w1), &place(&s1), &place(&z1)]);
        let second = conv(
            ConvParams::conv2d([2, 2], [0, 0], [1, 1], 1),
            30,
            128,
            false,
        );
        let y = one(second, &[&y, &place(&w2), &place(&s2), &place(&z2)]);
        let pool = Op::Quant(QuantOp::AvgPool {
            pool: PoolOp::AdaptiveAvgPool2d {
                output_size: [1, 1],
            },
            zero_point: 128,
        });
        let y = one(pool, &[&y]);
        let dq = Op::Quant(QuantOp::DequantizePerTensor {
            scale: 0.1,
            zero_point: 128,
        });
        one(dq, &[&y])
    };
    let want = block(&|t: &Tensor| t.clone());
    let got = block(&|t: &Tensor| t.to_device(Device::Cuda(0)).unwrap());
    assert_eq!(got.device(), Device::Cuda(0));
    let back = got.to_device(Device::Cpu).unwrap();
    assert_eq!(back.shape(), [2, 4, 1, 1]);
    assert_eq!(exact_bits(&back), exact_bits(&want));
}

#[test]
fn quantized_ops_of_cuda_tensors_equal_the_cpu_and_report_bad_channel_parameters() {
    crate::eager_common::backend();
    let on = |t: &Tensor| t.to_device(Device::Cuda(0)).unwrap();
    let op = Op::Quant(QuantOp::QuantizePerChannel {
        axis: 1,
        dtype: DType::I8,
    });
    let x = float_inputs(DType::F32, &[4, 6], 2);
    let scales = valid_scales(6, 0);
    let zero = integer_zero_points(6, (-128, 127), 0);
    let want = op.apply(&[&x, &scales, &zero]).unwrap();
    let got = op.apply(&[&on(&x), &on(&scales), &on(&zero)]).unwrap();
    assert_eq!(got[0].device(), Device::Cuda(0));
    let back = got[0].to_device(Device::Cpu).unwrap();
    assert_eq!(exact_bits(&back), exact_bits(&want[0]));
    let dequantize = Op::Quant(QuantOp::DequantizePerChannel { axis: 1 });
    let want = dequantize.apply(&[&want[0], &scales, &zero]).unwrap();
    let got = dequantize
        .apply(&[&got[0], &on(&scales), &on(&zero)])
        .unwrap();
    let back = got[0].to_device(Device::Cpu).unwrap();
    assert_eq!(exact_bits(&back), exact_bits(&want[0]));
    let bad = Tensor::from_vec(vec![0i64, 0, 0, 128, 0, 0], &[6]).unwrap();
    assert!(op.apply(&[&x, &scales, &bad]).is_err());
    let err = op.apply(&[&on(&x), &on(&scales), &on(&bad)]).unwrap_err();
    let mut text = err.to_string();
    let mut cause = std::error::Error::source(&err);
    while let Some(c) = cause {
        text += &format!(": {c}");
        cause = c.source();
    }
    assert!(text.contains("quantize_per_channel"), "{text}");
    assert!(
        text.contains("index 256 is out of bounds for a dimension of size 256"),
        "{text}"
    );
}

/// The learnable backward `op` on `inputs`: emulated PTX against the interpreter and eager.
fn gradients_agree_on_ptx(op: Op, inputs: &[Tensor]) {
    let form = learnable_form(&op).expect("a learnable backward");
    let program = common::lowered(op.clone(), inputs, 3);
    assert_eq!(program.kernels().count(), 1, "{program}");
    let want = run_program(&program, &NoEnvironment, &Interpreter, inputs).unwrap();
    let got = run_program(&program, &NoEnvironment, &EmulatedPtx::default(), inputs).unwrap();
    let refs: Vec<&Tensor> = inputs.iter().collect();
    let eager = op.apply(&refs).unwrap();
    gradients_agree("emulated PTX vs interpreter", &got, &want, inputs, form);
    gradients_agree("emulated PTX vs eager", &got, &eager, inputs, form);
}

#[test]
fn learnable_fake_quant_gradients_on_emulated_ptx_agree_with_the_interpreter_and_eager() {
    for (quant_min, quant_max) in RANGES {
        let per_tensor = Op::FakeQuantBackward(FakeQuantOp::LearnablePerTensor {
            quant_min,
            quant_max,
            grad_factor: 1.0,
        });
        for seed in 0..6 {
            for shape in [vec![5, 13], vec![0, 3], vec![300]] {
                gradients_agree_on_ptx(per_tensor.clone(), &gradient_case(&shape, 1, seed));
            }
        }
        for (shape, axis) in [
            (vec![4, 3, 5], 0),
            (vec![4, 3, 5], 1),
            (vec![4, 3, 5], 2),
            (vec![7], 0),
        ] {
            let per_channel = Op::FakeQuantBackward(FakeQuantOp::LearnablePerChannel {
                axis,
                quant_min,
                quant_max,
                grad_factor: 0.5,
            });
            for seed in 0..4 {
                let inputs = gradient_case(&shape, shape[axis], seed);
                gradients_agree_on_ptx(per_channel.clone(), &inputs);
            }
        }
    }
}

#[test]
fn learnable_fake_quant_gradients_of_cuda_tensors_agree_with_the_cpu() {
    crate::eager_common::backend();
    let op = Op::FakeQuantBackward(FakeQuantOp::LearnablePerChannel {
        axis: 1,
        quant_min: -128,
        quant_max: 127,
        grad_factor: 1.0,
    });
    let inputs = gradient_case(&[4, 6, 3], 6, 2);
    let refs: Vec<&Tensor> = inputs.iter().collect();
    let want = op.apply(&refs).unwrap();
    let on: Vec<Tensor> = inputs
        .iter()
        .map(|t| t.to_device(Device::Cuda(0)).unwrap())
        .collect();
    let got = op.apply(&on.iter().collect::<Vec<_>>()).unwrap();
    assert!(got.iter().all(|t| t.device() == Device::Cuda(0)));
    let back: Vec<Tensor> = got
        .iter()
        .map(|t| t.to_device(Device::Cpu).unwrap())
        .collect();
    let form = learnable_form(&op).unwrap();
    gradients_agree("cuda tensors vs cpu", &back, &want, &inputs, form);
}
