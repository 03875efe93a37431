//! Differential tests of the PTX renderer: every elementwise op of the lowering table and the
//! reductions, in f32 and f64, on small odd shapes with awkward values (signed zeros,
//! infinities, NaN, subnormals), rendered to PTX and run in the emulator on 2 blocks (so
//! grid-stride loops turn and multi-warp reductions cover several rows per block), must give
//! the kernel-IR interpreter's results: bit for bit for arithmetic, within a few ulp for
//! transcendental functions and for sums taken in a different order.

use crate::emulated;

use emulated::EmulatedPtx;
use tessera_fx::Graph;
use tessera_kernel::{Interpreter, NoEnvironment, lower, run_program};
use tessera_tensor::op::{BinaryOp, CompareOp, NormOp, ReduceKind, ReduceOp, ScalarOp, UnaryOp};
use tessera_tensor::{DType, Op, Tensor, TensorMeta};

/// How closely the emulated PTX must follow the interpreter.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Agreement {
    Exact,
    /// Within this many ulp, or an absolute 1e-6 (f32) / 1e-14 (f64) near zero.
    Ulps(u64),
    /// Within 1e-5 (f32) / 1e-13 (f64) of max(1, |interpreter's value|): sums in another
    /// order, whose rounding differences grow where later terms cancel.
    Relative,
}

/// Input values: a sweep of [-4, 4] with finite special values (signed zeros, a subnormal,
/// large magnitudes) mixed in and, where `non_finite`, infinities and NaN too.
fn values(len: usize, seed: usize, non_finite: bool) -> Vec<f64> {
    const SPECIAL: [f64; 8] = [
        0.0,
        -0.0,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NAN,
        1e-40,
        -100.0,
        30.0,
    ];
    (0..len)
        .map(|i| {
            let k = i * 7919 + seed * 104_729;
            let special = SPECIAL[(k / 11) % SPECIAL.len()];
            if k % 11 == 3 && (non_finite || special.is_finite()) {
                special
            } else {
                (k % 997) as f64 / 997.0 * 8.0 - 4.0
            }
        })
        .collect()
}

fn tensor_of(dtype: DType, shape: &[usize], v: Vec<f64>) -> Tensor {
    match dtype {
        DType::F64 => Tensor::from_vec(v, shape).unwrap(),
        _ => Tensor::from_vec(v.iter().map(|x| *x as f32).collect::<Vec<f32>>(), shape).unwrap(),
    }
}

/// Elementwise inputs, non-finite values included.
fn tensor(dtype: DType, shape: &[usize], seed: usize) -> Tensor {
    tensor_of(dtype, shape, values(shape.iter().product(), seed, true))
}

/// Reduction inputs `[rows, cols]`: finite rows, except that the last row holds an infinity
/// and the one before a NaN (a NaN in every row would hide every other difference).
fn rows_tensor(dtype: DType, rows: usize, cols: usize, seed: usize) -> Tensor {
    let mut v = values(rows * cols, seed, false);
    v[(rows - 2) * cols + 17] = f64::NAN;
    v[(rows - 1) * cols + 5] = f64::INFINITY;
    tensor_of(dtype, &[rows, cols], v)
}

/// Distance in ulp between two floats of the same type given as f64 (0 when equal or both NaN).
fn ulps(a: f64, b: f64, dtype: DType) -> u64 {
    if a == b || (a.is_nan() && b.is_nan()) {
        return 0;
    }
    if a.is_nan() || b.is_nan() || a.is_infinite() || b.is_infinite() {
        return u64::MAX;
    }
    let key = |x: f64| -> i128 {
        if dtype == DType::F64 {
            let b = x.to_bits() as i64;
            (if b < 0 { i64::MIN - b } else { b }) as i128
        } else {
            let b = (x as f32).to_bits() as i32;
            (if b < 0 { i32::MIN - b } else { b }) as i128
        }
    };
    (key(a) - key(b)).unsigned_abs() as u64
}

fn check(what: &str, graph: &Graph, inputs: &[Tensor], agreement: Agreement) {
    let program = lower(graph, &[]).unwrap();
    assert!(
        program.fallbacks.is_empty(),
        "{what}: fell back:\n{program}"
    );
    let want = run_program(&program, &NoEnvironment, &Interpreter, inputs).unwrap();
    let got = run_program(&program, &NoEnvironment, &EmulatedPtx::default(), inputs).unwrap();
    for (g, w) in got.iter().zip(&want) {
        let dtype = w.dtype();
        let (g, w) = (g.to_vec_f64().unwrap(), w.to_vec_f64().unwrap());
        assert_eq!(g.len(), w.len(), "{what}");
        let atol = if dtype == DType::F64 { 1e-14 } else { 1e-6 };
        let rtol = if dtype == DType::F64 { 1e-13 } else { 1e-5 };
        for (i, (a, b)) in g.iter().zip(&w).enumerate() {
            let ok = match agreement {
                Agreement::Exact => a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()),
                Agreement::Ulps(n) => ulps(*a, *b, dtype) <= n || (a - b).abs() <= atol,
                Agreement::Relative => {
                    ulps(*a, *b, dtype) == 0 || (a - b).abs() <= rtol * b.abs().max(1.0)
                }
            };
            assert!(
                ok,
                "{what} {dtype:?}: element {i}: emulated PTX gives {a:e}, the interpreter {b:e} (allowed: {agreement:?})\n{program}"
            );
        }
    }
}

fn op_graph(op: Op, dtype: DType, shapes: &[&[usize]]) -> (Graph, Vec<Tensor>) {
    let mut g = Graph::new();
    let nodes: Vec<_> = shapes
        .iter()
        .enumerate()
        .map(|(i, s)| g.placeholder(&format!("x{i}"), TensorMeta::new(s.to_vec(), dtype)))
        .collect();
    let refs: Vec<_> = nodes.iter().collect();
    let out = g.call_function(op, &refs).unwrap();
    g.output(&[&out]).unwrap();
    let inputs = shapes
        .iter()
        .enumerate()
        .map(|(i, s)| tensor(dtype, s, i))
        .collect();
    (g, inputs)
}

const SHAPE: &[usize] = &[3, 37];

fn unary_agreement(op: UnaryOp) -> Agreement {
    match op {
        UnaryOp::Neg
        | UnaryOp::Abs
        | UnaryOp::Sign
        | UnaryOp::Sqrt
        | UnaryOp::Relu
        | UnaryOp::LeakyRelu { .. } => Agreement::Exact,
        UnaryOp::Hardswish | UnaryOp::Hardsigmoid | UnaryOp::Relu6 | UnaryOp::Rsqrt => {
            Agreement::Exact
        }
        _ => Agreement::Ulps(8),
    }
}

#[test]
fn every_unary_op_agrees_with_the_interpreter() {
    for dtype in [DType::F32, DType::F64] {
        for op in UnaryOp::EVERY {
            let (g, inputs) = op_graph(Op::Unary(op), dtype, &[SHAPE]);
            check(&format!("{op:?}"), &g, &inputs, unary_agreement(op));
        }
    }
}

#[test]
fn every_binary_op_agrees_with_the_interpreter() {
    for dtype in [DType::F32, DType::F64] {
        for op in BinaryOp::EVERY {
            let agreement = if op == BinaryOp::Pow {
                Agreement::Ulps(8)
            } else {
                Agreement::Exact
            };
            let (g, inputs) = op_graph(Op::Binary(op), dtype, &[SHAPE, &[37]]);
            check(&format!("{op:?} broadcast"), &g, &inputs, agreement);
            let scalar = Op::Scalar(ScalarOp {
                op,
                value: 1.5,
                reversed: true,
            });
            let (g, inputs) = op_graph(scalar, dtype, &[SHAPE]);
            check(&format!("{op:?} reversed scalar"), &g, &inputs, agreement);
        }
    }
}

#[test]
fn compares_where_clamp_and_casts_agree_with_the_interpreter() {
    for dtype in [DType::F32, DType::F64] {
        for c in CompareOp::EVERY {
            let mut g = Graph::new();
            let x = g.placeholder("x", TensorMeta::new(SHAPE.to_vec(), dtype));
            let y = g.placeholder("y", TensorMeta::new(SHAPE.to_vec(), dtype));
            let cond = g.call_function(Op::Compare(c), &[&x, &y]).unwrap();
            let w = g.call_function(Op::Where, &[&cond, &x, &y]).unwrap();
            g.output(&[&w]).unwrap();
            check(
                &format!("{c:?} where"),
                &g,
                &[tensor(dtype, SHAPE, 0), tensor(dtype, SHAPE, 1)],
                Agreement::Exact,
            );
        }
        let (g, inputs) = op_graph(
            Op::Clamp {
                min: Some(-0.5),
                max: Some(0.5),
            },
            dtype,
            &[SHAPE],
        );
        check("clamp", &g, &inputs, Agreement::Exact);
        let other = if dtype == DType::F32 {
            DType::F64
        } else {
            DType::F32
        };
        let (g, inputs) = op_graph(Op::ToDType(other), dtype, &[SHAPE]);
        check("to_dtype", &g, &inputs, Agreement::Exact);
    }
}

fn reduce_op(kind: ReduceKind) -> Op {
    Op::Reduce(ReduceOp {
        kind,
        dims: vec![1],
        keepdim: false,
    })
}

#[test]
fn reductions_agree_with_the_interpreter() {
    let kinds = [
        ReduceKind::Sum,
        ReduceKind::Mean,
        ReduceKind::Amax,
        ReduceKind::Amin,
        ReduceKind::Var { correction: 1 },
        ReduceKind::Std { correction: 0 },
        ReduceKind::LogSumExp,
    ];
    for dtype in [DType::F32, DType::F64] {
        for kind in kinds {
            let agreement = if matches!(kind, ReduceKind::Amax | ReduceKind::Amin) {
                Agreement::Exact
            } else {
                Agreement::Relative
            };
            let (g, _) = op_graph(reduce_op(kind), dtype, &[&[5, 131]]);
            check(
                &format!("{kind:?}"),
                &g,
                &[rows_tensor(dtype, 5, 131, 0)],
                agreement,
            );
        }
        for log in [false, true] {
            let (g, _) = op_graph(Op::Softmax { dim: 1, log }, dtype, &[&[5, 131]]);
            check(
                &format!("softmax log={log}"),
                &g,
                &[rows_tensor(dtype, 5, 131, 0)],
                Agreement::Relative,
            );
        }
    }
}

#[test]
fn sums_of_integers_are_exact_in_any_order() {
    for dtype in [DType::F32, DType::F64] {
        for kind in [ReduceKind::Sum, ReduceKind::Mean] {
            let (g, _) = op_graph(reduce_op(kind), dtype, &[&[5, 131]]);
            let v: Vec<f64> = (0..5 * 131).map(|i| ((i * 37) % 19) as f64 - 9.0).collect();
            check(
                &format!("{kind:?} of integers"),
                &g,
                &[tensor_of(dtype, &[5, 131], v)],
                Agreement::Exact,
            );
        }
    }
}

#[test]
fn norms_agree_with_the_interpreter() {
    for dtype in [DType::F32, DType::F64] {
        let mut g = Graph::new();
        let x = g.placeholder("x", TensorMeta::new([5, 131], dtype));
        let w = g.placeholder("w", TensorMeta::new([131], dtype));
        let b = g.placeholder("b", TensorMeta::new([131], dtype));
        let ln = Op::Norm(NormOp::LayerNorm {
            normalized_ndim: 1,
            eps: 1e-5,
            weight: true,
            bias: true,
        });
        let norm = g.call_function(ln, &[&x, &w, &b]).unwrap();
        let y = g.getitem(&norm, 0).unwrap();
        g.output(&[&y]).unwrap();
        let weights = |seed| tensor_of(dtype, &[131], values(131, seed, false));
        let inputs = [rows_tensor(dtype, 5, 131, 0), weights(1), weights(2)];
        check("layer norm", &g, &inputs, Agreement::Relative);
        let mut g = Graph::new();
        let x = g.placeholder("x", TensorMeta::new([5, 131], dtype));
        let rms = Op::Norm(NormOp::RmsNorm {
            normalized_ndim: 1,
            eps: 1e-5,
            weight: false,
        });
        let norm = g.call_function(rms, &[&x]).unwrap();
        let y = g.getitem(&norm, 0).unwrap();
        g.output(&[&y]).unwrap();
        check(
            "rms norm",
            &g,
            &[rows_tensor(dtype, 5, 131, 0)],
            Agreement::Relative,
        );
    }
}

/// A small deterministic generator (xorshift), so every chain below is reproducible.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

/// A random fusion group: 2 to 6 elementwise links (unary ops, scalar ops either way round,
/// binary ops with a full-shape or a broadcast row operand) on a `[rows, cols]` input, which
/// the lowering fuses into one kernel; returns the graph, its inputs, and whether every link
/// is exact arithmetic.
fn random_chain(rng: &mut Rng, dtype: DType) -> (Graph, Vec<Tensor>, bool, String) {
    let (rows, cols) = (1 + rng.below(6), 1 + rng.below(70));
    let mut g = Graph::new();
    let mut x = g.placeholder("x0", TensorMeta::new([rows, cols], dtype));
    let mut inputs = vec![tensor(dtype, &[rows, cols], 0)];
    let mut exact = true;
    let mut names = Vec::new();
    for _ in 0..2 + rng.below(5) {
        let op = match rng.below(3) {
            0 => {
                // Chains such as rsqrt(1e-40) -> sin reach arguments past 2^20 (Payne-Hanek).
                let unary = UnaryOp::EVERY;
                let op = unary[rng.below(unary.len())];
                exact &= unary_agreement(op) == Agreement::Exact;
                Op::Unary(op)
            }
            1 => {
                let op = BinaryOp::EVERY[rng.below(BinaryOp::EVERY.len())];
                exact &= op != BinaryOp::Pow;
                Op::Scalar(ScalarOp {
                    op,
                    value: [0.5, -2.0, 3.0][rng.below(3)],
                    reversed: rng.below(2) == 0,
                })
            }
            _ => {
                let op = BinaryOp::EVERY[rng.below(BinaryOp::EVERY.len())];
                exact &= op != BinaryOp::Pow;
                let shape = if rng.below(2) == 0 {
                    vec![cols]
                } else {
                    vec![rows, cols]
                };
                let y = g.placeholder(
                    &format!("x{}", inputs.len()),
                    TensorMeta::new(shape.clone(), dtype),
                );
                inputs.push(tensor(dtype, &shape, inputs.len()));
                names.push(format!("{op:?}{shape:?}"));
                x = g.call_function(Op::Binary(op), &[&x, &y]).unwrap();
                continue;
            }
        };
        names.push(format!("{op:?}"));
        x = g.call_function(op, &[&x]).unwrap();
    }
    g.output(&[&x]).unwrap();
    (
        g,
        inputs,
        exact,
        format!("[{rows}, {cols}] {}", names.join(" -> ")),
    )
}

#[test]
fn random_fusion_groups_agree_with_the_interpreter() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for case in 0..64 {
        let dtype = if case % 2 == 0 {
            DType::F32
        } else {
            DType::F64
        };
        let (g, inputs, exact, what) = random_chain(&mut rng, dtype);
        let agreement = if exact {
            Agreement::Exact
        } else {
            Agreement::Relative
        };
        check(&format!("chain {case}: {what}"), &g, &inputs, agreement);
    }
}

/// Past `|x| = 2^20` the renderer reduces sin and cos arguments by Payne-Hanek, on a slow path
/// the emulator runs as a branch (up to f64's largest finite value). The arguments nearest a
/// multiple of pi/2, where glibc's `cos` (the interpreter's) is itself 8 ulp off, are checked
/// against correctly rounded values in `math_accuracy`.
#[test]
fn sin_and_cos_of_huge_arguments_agree_with_the_interpreter() {
    let xs = [
        2e6,
        1e10,
        1e17,
        1e20,
        -1e20,
        3e38,
        1048576.0,
        -1e300,
        f64::MAX,
        1.5e200,
    ];
    for dtype in [DType::F32, DType::F64] {
        for op in [UnaryOp::Sin, UnaryOp::Cos] {
            let (g, _) = op_graph(Op::Unary(op), dtype, &[&[xs.len()]]);
            check(
                &format!("{op:?} of huge arguments"),
                &g,
                &[tensor_of(dtype, &[xs.len()], xs.to_vec())],
                Agreement::Ulps(8),
            );
        }
    }
}
