//! Quantized ops: rounding and clamping of quantize, per-channel parameters, round trips, the
//! int8 GEMM against an f64 reference and every SIMD kernel against the scalar one exactly,
//! the dynamic and static int8 linears and conv against float within their quantization
//! error, and shape/dtype errors.

use tessera_tensor::op::quant::{
    Int8Kernel, QParams, QuantizedWeight, affine_qparams, dequantize, dynamic_qparams,
    gemm_u8i8_with, linear_dynamic_int8, quantize_per_channel, quantize_per_tensor,
};
use tessera_tensor::op::{ConvParams, QuantOp};
use tessera_tensor::{DType, Generator, Op, Tensor, TensorError};
use tessera_testkit::rounding_bound;

fn f32s(values: &[f32], shape: &[usize]) -> Tensor {
    Tensor::from_vec(values.to_vec(), shape).unwrap()
}

fn randn(shape: &[usize], seed: u64) -> Tensor {
    Tensor::randn_with(shape, DType::F32, &mut Generator::new(seed)).unwrap()
}

fn values(t: &Tensor) -> Vec<f32> {
    t.to_dtype(DType::F32).unwrap().to_vec::<f32>().unwrap()
}

/// Deterministic pseudo-random bytes (a 64-bit LCG's high bits).
fn bytes(n: usize, seed: u64) -> Vec<u8> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (s >> 56) as u8
        })
        .collect()
}

#[test]
fn quantize_rounds_half_to_even_and_clamps_to_the_dtype() {
    let x = f32s(&[0.5, 1.5, 2.5, -0.5, -1.5, 1000.0, -1000.0], &[7]);
    let q = quantize_per_tensor(&x, QParams::new(1.0, 0), DType::I8).unwrap();
    assert_eq!(q.dtype(), DType::I8);
    assert_eq!(q.to_vec::<i8>().unwrap(), [0, 2, 2, 0, -2, 127, -128]);
    let q = quantize_per_tensor(&x, QParams::new(0.5, 10), DType::U8).unwrap();
    assert_eq!(q.to_vec::<u8>().unwrap(), [11, 13, 15, 9, 7, 255, 0]);
}

#[test]
fn u8_quantize_of_every_kind_of_f32_equals_the_definition() {
    // Ties at every half step, values past both ends, infinities and NaN, with a length that
    // leaves a tail after the eight-wide vector loop.
    let mut values: Vec<f32> = (-600..600).map(|i| i as f32 * 0.25).collect();
    values.extend([
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        1e30,
        -1e30,
        3.0e9,
        -3.0e9,
    ]);
    for q in [
        QParams::new(0.5, 10),
        QParams::new(0.1, 255),
        QParams::new(3.0, 0),
    ] {
        let expected: Vec<u8> = values
            .iter()
            .map(|&v| {
                let r = v * (1.0 / q.scale);
                let r = if r.is_nan() {
                    0
                } else {
                    r.round_ties_even() as i64
                };
                r.saturating_add(q.zero_point).clamp(0, 255) as u8
            })
            .collect();
        let x = f32s(&values, &[values.len()]);
        let y = quantize_per_tensor(&x, q, DType::U8).unwrap();
        assert_eq!(y.to_vec::<u8>().unwrap(), expected, "{q:?}");
    }
}

#[test]
fn dequantize_of_quantize_is_within_half_a_step() {
    let x = randn(&[1000], 1);
    let v = values(&x);
    let (lo, hi) = v
        .iter()
        .fold((0f32, 0f32), |(a, b), &x| (a.min(x), b.max(x)));
    let p = affine_qparams(lo, hi, (0, 255));
    let back = values(&dequantize(&quantize_per_tensor(&x, p, DType::U8).unwrap(), p).unwrap());
    for (a, b) in v.iter().zip(&back) {
        assert!((a - b).abs() <= p.scale / 2.0 + 1e-6, "{a} vs {b}");
    }
}

#[test]
fn per_channel_quantization_uses_each_channels_parameters() {
    let x = f32s(&[1.0, 2.0, 3.0, 1.0, 2.0, 3.0], &[2, 3]);
    let scales = f32s(&[1.0, 0.5], &[2]);
    let zps = Tensor::from_vec(vec![0i64, 3], &[2]).unwrap();
    let q = quantize_per_channel(&x, &scales, &zps, 0, DType::I8).unwrap();
    assert_eq!(q.to_vec::<i8>().unwrap(), [1, 2, 3, 5, 7, 9]);
    let back = Op::Quant(QuantOp::DequantizePerChannel { axis: 0 })
        .apply1(&[&q, &scales, &zps])
        .unwrap();
    assert_eq!(values(&back), [1.0, 2.0, 3.0, 1.0, 2.0, 3.0]);
    // Along the last axis instead.
    let scales = f32s(&[1.0, 0.5, 0.25], &[3]);
    let zps = Tensor::from_vec(vec![0i64, 0, 0], &[3]).unwrap();
    let q = quantize_per_channel(&x, &scales, &zps, 1, DType::I8).unwrap();
    assert_eq!(q.to_vec::<i8>().unwrap(), [1, 4, 12, 1, 4, 12]);
}

#[test]
fn symmetric_weights_have_zero_point_zero_and_the_max_on_the_edge() {
    let w = f32s(&[-1.0, 0.5, 0.25, 2.0], &[2, 2]);
    let q = QuantizedWeight::symmetric(&w, true).unwrap();
    assert_eq!(q.zero_points.to_vec::<i64>().unwrap(), [0, 0]);
    let scales = q.scales.to_vec::<f32>().unwrap();
    assert!((scales[0] - 1.0 / 127.5).abs() < 1e-7 && (scales[1] - 2.0 / 127.5).abs() < 1e-7);
    // -1 / (1 / 127.5) is -127.49999 in f32, so the negative edge rounds to -127.
    assert_eq!(q.weight.to_vec::<i8>().unwrap(), [-127, 64, 16, 127]);
    let per_tensor = QuantizedWeight::symmetric(&w, false).unwrap();
    assert_eq!(per_tensor.scales.shape(), [1]);
}

#[test]
fn dynamic_qparams_match_fbgemm_for_an_all_positive_range() {
    // The range is widened to hold 0: [0, 2.55] gives scale 0.01 and zero point 0.
    let p = dynamic_qparams(0.5, 2.55, false);
    assert!((p.scale - 0.01).abs() < 1e-8 && p.zero_point == 0, "{p:?}");
    // A symmetric range puts the zero point in the middle (127.5 before rounding).
    let p = dynamic_qparams(-1.0, 1.0, false);
    assert!((127..=128).contains(&p.zero_point), "{p:?}");
    assert_eq!(dynamic_qparams(0.0, 0.0, false), QParams::new(0.1, 0));
}

/// `sum_k a[i, k] * b[j, k]` in f64.
fn reference_gemm(a: &[u8], b: &[i8], m: usize, n: usize, k: usize) -> Vec<f64> {
    let mut c = vec![0f64; m * n];
    for i in 0..m {
        for j in 0..n {
            c[i * n + j] = (0..k)
                .map(|p| f64::from(a[i * k + p]) * f64::from(b[j * k + p]))
                .sum();
        }
    }
    c
}

const GEMM_SIZES: [(usize, usize, usize); 7] = [
    (1, 1, 1),
    (4, 4, 64),
    (7, 13, 100),
    (5, 3, 129),
    (33, 70, 257),
    (64, 64, 1024),
    (9, 65, 31),
];

#[test]
fn int8_gemm_matches_an_f64_reference_at_the_extremes() {
    for (m, n, k) in GEMM_SIZES {
        let a = bytes(m * k, 1);
        let b: Vec<i8> = bytes(n * k, 2).into_iter().map(|v| v as i8).collect();
        let mut c = vec![0i32; m * n];
        gemm_u8i8_with(Int8Kernel::best(), &a, &b, &mut c, (m, n, k), true).unwrap();
        let expected = reference_gemm(&a, &b, m, n, k);
        for (x, e) in c.iter().zip(&expected) {
            assert_eq!(f64::from(*x), *e, "m={m} n={n} k={k}");
        }
        // All 255 times all -128: the largest products, no saturation.
        let a = vec![255u8; m * k];
        let b = vec![-128i8; n * k];
        gemm_u8i8_with(Int8Kernel::best(), &a, &b, &mut c, (m, n, k), true).unwrap();
        assert!(
            c.iter().all(|&v| v == -255 * 128 * k as i32),
            "m={m} n={n} k={k}"
        );
    }
}

#[test]
fn every_simd_kernel_equals_the_scalar_kernel_exactly() {
    let kernels = Int8Kernel::available();
    eprintln!("int8 kernels on this CPU: {kernels:?}");
    for (m, n, k) in GEMM_SIZES {
        let a = bytes(m * k, 3);
        let b: Vec<i8> = bytes(n * k, 4).into_iter().map(|v| v as i8).collect();
        let mut scalar = vec![0i32; m * n];
        gemm_u8i8_with(Int8Kernel::Scalar, &a, &b, &mut scalar, (m, n, k), false).unwrap();
        for &kernel in &kernels {
            for parallel in [false, true] {
                let mut c = vec![7i32; m * n];
                gemm_u8i8_with(kernel, &a, &b, &mut c, (m, n, k), parallel).unwrap();
                assert_eq!(
                    c, scalar,
                    "{kernel:?} m={m} n={n} k={k} parallel={parallel}"
                );
            }
        }
    }
}

#[test]
fn int8_gemm_refuses_short_operands() {
    let err = gemm_u8i8_with(
        Int8Kernel::Scalar,
        &[1, 2],
        &[1],
        &mut [0],
        (1, 1, 3),
        false,
    )
    .unwrap_err();
    assert!(err.to_string().contains("gemm_u8i8"), "{err}");
}

#[test]
fn dynamic_linear_is_within_the_rounding_bound_of_float() {
    let (m, k, n) = (16, 96, 24);
    let x = randn(&[m, k], 5);
    let w = randn(&[n, k], 6).mul_scalar(0.1).unwrap();
    let b = randn(&[n], 7);
    for per_channel in [true, false] {
        let qw = QuantizedWeight::symmetric(&w, per_channel).unwrap();
        let y = linear_dynamic_int8(&x, &qw, Some(&b), false).unwrap();
        let expected = values(&x.linear(&w, Some(&b)).unwrap());
        let (xv, wv) = (values(&x), values(&w));
        let (lo, hi) = xv
            .iter()
            .fold((0f32, 0f32), |(a, c), &v| (a.min(v), c.max(v)));
        let x_step = dynamic_qparams(lo, hi, false).scale;
        let w_steps = values(&qw.scales);
        for (i, (a, e)) in values(&y).iter().zip(&expected).enumerate() {
            let (r, c) = (i / n, i % n);
            let w_step = if per_channel { w_steps[c] } else { w_steps[0] };
            let bound = rounding_bound(&xv[r * k..][..k], &wv[c * k..][..k], x_step, w_step);
            assert!(
                (a - e).abs() <= bound + 1e-4,
                "per_channel={per_channel} [{r}, {c}]: {a} vs {e}, bound {bound}"
            );
        }
    }
}

#[test]
fn int8_linears_of_no_input_features_are_shape_errors() {
    let x = Tensor::from_vec(Vec::<f32>::new(), &[2, 0]).unwrap();
    let w = Tensor::from_vec(Vec::<i8>::new(), &[3, 0]).unwrap();
    let scales = Tensor::from_vec(vec![0.5f32; 3], &[3]).unwrap();
    let zero_points = Tensor::from_vec(vec![0i64; 3], &[3]).unwrap();
    let dynamic = Op::Quant(QuantOp::LinearDynamic {
        bias: false,
        reduce_range: false,
    });
    let err = dynamic.apply(&[&x, &w, &scales, &zero_points]).unwrap_err();
    assert!(matches!(err, TensorError::ShapeMismatch { .. }), "{err}");
    assert!(
        err.to_string().contains("at least one input feature"),
        "{err}"
    );
    let xq = x.to_dtype(DType::U8).unwrap();
    let fixed = Op::Quant(QuantOp::Linear {
        x_scale: 0.5,
        x_zero_point: 3,
        out_scale: 0.5,
        out_zero_point: 3,
        relu: false,
        bias: false,
    });
    let err = fixed.apply(&[&xq, &w, &scales, &zero_points]).unwrap_err();
    assert!(
        err.to_string().contains("at least one input feature"),
        "{err}"
    );
}

#[test]
fn int8_conv2ds_of_no_input_channels_are_shape_errors() {
    let x = Tensor::from_vec(Vec::<u8>::new(), &[2, 0, 3, 3]).unwrap();
    let w = Tensor::from_vec(Vec::<i8>::new(), &[3, 0, 2, 2]).unwrap();
    let scales = Tensor::from_vec(vec![0.5f32; 3], &[3]).unwrap();
    let zero_points = Tensor::from_vec(vec![0i64; 3], &[3]).unwrap();
    let op = Op::Quant(QuantOp::Conv2d {
        params: ConvParams::conv2d([1, 1], [1, 0], [1, 1], 1),
        x_scale: 0.5,
        x_zero_point: 3,
        out_scale: 0.5,
        out_zero_point: 3,
        relu: false,
        bias: false,
    });
    let err = op.apply(&[&x, &w, &scales, &zero_points]).unwrap_err();
    assert!(matches!(err, TensorError::ShapeMismatch { .. }), "{err}");
    assert!(
        err.to_string().contains("at least one input channel"),
        "{err}"
    );
}

#[test]
fn dynamic_linear_keeps_leading_dimensions() {
    let x = randn(&[2, 3, 8], 8);
    let qw = QuantizedWeight::symmetric(&randn(&[5, 8], 9), false).unwrap();
    let y = linear_dynamic_int8(&x, &qw, None, true).unwrap();
    assert_eq!(y.shape(), [2, 3, 5]);
    assert_eq!(y.dtype(), DType::F32);
}

#[test]
fn static_linear_and_conv_agree_with_float_on_the_dequantized_values_within_a_step() {
    let xp = QParams::new(0.02, 100);
    let outp = QParams::new(0.05, 60);
    let x = quantize_per_tensor(&randn(&[2, 3, 9, 9], 10), xp, DType::U8).unwrap();
    let qw = QuantizedWeight::symmetric(&randn(&[4, 3, 3, 3], 11), true).unwrap();
    let b = randn(&[4], 12);
    for relu in [false, true] {
        let params = ConvParams::conv2d([2, 2], [1, 1], [1, 1], 1);
        let op = Op::Quant(QuantOp::Conv2d {
            params,
            x_scale: f64::from(xp.scale),
            x_zero_point: xp.zero_point,
            out_scale: f64::from(outp.scale),
            out_zero_point: outp.zero_point,
            relu,
            bias: true,
        });
        let y = op
            .apply1(&[&x, &qw.weight, &qw.scales, &qw.zero_points, &b])
            .unwrap();
        let float = tessera_tensor::functional::conv2d(
            &dequantize(&x, xp).unwrap(),
            &qw.dequantize().unwrap(),
            Some(&b),
            [2, 2],
            [1, 1],
            [1, 1],
            1,
        )
        .unwrap();
        let float = if relu { float.relu().unwrap() } else { float };
        let expected = quantize_per_tensor(&float, outp, DType::U8).unwrap();
        assert_eq!(y.shape(), expected.shape());
        assert_within_one_step(&y, &expected, &format!("relu={relu}"));
    }
    // The linear on the same kind of values.
    let x = quantize_per_tensor(&randn(&[5, 20], 13), xp, DType::U8).unwrap();
    let qw = QuantizedWeight::symmetric(&randn(&[6, 20], 14), false).unwrap();
    let op = Op::Quant(QuantOp::Linear {
        x_scale: f64::from(xp.scale),
        x_zero_point: xp.zero_point,
        out_scale: f64::from(outp.scale),
        out_zero_point: outp.zero_point,
        relu: true,
        bias: false,
    });
    let y = op
        .apply1(&[&x, &qw.weight, &qw.scales, &qw.zero_points])
        .unwrap();
    let float = dequantize(&x, xp)
        .unwrap()
        .linear(&qw.dequantize().unwrap(), None)
        .unwrap()
        .relu()
        .unwrap();
    let expected = quantize_per_tensor(&float, outp, DType::U8).unwrap();
    assert_within_one_step(&y, &expected, "linear");
}

/// Asserts each u8 of `actual` is within one quantisation step of `expected`'s (rounding may
/// land either side); `what` names the case.
fn assert_within_one_step(actual: &Tensor, expected: &Tensor, what: &str) {
    let expected = expected.to_vec::<u8>().unwrap();
    for (a, e) in actual.to_vec::<u8>().unwrap().iter().zip(expected) {
        assert!(a.abs_diff(e) <= 1, "{what}: {a} vs {e}");
    }
}

#[test]
fn bad_shapes_dtypes_and_parameters_are_errors_naming_the_op() {
    let x = randn(&[4, 8], 15);
    let qw = QuantizedWeight::symmetric(&randn(&[3, 8], 16), true).unwrap();
    let run = |op: QuantOp, inputs: &[&Tensor]| Op::Quant(op).apply1(inputs).unwrap_err();
    let dynamic = QuantOp::LinearDynamic {
        bias: false,
        reduce_range: false,
    };
    // Features that do not match.
    let err = run(
        dynamic.clone(),
        &[&randn(&[4, 7], 1), &qw.weight, &qw.scales, &qw.zero_points],
    );
    assert!(matches!(err, TensorError::ShapeMismatch { .. }), "{err}");
    assert!(err.to_string().starts_with("linear_dynamic_int8"), "{err}");
    // A float weight instead of i8.
    let err = run(
        dynamic.clone(),
        &[&x, &randn(&[3, 8], 2), &qw.scales, &qw.zero_points],
    );
    assert!(err.to_string().contains("weight must be i8"), "{err}");
    // Scales for the wrong number of channels.
    let err = run(
        dynamic,
        &[&x, &qw.weight, &f32s(&[1.0, 1.0], &[2]), &qw.zero_points],
    );
    assert!(err.to_string().contains("do not fit 3 channels"), "{err}");
    // Parameters out of range.
    for (scale, zero_point, dtype, expected) in [
        (0.0, 0, DType::U8, "scale must be positive"),
        (1.0, 300, DType::U8, "outside u8's range"),
        (1.0, 0, DType::F32, "must be u8, i8 or i32"),
    ] {
        let q = QuantOp::QuantizePerTensor {
            scale,
            zero_point,
            dtype,
        };
        let err = run(q, &[&x]).to_string();
        assert!(err.contains(expected), "{err}");
    }
    // Dequantizing a float tensor.
    let d = QuantOp::DequantizePerTensor {
        scale: 1.0,
        zero_point: 0,
    };
    assert!(run(d, &[&x]).to_string().starts_with("dequantize"));
    // A grouped quantized conv.
    let conv = QuantOp::Conv2d {
        params: ConvParams::conv2d([1, 1], [0, 0], [1, 1], 2),
        x_scale: 1.0,
        x_zero_point: 0,
        out_scale: 1.0,
        out_zero_point: 0,
        relu: false,
        bias: false,
    };
    let xq = Tensor::zeros(&[1, 2, 4, 4], DType::U8).unwrap();
    let w = QuantizedWeight::symmetric(&randn(&[2, 1, 1, 1], 3), true).unwrap();
    let err = run(conv, &[&xq, &w.weight, &w.scales, &w.zero_points]);
    assert!(err.to_string().contains("groups=1"), "{err}");
}

#[test]
fn quantized_ops_are_inference_only() {
    let x = randn(&[2, 4], 17).requires_grad_(true).unwrap();
    let qw = QuantizedWeight::symmetric(&randn(&[3, 4], 18), true).unwrap();
    let y = linear_dynamic_int8(&x, &qw, None, false).unwrap();
    assert!(!y.requires_grad(), "int8 outputs carry no gradient");
}
