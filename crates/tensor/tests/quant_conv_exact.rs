//! The static int8 conv2d and add against exact references: every u8 output equals the one
//! computed from the integer sum `sum (x - x_zp) * w` with the kernel's requantization
//! arithmetic, for strides, padding, dilation, 1x1 kernels, few input channels (the direct
//! convolution), batches whose parallel tasks span images, odd channel counts, channels-last
//! and strided inputs; the packed weights kept
//! beside a weight's storage are rebuilt when it or its scales are written.

use tessera_tensor::op::quant::{QParams, QuantizedWeight, quantize_per_tensor};
use tessera_tensor::op::{ConvParams, QuantOp};
use tessera_tensor::{DType, Generator, Op, Tensor};

fn randn(shape: &[usize], seed: u64) -> Tensor {
    Tensor::randn_with(shape, DType::F32, &mut Generator::new(seed)).unwrap()
}

/// Round half to even, as the kernels' `cvtps2dq`.
fn round(v: f32) -> i64 {
    v.round_ties_even() as i64
}

/// One conv case: shapes and parameters.
struct Case {
    x: [usize; 4],
    c_out: usize,
    kernel: [usize; 2],
    stride: [usize; 2],
    padding: [usize; 2],
    dilation: [usize; 2],
}

/// The u8 outputs `[N, C_out, oH, oW]` from the definition.
#[allow(clippy::too_many_arguments)] // a reference: every operand of the op spelled out
fn reference_conv(
    case: &Case,
    x: &[u8],
    w: &[i8],
    scales: &[f32],
    bias: &[f32],
    xq: QParams,
    outq: QParams,
    relu: bool,
) -> Vec<u8> {
    let [n, c, h, wd] = case.x;
    let [kh, kw] = case.kernel;
    let out_dim = |size: usize, i: usize| {
        (size + 2 * case.padding[i] - case.dilation[i] * (case.kernel[i] - 1) - 1) / case.stride[i]
            + 1
    };
    let (oh, ow) = (out_dim(h, 0), out_dim(wd, 1));
    let mut out = Vec::new();
    for img in 0..n {
        for co in 0..case.c_out {
            let multiplier = xq.scale * scales[co] / outq.scale;
            let shift = bias[co] / outq.scale + outq.zero_point as f32;
            let lo = if relu { outq.zero_point as f32 } else { 0.0 };
            for oy in 0..oh {
                for ox in 0..ow {
                    let mut acc = 0i64;
                    for ci in 0..c {
                        for i in 0..kh {
                            for j in 0..kw {
                                let iy = (oy * case.stride[0] + i * case.dilation[0]) as isize
                                    - case.padding[0] as isize;
                                let ix = (ox * case.stride[1] + j * case.dilation[1]) as isize
                                    - case.padding[1] as isize;
                                if iy < 0 || ix < 0 || iy >= h as isize || ix >= wd as isize {
                                    continue;
                                }
                                let v = x[((img * c + ci) * h + iy as usize) * wd + ix as usize];
                                let wv = w[((co * c + ci) * kh + i) * kw + j];
                                acc += (i64::from(v) - xq.zero_point) * i64::from(wv);
                            }
                        }
                    }
                    let v = (acc as f32 * multiplier + shift).clamp(lo, 255.0);
                    out.push(round(v) as u8);
                }
            }
        }
    }
    out
}

fn conv_op(case: &Case, xq: QParams, outq: QParams, relu: bool) -> Op {
    Op::Quant(QuantOp::Conv2d {
        params: ConvParams::conv2d(case.stride, case.padding, case.dilation, 1),
        x_scale: f64::from(xq.scale),
        x_zero_point: xq.zero_point,
        out_scale: f64::from(outq.scale),
        out_zero_point: outq.zero_point,
        relu,
        bias: true,
    })
}

const CASES: [Case; 8] = [
    // Padding, stride 2, odd sizes; a batch large enough for tasks to span images.
    Case {
        x: [3, 5, 11, 9],
        c_out: 19,
        kernel: [3, 3],
        stride: [2, 2],
        padding: [1, 1],
        dilation: [1, 1],
    },
    // Pointwise: the channels-last input is the patch matrix.
    Case {
        x: [2, 33, 6, 7],
        c_out: 17,
        kernel: [1, 1],
        stride: [1, 1],
        padding: [0, 0],
        dilation: [1, 1],
    },
    // A strided 1x1 (ResNet's downsample).
    Case {
        x: [2, 8, 7, 7],
        c_out: 16,
        kernel: [1, 1],
        stride: [2, 2],
        padding: [0, 0],
        dilation: [1, 1],
    },
    // Dilation and uneven padding and stride per axis.
    Case {
        x: [1, 3, 13, 10],
        c_out: 5,
        kernel: [3, 2],
        stride: [1, 2],
        padding: [2, 1],
        dilation: [2, 3],
    },
    // A wide first layer (7x7, stride 2, padding 3).
    Case {
        x: [1, 3, 20, 20],
        c_out: 8,
        kernel: [7, 7],
        stride: [2, 2],
        padding: [3, 3],
        dilation: [1, 1],
    },
    // Few input channels (the direct convolution): two blocks of output channels, the last
    // one partial, and a batch whose parallel tasks span images.
    Case {
        x: [3, 3, 10, 9],
        c_out: 19,
        kernel: [3, 3],
        stride: [1, 1],
        padding: [1, 1],
        dilation: [1, 1],
    },
    // One input channel, a tall kernel, stride and padding on one axis only.
    Case {
        x: [2, 1, 7, 8],
        c_out: 8,
        kernel: [5, 3],
        stride: [2, 1],
        padding: [2, 0],
        dilation: [1, 1],
    },
    // Padding wider than the kernel's reach: windows entirely in the padding.
    Case {
        x: [2, 4, 3, 3],
        c_out: 3,
        kernel: [2, 2],
        stride: [1, 1],
        padding: [3, 2],
        dilation: [1, 1],
    },
];

#[test]
fn static_conv_equals_the_integer_reference_for_every_geometry() {
    let xq = QParams::new(0.03, 117);
    let outq = QParams::new(0.07, 41);
    for (index, case) in CASES.iter().enumerate() {
        let [_, c, _, _] = case.x;
        let x = quantize_per_tensor(&randn(&case.x, index as u64), xq, DType::U8).unwrap();
        let weight = randn(
            &[case.c_out, c, case.kernel[0], case.kernel[1]],
            50 + index as u64,
        );
        let bias = randn(&[case.c_out], 90 + index as u64);
        for (per_channel, relu) in [(true, false), (true, true), (false, true)] {
            let qw = QuantizedWeight::symmetric(&weight, per_channel).unwrap();
            let scales = qw.scales.to_vec::<f32>().unwrap();
            let scales = if per_channel {
                scales
            } else {
                vec![scales[0]; case.c_out]
            };
            let op = conv_op(case, xq, outq, relu);
            let y = op
                .apply1(&[&x, &qw.weight, &qw.scales, &qw.zero_points, &bias])
                .unwrap();
            let expected = reference_conv(
                case,
                &x.to_vec::<u8>().unwrap(),
                &qw.weight.to_vec::<i8>().unwrap(),
                &scales,
                &bias.to_vec::<f32>().unwrap(),
                xq,
                outq,
                relu,
            );
            assert_eq!(
                y.to_vec::<u8>().unwrap(),
                expected,
                "case {index}, per_channel={per_channel}, relu={relu}"
            );
        }
    }
}

#[test]
fn static_conv_reads_channels_last_and_strided_inputs_like_contiguous_ones() {
    let xq = QParams::new(0.03, 117);
    let case = &CASES[0];
    let x = quantize_per_tensor(&randn(&case.x, 7), xq, DType::U8).unwrap();
    let qw = QuantizedWeight::symmetric(&randn(&[case.c_out, case.x[1], 3, 3], 8), true).unwrap();
    let bias = randn(&[case.c_out], 9);
    let op = conv_op(case, xq, xq, false);
    let run = |x: &Tensor| {
        op.apply1(&[x, &qw.weight, &qw.scales, &qw.zero_points, &bias])
            .unwrap()
            .to_vec::<u8>()
            .unwrap()
    };
    let expected = run(&x.contiguous().unwrap());
    // Channels-last storage viewed as NCHW (what the conv itself returns).
    let channels_last = x
        .permute(&[0, 2, 3, 1])
        .unwrap()
        .contiguous()
        .unwrap()
        .permute(&[0, 3, 1, 2])
        .unwrap();
    assert!(!channels_last.is_contiguous());
    assert_eq!(run(&channels_last), expected);
    // A narrowed view of a wider tensor.
    let wide = Tensor::cat(&[&x, &x], 3).unwrap();
    let narrowed = wide.narrow(3, case.x[3], case.x[3]).unwrap();
    assert_eq!(run(&narrowed), expected);
    // The conv's output is channels last and feeds another conv as it is.
    let y = op
        .apply1(&[&x, &qw.weight, &qw.scales, &qw.zero_points, &bias])
        .unwrap();
    assert!(y.permute(&[0, 2, 3, 1]).unwrap().is_contiguous());
}

#[test]
fn packed_weights_follow_writes_to_the_weight_and_its_scales() {
    let xq = QParams::new(0.03, 117);
    let case = &CASES[1];
    let x = quantize_per_tensor(&randn(&case.x, 3), xq, DType::U8).unwrap();
    let qw = QuantizedWeight::symmetric(&randn(&[case.c_out, case.x[1], 1, 1], 4), true).unwrap();
    let bias = randn(&[case.c_out], 5);
    let op = conv_op(case, xq, xq, false);
    let run = || {
        op.apply1(&[&x, &qw.weight, &qw.scales, &qw.zero_points, &bias])
            .unwrap()
            .to_vec::<u8>()
            .unwrap()
    };
    let first = run();
    assert_eq!(run(), first, "a second call reuses the packed weights");
    // Negated weights in place: the packed copy must not be reused.
    let negated = qw
        .weight
        .to_vec::<i8>()
        .unwrap()
        .iter()
        .map(|v| -(*v).max(-127))
        .collect();
    let negated = Tensor::from_vec::<i8>(negated, &qw.weight.shape()).unwrap();
    qw.weight.copy_(&negated).unwrap();
    let after_weight = run();
    assert_ne!(after_weight, first);
    let fresh = QuantizedWeight {
        weight: negated,
        ..qw.clone()
    };
    let expected = op
        .apply1(&[&x, &fresh.weight, &fresh.scales, &fresh.zero_points, &bias])
        .unwrap()
        .to_vec::<u8>()
        .unwrap();
    assert_eq!(after_weight, expected);
    // Halved scales in place.
    qw.scales.mul_scalar_(0.5).unwrap();
    let halved = qw
        .scales
        .detach()
        .contiguous()
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    let halved = Tensor::from_vec(halved, &qw.scales.shape()).unwrap();
    let fresh = QuantizedWeight {
        scales: halved,
        ..fresh
    };
    let expected = op
        .apply1(&[&x, &fresh.weight, &fresh.scales, &fresh.zero_points, &bias])
        .unwrap()
        .to_vec::<u8>()
        .unwrap();
    assert_eq!(run(), expected);
}

#[test]
fn static_add_requantizes_the_sum_of_the_values_in_any_layout() {
    let (aq, bq, outq) = (
        QParams::new(0.02, 120),
        QParams::new(0.05, 3),
        QParams::new(0.04, 77),
    );
    let shape = [2, 5, 4, 3];
    let a = quantize_per_tensor(&randn(&shape, 1), aq, DType::U8).unwrap();
    let b = quantize_per_tensor(&randn(&shape, 2), bq, DType::U8).unwrap();
    for relu in [false, true] {
        let op = Op::Quant(QuantOp::Add {
            a_scale: f64::from(aq.scale),
            a_zero_point: aq.zero_point,
            b_scale: f64::from(bq.scale),
            b_zero_point: bq.zero_point,
            out_scale: f64::from(outq.scale),
            out_zero_point: outq.zero_point,
            relu,
        });
        let lo = if relu { outq.zero_point } else { 0 };
        let expected: Vec<u8> = a
            .to_vec::<u8>()
            .unwrap()
            .iter()
            .zip(b.to_vec::<u8>().unwrap())
            .map(|(&a, b)| {
                let v = (f32::from(a) - aq.zero_point as f32) * aq.scale
                    + (f32::from(b) - bq.zero_point as f32) * bq.scale;
                (round(v * (1.0 / outq.scale)) + outq.zero_point).clamp(lo, 255) as u8
            })
            .collect();
        let y = op.apply1(&[&a, &b]).unwrap();
        assert_eq!(y.to_vec::<u8>().unwrap(), expected, "relu={relu}");
        // Channels-last `a` with a contiguous `b`, and the other way round.
        let last = |t: &Tensor| {
            t.permute(&[0, 2, 3, 1])
                .unwrap()
                .contiguous()
                .unwrap()
                .permute(&[0, 3, 1, 2])
                .unwrap()
        };
        for (a, b) in [
            (last(&a), b.clone()),
            (a.clone(), last(&b)),
            (last(&a), last(&b)),
        ] {
            let y = op.apply1(&[&a, &b]).unwrap();
            assert_eq!(y.to_vec::<u8>().unwrap(), expected, "relu={relu}, layouts");
        }
    }
    let other = quantize_per_tensor(&randn(&[2, 5, 4, 4], 3), bq, DType::U8).unwrap();
    let op = Op::Quant(QuantOp::Add {
        a_scale: 0.1,
        a_zero_point: 0,
        b_scale: 0.1,
        b_zero_point: 0,
        out_scale: 0.1,
        out_zero_point: 0,
        relu: false,
    });
    let err = op.apply1(&[&a, &other]).unwrap_err().to_string();
    assert!(
        err.contains("quantized_add") && err.contains("[2, 5, 4, 4]"),
        "{err}"
    );
}
