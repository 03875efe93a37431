//! Cases for checking the int8 linear kernels against the eager ones: inputs of several
//! ranks (one row of one feature, an empty batch), weight zero points zero and nonzero per
//! channel, parameters of one element, with and without bias and fused ReLU, values near the
//! zero points whose sums requantized with power-of-two scales tie at .5 steps, and values
//! spread over u8 and i8 whose sums saturate both ends of u8 or land inside it; for the
//! dynamic linear, activations with NaN, infinities, constant, all negative, all zero and all
//! NaN, with and without `reduce_range`.

use crate::fake_quant_cases::{integer_zero_points, x_values};
use crate::quant_cases::{quantized_inputs, valid_scales};
use tessera_tensor::op::QuantOp;
use tessera_tensor::{DType, Op, Tensor};

/// One int8 product case (a linear, or the conv2d of [`crate::quant_conv_cases`]): what it
/// checks, the op and its inputs (`x, w, w_scale, w_zero_point[, bias]`).
pub struct LinearCase {
    pub what: String,
    pub op: Op,
    pub inputs: Vec<Tensor>,
}

/// How the weight parameters of a case are given.
#[derive(Debug, Clone, Copy)]
enum WeightParams {
    /// Per-channel scales, every zero point 0 (symmetric weights, eager's fast path).
    Symmetric,
    /// Per-channel scales and zero points spread over i8.
    PerChannel,
    /// One scale and one nonzero zero point for every channel (`[1]` tensors).
    Single,
}

/// `(x_scale, x_zero_point, out_scale, out_zero_point)`: powers of two giving ties at .5
/// steps with odd and even zero points, tenths, a large output scale that brings spread sums
/// inside u8 and a small one that saturates.
const STATIC_PARAMS: [(f64, i64, f64, i64); 5] = [
    (0.5, 3, 0.5, 37),
    (0.25, 128, 0.125, 100),
    (0.1, 0, 0.3, 0),
    (0.1, 7, 40.0, 64),
    (0.5, 255, 1.0e-3, 255),
];

/// Input shapes `[.., K]` and the number `N` of output channels.
const SHAPES: [(&[usize], usize); 5] = [
    (&[3, 5], 4),
    (&[2, 3, 7], 6),
    (&[4, 1], 3),
    (&[9], 5),
    (&[0, 5], 4),
];

/// Biases per channel: ties once scaled by a power of two, large ones that saturate.
fn bias(n: usize, seed: usize) -> Tensor {
    const BIAS: [f32; 6] = [0.25, -3.75, 40.5, -1.0e4, 2.0e4, 0.0];
    let b = (0..n)
        .map(|c| BIAS[(c + seed) % BIAS.len()])
        .collect::<Vec<_>>();
    Tensor::from_vec(b, &[n]).unwrap()
}

/// Values of `shape` within 3 of `center(i)` (`i` the flat index), clamped to `[lo, hi]`, as
/// i64.
fn near(
    shape: &[usize],
    (lo, hi): (i64, i64),
    seed: usize,
    center: impl Fn(usize) -> i64,
) -> Tensor {
    let n: usize = shape.iter().product();
    let v = (0..n)
        .map(|i| (center(i) + ((i * 5 + seed) % 7) as i64 - 3).clamp(lo, hi))
        .collect::<Vec<_>>();
    Tensor::from_vec(v, shape).unwrap()
}

/// The weight scales of `n` channels: powers of two for the tie cases, else
/// [`valid_scales`] (tenths, tiny and huge ones).
fn weight_scales(n: usize, ties: bool, seed: usize) -> Tensor {
    if ties {
        let s = (0..n)
            .map(|c| [0.5f32, 0.25, 1.0, 0.0625][(c + seed) % 4])
            .collect::<Vec<_>>();
        Tensor::from_vec(s, &[n]).unwrap()
    } else {
        valid_scales(n, seed)
    }
}

/// The static int8 linear cases: every shape with every parameter form, bias and ReLU, and
/// quantization parameters.
pub fn static_linear_cases() -> Vec<LinearCase> {
    let shapes: Vec<ProductShapes> = SHAPES
        .iter()
        .map(|&(x, n)| ProductShapes {
            x: x.to_vec(),
            w: vec![n, *x.last().unwrap()],
            x_permutation: None,
        })
        .collect();
    static_product_cases(&shapes, |_, q| {
        Op::Quant(QuantOp::Linear {
            x_scale: q.x_scale,
            x_zero_point: q.x_zero_point,
            out_scale: q.out_scale,
            out_zero_point: q.out_zero_point,
            relu: q.relu,
            bias: q.bias,
        })
    })
}

/// The operand shapes of a static int8 product case: x is made packed of shape `x`, then
/// seen through `x_permutation` when given (a channels-last view); w is `[N, ..]`.
pub(crate) struct ProductShapes {
    pub(crate) x: Vec<usize>,
    pub(crate) w: Vec<usize>,
    pub(crate) x_permutation: Option<Vec<usize>>,
}

/// The quantization attributes of a static int8 product case.
pub(crate) struct StaticQuant {
    pub(crate) x_scale: f64,
    pub(crate) x_zero_point: i64,
    pub(crate) out_scale: f64,
    pub(crate) out_zero_point: i64,
    pub(crate) relu: bool,
    pub(crate) bias: bool,
}

/// The static int8 product cases of `shapes`: each with every weight parameter form and
/// [`STATIC_PARAMS`], values near the zero points (ties) and spread, ReLU and bias
/// alternating; `op` makes the op of a case from the index of its shapes.
pub(crate) fn static_product_cases(
    shapes: &[ProductShapes],
    op: impl Fn(usize, StaticQuant) -> Op,
) -> Vec<LinearCase> {
    let mut cases = Vec::new();
    let forms = [
        WeightParams::Symmetric,
        WeightParams::PerChannel,
        WeightParams::Single,
    ];
    let cases_per_shape = forms.len() * STATIC_PARAMS.len() * 2;
    for (s, shape) in shapes.iter().enumerate() {
        let n = shape.w[0];
        let k = shape.w[1..].iter().product::<usize>();
        for (f, &form) in forms.iter().enumerate() {
            for (p, &(x_scale, x_zero_point, out_scale, out_zero_point)) in
                STATIC_PARAMS.iter().enumerate()
            {
                for spread in [false, true] {
                    let seed = s * cases_per_shape
                        + (f * STATIC_PARAMS.len() + p) * 2
                        + usize::from(spread);
                    let relu = (f + p) % 2 == 1;
                    let with_bias = (s + f) % 2 == 0;
                    let ties = x_scale.log2().fract() == 0.0;
                    let (scales, zero_points) = match form {
                        WeightParams::Symmetric => (
                            weight_scales(n, ties, seed),
                            Tensor::from_vec(vec![0i64; n], &[n]).unwrap(),
                        ),
                        WeightParams::PerChannel => (
                            weight_scales(n, ties, seed),
                            integer_zero_points(n, (-128, 127), seed),
                        ),
                        WeightParams::Single => (
                            weight_scales(1, ties, seed),
                            Tensor::from_vec(vec![-5i64], &[1]).unwrap(),
                        ),
                    };
                    let (x, w) = if spread {
                        (
                            quantized_inputs(DType::U8, &shape.x, seed),
                            quantized_inputs(DType::I8, &shape.w, seed + 1),
                        )
                    } else {
                        // Small centred sums, which power-of-two scales requantize to ties.
                        let zps = zero_points.to_vec::<i64>().unwrap();
                        let x = near(&shape.x, (0, 255), seed, |_| x_zero_point);
                        let w = near(&shape.w, (-128, 127), seed + 1, |i| {
                            zps[(i / k.max(1)) % zps.len()]
                        });
                        (
                            x.to_dtype(DType::U8).unwrap(),
                            w.to_dtype(DType::I8).unwrap(),
                        )
                    };
                    let x = match &shape.x_permutation {
                        Some(order) => x.permute(order).unwrap(),
                        None => x,
                    };
                    let what = format!(
                        "x {:?} (made {:?}, permuted {:?}), w {:?}, {form:?} weights, \
                         x ({x_scale}, {x_zero_point}), out ({out_scale}, {out_zero_point}), \
                         relu {relu}, bias {with_bias}, spread {spread}",
                        x.shape(),
                        shape.x,
                        shape.x_permutation,
                        shape.w
                    );
                    let mut inputs = vec![x, w, scales, zero_points];
                    if with_bias {
                        inputs.push(bias(n, seed));
                    }
                    let quant = StaticQuant {
                        x_scale,
                        x_zero_point,
                        out_scale,
                        out_zero_point,
                        relu,
                        bias: with_bias,
                    };
                    cases.push(LinearCase {
                        what,
                        op: op(s, quant),
                        inputs,
                    });
                }
            }
        }
    }
    cases
}

/// The f32 activations of the dynamic linear cases, by name: values at ties with NaN,
/// infinities and the ends of f32 ([`x_values`]), finite values spread over [-2.5, 2.5], a
/// constant, all negative, all zero (scale 0: fbgemm's 0.1), all NaN (an empty range), and
/// finite values with one infinity of each sign.
fn activations(kind: usize, n: usize, seed: usize) -> (&'static str, Vec<f32>) {
    let spread = |i: usize| ((i * 37 + seed * 11) % 101) as f32 * 0.05 - 2.5;
    match kind % 7 {
        0 => ("special", x_values(n, seed)),
        1 => ("spread", (0..n).map(spread).collect()),
        2 => ("constant", vec![1.5; n]),
        3 => ("negative", (0..n).map(|i| -0.25 * (i + 1) as f32).collect()),
        4 => ("zero", vec![0.0; n]),
        5 => ("nan", vec![f32::NAN; n]),
        _ => (
            "infinite",
            (0..n)
                .map(|i| match i % 5 {
                    1 => f32::INFINITY,
                    3 => f32::NEG_INFINITY,
                    _ => spread(i),
                })
                .collect(),
        ),
    }
}

/// The dynamic int8 linear cases: every shape with every kind of activations, the weight
/// parameter forms, `reduce_range` and bias alternating.
pub fn dynamic_linear_cases() -> Vec<LinearCase> {
    let forms = [
        WeightParams::Symmetric,
        WeightParams::PerChannel,
        WeightParams::Single,
    ];
    let mut cases = Vec::new();
    for (s, &(x_shape, n)) in SHAPES.iter().enumerate() {
        for kind in 0..7 {
            let seed = s * 7 + kind;
            let form = forms[seed % forms.len()];
            let reduce_range = seed % 2 == 0;
            let with_bias = (seed / 2) % 2 == 0;
            let k = *x_shape.last().unwrap();
            let numel = x_shape.iter().product();
            let (what, x) = activations(kind, numel, seed);
            let x = Tensor::from_vec(x, x_shape).unwrap();
            let w = quantized_inputs(DType::I8, &[n, k], seed + 1);
            let (scales, zero_points) = match form {
                WeightParams::Symmetric => (
                    valid_scales(n, seed),
                    Tensor::from_vec(vec![0i64; n], &[n]).unwrap(),
                ),
                WeightParams::PerChannel => (
                    valid_scales(n, seed),
                    integer_zero_points(n, (-128, 127), seed),
                ),
                WeightParams::Single => (
                    valid_scales(1, seed),
                    Tensor::from_vec(vec![3i64], &[1]).unwrap(),
                ),
            };
            let mut inputs = vec![x, w, scales, zero_points];
            if with_bias {
                inputs.push(bias(n, seed));
            }
            cases.push(LinearCase {
                what: format!(
                    "{what} x {x_shape:?}, N {n}, {form:?} weights, reduce_range \
                     {reduce_range}, bias {with_bias}"
                ),
                op: Op::Quant(QuantOp::LinearDynamic {
                    bias: with_bias,
                    reduce_range,
                }),
                inputs,
            });
        }
    }
    cases
}
