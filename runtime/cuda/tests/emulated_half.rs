//! Differential tests of f16 and bf16 kernels, three ways: eager execution (each op widened
//! to f32 and rounded once to the half type), the kernel-IR interpreter, and the generated PTX
//! run in the emulator. Inputs mix values that round (ties, thirds), magnitudes that overflow
//! f16 once scaled (60000 * 2), subnormals of both formats, signed zeros, infinities and NaN.

use crate::emulated;

use emulated::EmulatedPtx;
use std::collections::HashMap;
use tessera_cuda::{PtxTarget, render};
use tessera_fx::{Graph, NodeId, NodeKind};
use tessera_kernel::{Interpreter, NoEnvironment, Program, lower, run_program};
use tessera_tensor::op::{BinaryOp, CompareOp, NormOp, ReduceKind, ReduceOp, ScalarOp, UnaryOp};
use tessera_tensor::{DType, Op, Tensor, TensorMeta};

const HALVES: [DType; 2] = [DType::F16, DType::BF16];

/// How closely two results must agree, in units in the last place of the half type.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Agreement {
    Exact,
    /// Within this many ulp (an f32 result a few f32 ulp off rounds to a neighbour at most).
    Ulps(u64),
    /// Within 4 ulp or a relative 2^-8 of max(1, |value|): sums in another order, and chains
    /// in which a one-ulp difference feeds later ops.
    Loose,
}

/// Awkward values for a half type: ties and non-representable fractions (rounding), large
/// magnitudes (60000 overflows f16 once doubled), subnormals of f16 (3e-6, 6e-8) and bf16
/// (1e-39), signed zeros, infinities, NaN, and a sweep of [-4, 4].
fn values(len: usize, seed: usize, non_finite: bool) -> Vec<f32> {
    const SPECIAL: [f32; 14] = [
        1.0 + 1.0 / 2048.0,
        1.0 / 3.0,
        0.1,
        60000.0,
        -65504.0,
        3e-6,
        -6e-8,
        1e-39,
        0.0,
        -0.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        257.0,
    ];
    (0..len)
        .map(|i| {
            let k = i * 7919 + seed * 104_729;
            let special = SPECIAL[(k / 5) % SPECIAL.len()];
            if k % 5 == 2 && (non_finite || special.is_finite()) {
                special
            } else {
                (k % 997) as f32 / 997.0 * 8.0 - 4.0
            }
        })
        .collect()
}

fn tensor_of(dtype: DType, shape: &[usize], v: Vec<f32>) -> Tensor {
    Tensor::from_vec(v, shape).unwrap().to_dtype(dtype).unwrap()
}

fn tensor(dtype: DType, shape: &[usize], seed: usize) -> Tensor {
    tensor_of(dtype, shape, values(shape.iter().product(), seed, true))
}

/// `[rows, cols]` reduction inputs: finite, except for a NaN in the last row but one and an
/// infinity in the last.
fn rows_tensor(dtype: DType, rows: usize, cols: usize, seed: usize) -> Tensor {
    let mut v = values(rows * cols, seed, false);
    v[(rows - 2) * cols + 17] = f32::NAN;
    v[(rows - 1) * cols + 5] = f32::INFINITY;
    tensor_of(dtype, &[rows, cols], v)
}

/// The position of a half value (given as f64) in the type's order, so neighbours differ by 1.
fn ordinal(x: f64, dtype: DType) -> i64 {
    let bits = match dtype {
        DType::F16 => half::f16::from_f64(x).to_bits(),
        _ => half::bf16::from_f64(x).to_bits(),
    } as i64;
    if bits & 0x8000 != 0 {
        -(bits & 0x7fff)
    } else {
        bits
    }
}

fn agree(a: f64, b: f64, dtype: DType, agreement: Agreement) -> bool {
    if a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()) {
        return true;
    }
    if a.is_nan() || b.is_nan() {
        return false;
    }
    let ulps = (ordinal(a, dtype) - ordinal(b, dtype)).unsigned_abs();
    let eps = dtype.epsilon().unwrap_or(0.0);
    match agreement {
        // +0 and -0 are one position apart, and equal.
        Agreement::Exact => a == b && a.is_sign_negative() == b.is_sign_negative(),
        Agreement::Ulps(n) => ulps <= n,
        Agreement::Loose => ulps <= 4 || (a - b).abs() <= 8.0 * eps * b.abs().max(1.0),
    }
}

/// Runs `graph` op by op eagerly (the graph interpreter's semantics).
fn eager(graph: &Graph, inputs: &[Tensor]) -> Vec<Tensor> {
    let mut values: HashMap<NodeId, Vec<Tensor>> = HashMap::new();
    let mut next = inputs.iter();
    for id in graph.nodes() {
        let node = graph.node(&id).unwrap();
        let args: Vec<Tensor> = graph
            .operands(&id)
            .unwrap()
            .iter()
            .map(|o| values[o][0].clone())
            .collect();
        let value = match &node.kind {
            NodeKind::Placeholder { .. } => vec![next.next().unwrap().clone()],
            NodeKind::CallFunction { op } => op.apply(&args.iter().collect::<Vec<_>>()).unwrap(),
            NodeKind::GetItem { index } => {
                let o = graph.operands(&id).unwrap()[0];
                vec![values[&o][*index].clone()]
            }
            NodeKind::Output => return args,
            other => panic!("unexpected node {other:?}"),
        };
        values.insert(id, value);
    }
    unreachable!("the graph has an output")
}

fn compare(what: &str, got: &[Tensor], want: &[Tensor], agreement: Agreement, program: &Program) {
    for (g, w) in got.iter().zip(want) {
        assert_eq!(g.dtype(), w.dtype(), "{what}: dtype");
        let dtype = w.dtype();
        let (g, w) = (g.to_vec_f64().unwrap(), w.to_vec_f64().unwrap());
        assert_eq!(g.len(), w.len(), "{what}");
        for (i, (a, b)) in g.iter().zip(&w).enumerate() {
            assert!(
                agree(*a, *b, dtype, agreement),
                "{what} {dtype:?}: element {i}: got {a:e}, want {b:e} ({agreement:?})\n{program}"
            );
        }
    }
}

/// Lowers `graph` (no fallback), and checks the interpreter against eager execution and the
/// emulated PTX against the interpreter.
fn check(what: &str, graph: &Graph, inputs: &[Tensor], eager_agreement: Agreement, ptx: Agreement) {
    let program = lower(graph, &[]).unwrap();
    assert!(
        program.fallbacks.is_empty(),
        "{what}: fell back:\n{program}"
    );
    assert!(
        program.kernels().count() > 0,
        "{what}: no kernel\n{program}"
    );
    let reference = eager(graph, inputs);
    let interpreted = run_program(&program, &NoEnvironment, &Interpreter, inputs).unwrap();
    compare(
        &format!("{what}: interpreter vs eager"),
        &interpreted,
        &reference,
        eager_agreement,
        &program,
    );
    let emulated = run_program(&program, &NoEnvironment, &EmulatedPtx::default(), inputs).unwrap();
    compare(
        &format!("{what}: emulated PTX vs interpreter"),
        &emulated,
        &interpreted,
        ptx,
        &program,
    );
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

/// Arithmetic, comparisons and selects compute in f32 exactly as eager code and round once:
/// bit for bit. f32 `exp` (2 ulp of eager's) and the PTX transcendentals (a few f32 ulp of the
/// interpreter's) may round to a neighbouring half value.
fn unary_exact(op: UnaryOp) -> bool {
    matches!(
        op,
        UnaryOp::Neg
            | UnaryOp::Abs
            | UnaryOp::Sign
            | UnaryOp::Sqrt
            | UnaryOp::Rsqrt
            | UnaryOp::Relu
            | UnaryOp::LeakyRelu { .. }
            | UnaryOp::Relu6
            | UnaryOp::Hardsigmoid
            | UnaryOp::Hardswish
    )
}

fn agreement_of(exact: bool) -> Agreement {
    if exact {
        Agreement::Exact
    } else {
        Agreement::Ulps(1)
    }
}

#[test]
fn every_unary_op_in_half_agrees_three_ways() {
    for dtype in HALVES {
        for op in UnaryOp::EVERY {
            let (g, inputs) = op_graph(Op::Unary(op), dtype, &[SHAPE]);
            let a = agreement_of(unary_exact(op));
            check(&format!("{op:?}"), &g, &inputs, a, a);
        }
    }
}

#[test]
fn every_binary_op_in_half_agrees_three_ways() {
    for dtype in HALVES {
        for op in BinaryOp::EVERY {
            let a = agreement_of(op != BinaryOp::Pow);
            let (g, inputs) = op_graph(Op::Binary(op), dtype, &[SHAPE, &[37]]);
            check(&format!("{op:?} broadcast"), &g, &inputs, a, a);
            let scalar = Op::Scalar(ScalarOp {
                op,
                value: 2.0,
                reversed: false,
            });
            let (g, inputs) = op_graph(scalar, dtype, &[SHAPE]);
            check(&format!("{op:?} scalar 2"), &g, &inputs, a, a);
        }
    }
}

#[test]
fn compares_where_clamp_and_conversions_agree_three_ways() {
    for dtype in HALVES {
        for c in CompareOp::EVERY {
            let mut g = Graph::new();
            let x = g.placeholder("x", TensorMeta::new(SHAPE.to_vec(), dtype));
            let y = g.placeholder("y", TensorMeta::new(SHAPE.to_vec(), dtype));
            let cond = g.call_function(Op::Compare(c), &[&x, &y]).unwrap();
            let w = g.call_function(Op::Where, &[&cond, &x, &y]).unwrap();
            g.output(&[&w]).unwrap();
            let inputs = [tensor(dtype, SHAPE, 0), tensor(dtype, SHAPE, 1)];
            check(
                &format!("{c:?} where"),
                &g,
                &inputs,
                Agreement::Exact,
                Agreement::Exact,
            );
        }
        let clamp = Op::Clamp {
            min: Some(-0.5),
            max: Some(0.5),
        };
        let (g, inputs) = op_graph(clamp, dtype, &[SHAPE]);
        check("clamp", &g, &inputs, Agreement::Exact, Agreement::Exact);
        // To f32 and f64 (exact), to the other half type (rounded once), and from f32
        // (rounding ties to even, overflowing to infinity, to subnormals).
        let other = if dtype == DType::F16 {
            DType::BF16
        } else {
            DType::F16
        };
        for to in [DType::F32, DType::F64, other] {
            let (g, inputs) = op_graph(Op::ToDType(to), dtype, &[SHAPE]);
            check(
                &format!("{dtype:?} to {to:?}"),
                &g,
                &inputs,
                Agreement::Exact,
                Agreement::Exact,
            );
        }
        let (g, _) = op_graph(Op::ToDType(dtype), DType::F32, &[SHAPE]);
        let mut v = values(3 * 37, 5, true);
        v[0] = 65519.0;
        v[1] = 65520.0;
        v[2] = 1.0 + 3.0 / 2048.0;
        v[3] = 2.9802322e-8;
        v[4] = 1.0 + 1.0 / 256.0 + 1.0 / 65536.0;
        v[5] = 3.4e38;
        let input = Tensor::from_vec(v, SHAPE).unwrap();
        check(
            &format!("f32 to {dtype:?}"),
            &g,
            &[input],
            Agreement::Exact,
            Agreement::Exact,
        );
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
fn half_reductions_and_norms_agree_three_ways() {
    let kinds = [
        ReduceKind::Sum,
        ReduceKind::Mean,
        ReduceKind::Amax,
        ReduceKind::Amin,
        ReduceKind::Var { correction: 1 },
        ReduceKind::Std { correction: 0 },
        ReduceKind::LogSumExp,
    ];
    for dtype in HALVES {
        for kind in kinds {
            let a = if matches!(kind, ReduceKind::Amax | ReduceKind::Amin) {
                Agreement::Exact
            } else {
                Agreement::Loose
            };
            let (g, _) = op_graph(reduce_op(kind), dtype, &[&[5, 131]]);
            let inputs = [rows_tensor(dtype, 5, 131, 0)];
            check(&format!("{kind:?}"), &g, &inputs, a, a);
        }
        for log in [false, true] {
            let (g, _) = op_graph(Op::Softmax { dim: 1, log }, dtype, &[&[5, 131]]);
            let inputs = [rows_tensor(dtype, 5, 131, 0)];
            check(
                &format!("softmax log={log}"),
                &g,
                &inputs,
                Agreement::Loose,
                Agreement::Loose,
            );
        }
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
        check(
            "layer norm",
            &g,
            &inputs,
            Agreement::Loose,
            Agreement::Loose,
        );
    }
}

/// A small deterministic generator (xorshift).
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

/// A random chain of 2 to 6 elementwise links on a `[rows, cols]` half input, fused into one
/// kernel, each link rounding to the half type as its eager op does.
fn random_chain(rng: &mut Rng, dtype: DType) -> (Graph, Vec<Tensor>, String) {
    let (rows, cols) = (1 + rng.below(6), 1 + rng.below(70));
    let mut g = Graph::new();
    let mut x = g.placeholder("x0", TensorMeta::new([rows, cols], dtype));
    let mut inputs = vec![tensor(dtype, &[rows, cols], 0)];
    let mut names = Vec::new();
    for _ in 0..2 + rng.below(5) {
        let op = match rng.below(3) {
            0 => Op::Unary(UnaryOp::EVERY[rng.below(UnaryOp::EVERY.len())]),
            1 => Op::Scalar(ScalarOp {
                op: BinaryOp::EVERY[rng.below(BinaryOp::EVERY.len())],
                value: [0.5, -2.0, 3.0][rng.below(3)],
                reversed: rng.below(2) == 0,
            }),
            _ => {
                let op = BinaryOp::EVERY[rng.below(BinaryOp::EVERY.len())];
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
        format!("[{rows}, {cols}] {}", names.join(" -> ")),
    )
}

#[test]
fn random_half_fusion_groups_agree_three_ways() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for case in 0..48 {
        let dtype = HALVES[case % 2];
        let (g, inputs, what) = random_chain(&mut rng, dtype);
        check(
            &format!("chain {case}: {what}"),
            &g,
            &inputs,
            Agreement::Loose,
            Agreement::Loose,
        );
    }
}

/// A contiguous 1-D chain over half buffers runs four points per thread, loading and storing
/// them with `.v4.b16`, and gives the same results.
#[test]
fn contiguous_half_chains_use_vector_loads() {
    for dtype in HALVES {
        let mut g = Graph::new();
        let x = g.placeholder("x", TensorMeta::new([203], dtype));
        let y = g.placeholder("y", TensorMeta::new([203], dtype));
        let s = g
            .call_function(Op::Binary(BinaryOp::Mul), &[&x, &y])
            .unwrap();
        let r = g.call_function(Op::Unary(UnaryOp::Relu), &[&s]).unwrap();
        g.output(&[&r]).unwrap();
        let program = lower(&g, &[]).unwrap();
        let kernel = program.kernels().next().unwrap();
        let ptx = render(kernel, &PtxTarget::SM80).unwrap().ptx;
        assert!(ptx.contains("ld.global.v4.b16"), "{ptx}");
        assert!(ptx.contains("st.global.v4.b16"), "{ptx}");
        let inputs = [tensor(dtype, &[203], 0), tensor(dtype, &[203], 1)];
        check(
            "vectorised mul relu",
            &g,
            &inputs,
            Agreement::Exact,
            Agreement::Exact,
        );
    }
}

/// bf16 rounding is one instruction from sm_80 on; below, rendering says so.
#[test]
fn bf16_rounding_below_sm80_is_refused() {
    let (g, _) = op_graph(Op::Unary(UnaryOp::Neg), DType::BF16, &[SHAPE]);
    let program = lower(&g, &[]).unwrap();
    let kernel = program.kernels().next().unwrap();
    let old = PtxTarget::SM80.with_compute_capability(7, 5);
    let err = render(kernel, &old).unwrap_err().to_string();
    assert!(err.contains("bf16"), "{err}");
    assert!(render(kernel, &PtxTarget::SM80).is_ok());
}
