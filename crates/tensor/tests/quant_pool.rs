//! Pooling on u8 (static int8 activations that keep their scale and zero point): the max
//! equals quantize(max(dequantize(q))) exactly, the mean is within one step of it and rounds
//! half to even, channels-last inputs pool in place to channels-last outputs, and what u8 cannot do (counted padding, gradients, other integer dtypes) is
//! an error.

use tessera_tensor::functional::{
    adaptive_avg_pool2d, avg_pool2d, max_pool2d, max_pool2d_with_indices,
};
use tessera_tensor::op::quant::{QParams, dequantize, quantize_per_tensor};
use tessera_tensor::op::{PoolOp, QuantOp};
use tessera_tensor::{DType, Op, Tensor};

const PARAMS: QParams = QParams {
    scale: 0.05,
    zero_point: 37,
};

/// Deterministic pseudo-random bytes (a 64-bit LCG's high bits) as a u8 tensor.
fn bytes(shape: &[usize], seed: u64) -> Tensor {
    let mut s = seed.wrapping_mul(6364136223846793005);
    let n = shape.iter().product();
    let data: Vec<u8> = (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (s >> 56) as u8
        })
        .collect();
    Tensor::from_vec(data, shape).unwrap()
}

/// `pool` applied through the float round trip: quantize(pool(dequantize(q))).
fn through_float(q: &Tensor, pool: impl Fn(&Tensor) -> Tensor) -> Vec<u8> {
    let y = pool(&dequantize(q, PARAMS).unwrap());
    let y = quantize_per_tensor(&y, PARAMS, DType::U8).unwrap();
    y.to_vec::<u8>().unwrap()
}

/// Kernel, stride, padding, dilation and ceil_mode of the max-pool cases: the layers' usual
/// shape, padding, a ceil_mode partial window, dilation and an unbatched input.
type MaxCase = ([usize; 2], [usize; 2], [usize; 2], [usize; 2], bool);
const MAX_CASES: [MaxCase; 5] = [
    ([2, 2], [2, 2], [0, 0], [1, 1], false),
    ([3, 3], [2, 2], [1, 1], [1, 1], false),
    ([3, 2], [2, 2], [1, 0], [1, 1], true),
    ([2, 3], [1, 2], [1, 1], [2, 2], true),
    ([3, 3], [3, 3], [0, 0], [1, 1], true),
];

/// The same values stored channels last (as quantized convolutions write them).
fn channels_last(q: &Tensor) -> Tensor {
    q.permute(&[0, 2, 3, 1])
        .unwrap()
        .contiguous()
        .unwrap()
        .permute(&[0, 3, 1, 2])
        .unwrap()
}

/// Asserts `pool` gives the same values on `q` and on its channels-last copy, and a
/// channels-last output for the latter.
fn assert_channels_last_agrees(q: &Tensor, pool: impl Fn(&Tensor) -> Tensor, what: &str) {
    let expected = pool(q);
    let y = pool(&channels_last(q));
    assert_eq!(y.shape(), expected.shape(), "{what}");
    assert_eq!(
        y.to_vec::<u8>().unwrap(),
        expected.to_vec::<u8>().unwrap(),
        "{what}"
    );
    assert!(y.permute(&[0, 2, 3, 1]).unwrap().is_contiguous(), "{what}");
}

#[test]
fn u8_pools_of_a_channels_last_view_equal_the_contiguous_ones_and_stay_channels_last() {
    let q = bytes(&[2, 5, 9, 7], 3);
    for (k, s, p, d, ceil) in MAX_CASES {
        let what = format!("max {k:?} {s:?} {p:?} {d:?} {ceil}");
        assert_channels_last_agrees(&q, |x| max_pool2d(x, k, s, p, d, ceil).unwrap(), &what);
        let what = format!("avg {k:?} {s:?} {p:?} {ceil}");
        let p = [p[0].min(k[0] / 2), p[1].min(k[1] / 2)];
        assert_channels_last_agrees(&q, |x| avg_pool2d(x, k, s, p, ceil, false).unwrap(), &what);
    }
    for size in [[1, 1], [2, 3], [4, 4]] {
        assert_channels_last_agrees(&q, |x| adaptive_avg_pool2d(x, size).unwrap(), "adaptive");
        for zero_point in [37, 38] {
            let op = Op::Quant(QuantOp::AvgPool {
                pool: PoolOp::AdaptiveAvgPool2d { output_size: size },
                zero_point,
            });
            let pool = |x: &Tensor| op.apply1(&[x]).unwrap();
            assert_channels_last_agrees(&q, pool, "quantized adaptive");
        }
    }
}

#[test]
fn u8_max_pool_equals_the_float_round_trip_exactly() {
    for (i, shape) in [[2usize, 3, 9, 7].as_slice(), &[4, 8, 5]]
        .iter()
        .enumerate()
    {
        let q = bytes(shape, 11 + i as u64);
        for (k, s, p, d, ceil) in MAX_CASES {
            let y = max_pool2d(&q, k, s, p, d, ceil).unwrap();
            assert_eq!(y.dtype(), DType::U8);
            let expected = through_float(&q, |x| max_pool2d(x, k, s, p, d, ceil).unwrap());
            assert_eq!(
                y.to_vec::<u8>().unwrap(),
                expected,
                "{shape:?} {k:?} {s:?} {p:?}"
            );
            // With indices: the same values, and the float kernel's indices.
            let (values, indices) = max_pool2d_with_indices(&q, k, s, p, d, ceil).unwrap();
            let float = dequantize(&q, PARAMS).unwrap();
            let (_, float_indices) = max_pool2d_with_indices(&float, k, s, p, d, ceil).unwrap();
            assert_eq!(values.to_vec::<u8>().unwrap(), expected);
            assert_eq!(
                indices.to_vec::<i64>().unwrap(),
                float_indices.to_vec::<i64>().unwrap()
            );
        }
    }
}

#[test]
fn u8_max_pool_ignores_padding_even_below_the_zero_point() {
    // Every value is 1, far below the zero point 37: padded zeros must not win.
    let q = Tensor::from_vec(vec![1u8; 9], &[1, 1, 3, 3]).unwrap();
    let y = max_pool2d(&q, [3, 3], [2, 2], [1, 1], [1, 1], false).unwrap();
    assert_eq!(y.to_vec::<u8>().unwrap(), vec![1; 4]);
}

/// Checks a u8 average against the exact mean of its window (`pool` on f64, exact for these
/// sums) rounded half to even, and against the float round trip `expected`. The two differ
/// only where the mean is exactly `k + 0.5`: PyTorch's quantized kernels (and the round trip)
/// round `mean - zero_point` to even, and with an odd zero point that lands one step away
/// from rounding the mean itself (a u8 tensor does not carry its zero point); elsewhere the
/// f32 error of the round trip (about 1e-6 of a step) cannot cross a rounding boundary.
fn assert_mean_rounded(
    q: &Tensor,
    y: &Tensor,
    expected: &[u8],
    pool: impl Fn(&Tensor) -> Tensor,
    case: &str,
) {
    let means = pool(&q.to_dtype(DType::F64).unwrap())
        .to_vec::<f64>()
        .unwrap();
    let actual = y.to_vec::<u8>().unwrap();
    assert_eq!(y.dtype(), DType::U8, "{case}");
    assert_eq!(actual.len(), means.len(), "{case}");
    let mut ties = 0;
    for ((a, e), m) in actual.iter().zip(expected).zip(&means) {
        assert_eq!(f64::from(*a), m.round_ties_even(), "{case}: mean {m}");
        if m.fract() == 0.5 {
            ties += 1;
            assert!(a.abs_diff(*e) <= 1, "{case}: {a} vs {e} at a tie");
        } else {
            assert_eq!(a, e, "{case}: mean {m}");
        }
    }
    assert!(ties < actual.len(), "{case}: every mean is a tie");
}

#[test]
fn u8_average_pools_round_the_exact_mean_and_match_the_float_round_trip_off_ties() {
    let q = bytes(&[2, 4, 10, 9], 5);
    // Kernel, stride, padding, ceil_mode, count_include_pad (meaningless without padding).
    let cases = [
        ([2, 2], [2, 2], [0, 0], false, true),
        ([3, 3], [2, 2], [1, 1], false, false),
        ([3, 2], [2, 3], [1, 1], true, false),
        ([3, 3], [3, 3], [0, 0], true, true),
    ];
    for (k, s, p, ceil, count_pad) in cases {
        let pool = |x: &Tensor| avg_pool2d(x, k, s, p, ceil, count_pad).unwrap();
        let y = pool(&q);
        let case = format!("avg {k:?} {s:?} {p:?} {ceil}");
        assert_mean_rounded(&q, &y, &through_float(&q, pool), pool, &case);
    }
    for size in [[1, 1], [3, 2], [4, 4], [10, 9]] {
        let pool = |x: &Tensor| adaptive_avg_pool2d(x, size).unwrap();
        let y = pool(&q);
        let case = format!("adaptive {size:?}");
        assert_mean_rounded(&q, &y, &through_float(&q, pool), pool, &case);
    }
}

#[test]
fn u8_average_rounds_half_to_even() {
    // Pairs with means 1.5, 2.5, 3.5, 254.5 and 3: ties go to the even neighbour.
    let q = Tensor::from_vec(vec![1u8, 2, 2, 3, 3, 4, 254, 255, 2, 4], &[1, 1, 5, 2]).unwrap();
    let y = avg_pool2d(&q, [1, 2], [1, 2], [0, 0], false, true).unwrap();
    assert_eq!(y.to_vec::<u8>().unwrap(), vec![2, 2, 4, 254, 3]);
    let gap = adaptive_avg_pool2d(&q, [1, 1]).unwrap();
    // (1 + 2 + 2 + 3 + 3 + 4 + 254 + 255 + 2 + 4) / 10 = 53.
    assert_eq!(gap.to_vec::<u8>().unwrap(), vec![53]);
}

#[test]
fn u8_average_with_counted_padding_is_an_error() {
    let q = bytes(&[1, 2, 4, 4], 3);
    let err = avg_pool2d(&q, [3, 3], [1, 1], [1, 1], false, true).unwrap_err();
    assert!(err.to_string().contains("count_include_pad"), "{err}");
}

#[test]
fn u8_pool_gradients_and_other_integer_dtypes_are_errors() {
    let grad = bytes(&[1, 1, 2, 2], 4);
    let indices = Tensor::from_vec(vec![0i64, 1, 4, 5], &[1, 1, 2, 2]).unwrap();
    let backward = Op::Pool(PoolOp::MaxPool2dBackward {
        input_size: [4, 4],
        window: None,
    });
    assert!(backward.apply(&[&grad, &indices]).is_err());
    let avg_backward = Op::Pool(PoolOp::AdaptiveAvgPool2dBackward { input_size: [4, 4] });
    assert!(avg_backward.apply(&[&grad]).is_err());
    let ints = Tensor::from_vec(vec![1i32; 16], &[1, 1, 4, 4]).unwrap();
    assert!(max_pool2d(&ints, [2, 2], [2, 2], [0, 0], [1, 1], false).is_err());
    assert!(adaptive_avg_pool2d(&ints, [1, 1]).is_err());
}

#[test]
fn quantized_average_rounds_the_mean_minus_the_zero_point_half_to_even() {
    // Pairs with means 1.5, 2.5, 3.5, 254.5 and 3. With the odd zero point 37, 1.5 - 37 =
    // -35.5 goes to -36 (so 1), as PyTorch's channels-last quantized kernel; with 38 the
    // result equals rounding the mean itself.
    let q = Tensor::from_vec(vec![1u8, 2, 2, 3, 3, 4, 254, 255, 2, 4], &[1, 1, 5, 2]).unwrap();
    let pool = PoolOp::avg_pool2d([1, 2], [1, 2], [0, 0], false, true);
    let average = |zero_point: i64| {
        Op::Quant(QuantOp::AvgPool {
            pool: pool.clone(),
            zero_point,
        })
        .apply1(&[&q])
        .unwrap()
        .to_vec::<u8>()
        .unwrap()
    };
    assert_eq!(average(37), vec![1, 3, 3, 255, 3]);
    assert_eq!(average(38), vec![2, 2, 4, 254, 3]);
    let gap = Op::Quant(QuantOp::AvgPool {
        pool: PoolOp::AdaptiveAvgPool2d {
            output_size: [1, 2],
        },
        zero_point: 37,
    });
    // Column means 52.4 and 53.6: no tie, the zero point changes nothing.
    let y = gap.apply1(&[&q]).unwrap();
    assert_eq!(y.to_vec::<u8>().unwrap(), vec![52, 54]);
}

#[test]
fn quantized_average_of_a_max_pool_or_a_float_input_is_an_error() {
    let max = Op::Quant(QuantOp::AvgPool {
        pool: PoolOp::max_pool2d([2, 2], [2, 2], [0, 0], [1, 1], false),
        zero_point: 3,
    });
    let err = max.apply1(&[&bytes(&[1, 1, 4, 4], 1)]).unwrap_err();
    assert!(err.to_string().contains("average pool"), "{err}");
    let avg = Op::Quant(QuantOp::AvgPool {
        pool: PoolOp::AdaptiveAvgPool2d {
            output_size: [1, 1],
        },
        zero_point: 3,
    });
    let float = Tensor::zeros(&[1, 1, 4, 4], DType::F32).unwrap();
    assert!(avg.apply1(&[&float]).is_err());
}
