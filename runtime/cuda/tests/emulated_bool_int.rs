//! Bool and i64 buffers on the PTX backend: comparisons storing bool tensors (one byte each),
//! `where` reading them, i64 arithmetic, comparisons and casts, rendered to PTX, run in the
//! emulator on 2 blocks and checked bit for bit against the kernel-IR interpreter and eager
//! execution; every kernel is also assembled by ptxas (sm_80 and sm_90) when it is installed.
//! u8, i8 and i32 operands compute through i64 and convert back with the eager cast.

use crate::common;
use crate::emulated;

use emulated::EmulatedPtx;
use tessera_cuda::{PtxTarget, render};
use tessera_fx::{Graph, NodeId};
use tessera_kernel::{Interpreter, NoEnvironment, ScalarType, lower, run_program};
use tessera_tensor::op::{BinaryOp, CompareOp, ScalarOp, UnaryOp};
use tessera_tensor::{DType, Op, Tensor, TensorMeta};

fn call(g: &mut Graph, op: Op, args: &[&NodeId]) -> NodeId {
    g.call_function(op, args).unwrap()
}

/// Lowers `graph` (no fallback allowed), runs it in the emulator and the interpreter and
/// eagerly, requires the three to agree bit for bit, and assembles every kernel with ptxas.
fn check(what: &str, graph: &Graph, inputs: &[Tensor]) -> tessera_kernel::Program {
    let layouts: Vec<_> = inputs.iter().map(|t| t.layout()).collect();
    let program = lower(graph, &layouts).unwrap();
    assert!(program.fallbacks.is_empty(), "{what}: fell back\n{program}");
    let want = run_program(&program, &NoEnvironment, &Interpreter, inputs).unwrap();
    let got = run_program(&program, &NoEnvironment, &EmulatedPtx::default(), inputs).unwrap();
    let eager = common_eager(graph, inputs);
    for ((g, w), e) in got.iter().zip(&want).zip(&eager) {
        assert_eq!(g.dtype(), w.dtype(), "{what}");
        let bits = |t: &Tensor| -> Vec<u64> {
            t.to_vec_f64()
                .unwrap()
                .iter()
                .map(|x| if x.is_nan() { u64::MAX } else { x.to_bits() })
                .collect()
        };
        assert_eq!(
            bits(g),
            bits(w),
            "{what}: emulated PTX vs interpreter\n{program}"
        );
        assert_eq!(bits(w), bits(e), "{what}: interpreter vs eager\n{program}");
    }
    if let Some(ptxas) = common::ptxas() {
        for k in program.kernels() {
            let rendered = render(k, &PtxTarget::SM80).unwrap();
            common::assemble(&ptxas, &rendered.name, &rendered.ptx, &[80, 90]);
        }
    }
    program
}

/// The graph run op by op eagerly.
fn common_eager(graph: &Graph, inputs: &[Tensor]) -> Vec<Tensor> {
    let mut values: std::collections::HashMap<NodeId, Tensor> = Default::default();
    let mut next = inputs.iter();
    for id in graph.nodes() {
        let node = graph.node(&id).unwrap();
        let args: Vec<Tensor> = graph
            .operands(&id)
            .unwrap()
            .iter()
            .map(|o| values[o].clone())
            .collect();
        let value = match &node.kind {
            tessera_fx::NodeKind::Placeholder { .. } => next.next().unwrap().clone(),
            tessera_fx::NodeKind::CallFunction { op } => op
                .apply(&args.iter().collect::<Vec<_>>())
                .unwrap()
                .remove(0),
            tessera_fx::NodeKind::Output => return args,
            other => panic!("unexpected node {other:?}"),
        };
        values.insert(id, value);
    }
    unreachable!("the graph has an output")
}

fn floats(n: usize, seed: u32) -> Vec<f32> {
    (0..n)
        .map(|i| match (i as u32 * 7 + seed * 13) % 17 {
            3 => f32::NAN,
            k => (k as f32 - 8.0) * 0.75,
        })
        .collect()
}

#[test]
fn comparisons_store_bool_bytes_and_where_reads_them() {
    for cmp in [CompareOp::Lt, CompareOp::Le, CompareOp::Eq, CompareOp::Ne] {
        let mut g = Graph::new();
        let x = g.placeholder("x", TensorMeta::new([3, 41], DType::F32));
        let y = g.placeholder("y", TensorMeta::new([41], DType::F32));
        let c = call(&mut g, Op::Compare(cmp), &[&x, &y]);
        g.output(&[&c]).unwrap();
        let inputs = [
            Tensor::from_vec(floats(123, 1), &[3, 41]).unwrap(),
            Tensor::from_vec(floats(41, 2), &[41]).unwrap(),
        ];
        let program = check(&format!("{cmp:?}"), &g, &inputs);
        let k = program.kernels().next().unwrap();
        assert_eq!(k.buffers.last().unwrap().ty, ScalarType::Bool);
    }
    let mut g = Graph::new();
    let c = g.placeholder("c", TensorMeta::new([7, 9], DType::Bool));
    let a = g.placeholder("a", TensorMeta::new([7, 9], DType::F32));
    let b = g.placeholder("b", TensorMeta::new([9], DType::F32));
    let w = call(&mut g, Op::Where, &[&c, &a, &b]);
    let r = call(&mut g, Op::Unary(UnaryOp::Abs), &[&w]);
    g.output(&[&r]).unwrap();
    let mask: Vec<bool> = (0..63).map(|i| i % 4 == 1 || i % 5 == 0).collect();
    let inputs = [
        Tensor::from_vec(mask, &[9, 7]).unwrap().t().unwrap(),
        Tensor::from_vec(floats(63, 3), &[7, 9]).unwrap(),
        Tensor::from_vec(floats(9, 4), &[9]).unwrap(),
    ];
    check("where", &g, &inputs);
}

#[test]
fn i64_arithmetic_comparisons_and_casts_agree_with_the_interpreter() {
    let mut g = Graph::new();
    let t = g.placeholder("t", TensorMeta::new([45], DType::I64));
    let x = g.placeholder("x", TensorMeta::new([45], DType::F32));
    let n = g.placeholder("n", TensorMeta::new([], DType::I64));
    let plus_one = Op::Scalar(ScalarOp {
        op: BinaryOp::Add,
        value: 1.0,
        reversed: false,
    });
    let next = call(&mut g, plus_one, &[&n]);
    let tt = call(&mut g, Op::Binary(BinaryOp::Mul), &[&t, &t]);
    let poly = call(&mut g, Op::Binary(BinaryOp::Sub), &[&tt, &t]);
    let low = call(&mut g, Op::Binary(BinaryOp::Minimum), &[&t, &n]);
    let ignored = call(&mut g, Op::Compare(CompareOp::Ne), &[&t, &n]);
    let tf = call(&mut g, Op::ToDType(DType::F32), &[&t]);
    let sum = call(&mut g, Op::Binary(BinaryOp::Add), &[&tf, &x]);
    let xi = call(&mut g, Op::ToDType(DType::I64), &[&x]);
    let bi = call(&mut g, Op::ToDType(DType::I64), &[&ignored]);
    let td = call(&mut g, Op::ToDType(DType::F64), &[&t]);
    g.output(&[&next, &poly, &low, &ignored, &sum, &xi, &bi, &td])
        .unwrap();
    let ts: Vec<i64> = (0..45)
        .map(|i| match i % 9 {
            0 => -100,
            1 => 1 << 40,
            2 => -(1 << 35) - 7,
            3 => (1 << 53) + 1,
            k => i * k - 20,
        })
        .collect();
    let mut xs = floats(45, 5);
    xs[6] = 1e30;
    xs[7] = -1e30;
    xs[8] = f32::INFINITY;
    let inputs = [
        Tensor::from_vec(ts, &[45]).unwrap(),
        Tensor::from_vec(xs, &[45]).unwrap(),
        Tensor::scalar(-100i64),
    ];
    check("i64", &g, &inputs);
}

/// u8, i8 and i32 arithmetic, scalar ops, comparisons and `where` (widened to i64, computed,
/// converted back with the eager cast) agree with the interpreter and eager bit for bit.
#[test]
fn narrow_integer_arithmetic_agrees_with_the_interpreter() {
    for (op, inputs) in tessera_testkit::narrow_int_cases() {
        let what = format!(
            "{} on {:?}",
            op.name(),
            inputs.iter().map(|t| t.dtype()).collect::<Vec<_>>()
        );
        check(&what, &common::graph_on(op, &inputs, 1), &inputs);
    }
}
