//! Bool and i64 tensors in generated kernels: comparisons that return bool tensors, `where`
//! reading a bool tensor, i64 arithmetic and casts between i64, bool and floats, each lowered
//! to one kernel whose interpreted and JIT-compiled results equal eager execution exactly.

use crate::common;

use common::{check_backends, eager, lowered};
use tessera_fx::Graph;
use tessera_kernel::ScalarType;
use tessera_tensor::op::{BinaryOp, CompareOp, ScalarOp};
use tessera_tensor::{DType, Op, Tensor, TensorMeta};

/// `graph` lowered to kernels with no fallback, whose interpreted and compiled results equal
/// eager execution bit for bit; the program.
fn exact_kernels(graph: &Graph, inputs: &[Tensor]) -> tessera_kernel::Program {
    let program = lowered(graph, inputs);
    assert!(program.fallbacks.is_empty(), "{program}");
    check_backends(&program, inputs, &eager(graph, inputs), 0.0);
    program
}

/// [`exact_kernels`], which must be one kernel.
fn one_exact_kernel(graph: &Graph, inputs: &[Tensor]) -> tessera_kernel::Program {
    let program = exact_kernels(graph, inputs);
    assert_eq!(program.kernels().count(), 1, "{program}");
    program
}

fn floats(n: usize, seed: u32) -> Vec<f32> {
    (0..n)
        .map(|i| (((i as u32 * 7 + seed * 13) % 11) as f32 - 5.0) * 0.5)
        .collect()
}

#[test]
fn comparison_returns_a_bool_tensor_from_one_kernel() {
    for cmp in [CompareOp::Lt, CompareOp::Ge, CompareOp::Eq, CompareOp::Ne] {
        let mut g = Graph::new();
        let x = g.placeholder("x", TensorMeta::new([3, 7], DType::F32));
        let y = g.placeholder("y", TensorMeta::new([7], DType::F32));
        let c = g.call_function(Op::Compare(cmp), &[&x, &y]).unwrap();
        g.output(&[&c]).unwrap();
        let mut xs = floats(21, 1);
        xs[4] = f32::NAN;
        let inputs = [
            Tensor::from_vec(xs, &[3, 7]).unwrap(),
            Tensor::from_vec(floats(7, 2), &[7]).unwrap(),
        ];
        let program = one_exact_kernel(&g, &inputs);
        let kernel = program.kernels().next().unwrap();
        assert_eq!(kernel.buffers.last().unwrap().ty, ScalarType::Bool);
    }
}

#[test]
fn where_reads_a_bool_tensor_in_place_even_transposed() {
    let mut g = Graph::new();
    let c = g.placeholder("c", TensorMeta::new([5, 4], DType::Bool));
    let a = g.placeholder("a", TensorMeta::new([5, 4], DType::F32));
    let b = g.placeholder("b", TensorMeta::new([4], DType::F32));
    let w = g.call_function(Op::Where, &[&c, &a, &b]).unwrap();
    let r = g
        .call_function(Op::Unary(tessera_tensor::op::UnaryOp::Relu), &[&w])
        .unwrap();
    g.output(&[&r]).unwrap();
    let mask: Vec<bool> = (0..20).map(|i| i % 3 == 0 || i % 7 == 1).collect();
    // The condition is given transposed: the kernel reads its bytes through strides.
    let cond = Tensor::from_vec(mask, &[4, 5]).unwrap().t().unwrap();
    let inputs = [
        cond,
        Tensor::from_vec(floats(20, 3), &[5, 4]).unwrap(),
        Tensor::from_vec(floats(4, 4), &[4]).unwrap(),
    ];
    let program = one_exact_kernel(&g, &inputs);
    let kernel = program.kernels().next().unwrap();
    assert_eq!(kernel.buffers[0].ty, ScalarType::Bool);
}

#[test]
fn bool_results_flow_between_kernels() {
    // `mask = x > relu(x); y = where(mask, x + x, relu(x))`: the mask is a kernel's bool
    // output, read by the next kernel and returned.
    let mut g = Graph::new();
    let x = g.placeholder("x", TensorMeta::new([37], DType::F32));
    let zero = g.call_function(Op::Unary(tessera_tensor::op::UnaryOp::Relu), &[&x]);
    let zero = zero.unwrap();
    let mask = g.call_function(Op::Compare(CompareOp::Gt), &[&x, &zero]);
    let mask = mask.unwrap();
    let twice = g
        .call_function(Op::Binary(BinaryOp::Add), &[&x, &x])
        .unwrap();
    let y = g.call_function(Op::Where, &[&mask, &twice, &zero]).unwrap();
    g.output(&[&mask, &y]).unwrap();
    let inputs = [Tensor::from_vec(floats(37, 5), &[37]).unwrap()];
    let program = exact_kernels(&g, &inputs);
    let bool_outputs = program
        .kernels()
        .filter(|k| k.buffers.iter().any(|b| b.ty == ScalarType::Bool))
        .count();
    assert_eq!(bool_outputs, 2, "{program}");
}

#[test]
fn i64_add_of_a_constant_counts_as_the_eager_kernel() {
    let mut g = Graph::new();
    let n = g.placeholder("n", TensorMeta::new([], DType::I64));
    let op = Op::Scalar(ScalarOp {
        op: BinaryOp::Add,
        value: 1.0,
        reversed: false,
    });
    let next = g.call_function(op, &[&n]).unwrap();
    g.output(&[&next]).unwrap();
    for v in [0i64, 41, -3, i64::MAX] {
        let program = one_exact_kernel(&g, &[Tensor::scalar(v)]);
        assert_eq!(
            program.kernels().next().unwrap().buffers[1].ty,
            ScalarType::I64
        );
    }
}

#[test]
fn i64_arithmetic_comparisons_and_casts_match_eager() {
    // t: i64, x: f32. Outputs: t * t - t, max(t, 3), t == -100 (bool), t as f32 + x, x as i64,
    // (x > 0) as i64.
    let mut g = Graph::new();
    let t = g.placeholder("t", TensorMeta::new([12], DType::I64));
    let x = g.placeholder("x", TensorMeta::new([12], DType::F32));
    let call =
        |g: &mut Graph, op: Op, args: &[&tessera_fx::NodeId]| g.call_function(op, args).unwrap();
    let tt = call(&mut g, Op::Binary(BinaryOp::Mul), &[&t, &t]);
    let poly = call(&mut g, Op::Binary(BinaryOp::Sub), &[&tt, &t]);
    let three = Op::Scalar(ScalarOp {
        op: BinaryOp::Maximum,
        value: 3.0,
        reversed: false,
    });
    let at_least = call(&mut g, three, &[&t]);
    let ignore = g.placeholder("ignore", TensorMeta::new([], DType::I64));
    let ignored = call(&mut g, Op::Compare(CompareOp::Eq), &[&t, &ignore]);
    let tf = call(&mut g, Op::ToDType(DType::F32), &[&t]);
    let sum = call(&mut g, Op::Binary(BinaryOp::Add), &[&tf, &x]);
    let xi = call(&mut g, Op::ToDType(DType::I64), &[&x]);
    let zero = call(&mut g, Op::Binary(BinaryOp::Sub), &[&x, &x]);
    let positive = call(&mut g, Op::Compare(CompareOp::Gt), &[&x, &zero]);
    let pi = call(&mut g, Op::ToDType(DType::I64), &[&positive]);
    g.output(&[&poly, &at_least, &ignored, &sum, &xi, &pi])
        .unwrap();
    // Each output is a fusion group of its own.
    let ts: Vec<i64> = vec![0, 1, -1, 7, -100, 3, 2, 1 << 40, -(1 << 33), 5, -100, 9];
    let xs: Vec<f32> = vec![
        0.5, -0.5, 2.9, -2.9, 1e20, -1e20, 3.0, 0.0, -7.25, 100.5, 1.0, 4.75,
    ];
    let inputs = [
        Tensor::from_vec(ts, &[12]).unwrap(),
        Tensor::from_vec(xs, &[12]).unwrap(),
        Tensor::scalar(-100i64),
    ];
    exact_kernels(&g, &inputs);
}

#[test]
fn float_to_i64_saturates_and_maps_nan_to_zero_as_eager() {
    let mut g = Graph::new();
    let x = g.placeholder("x", TensorMeta::new([5], DType::F64));
    let xi = g.call_function(Op::ToDType(DType::I64), &[&x]).unwrap();
    let back = g.call_function(Op::ToDType(DType::F64), &[&xi]).unwrap();
    g.output(&[&xi, &back]).unwrap();
    let xs = vec![
        f64::NAN,
        f64::INFINITY,
        -1e300,
        9.007_199_254_740_993e15,
        -0.99,
    ];
    exact_kernels(&g, &[Tensor::from_vec(xs, &[5]).unwrap()]);
}

/// u8, i8 and i32 operands of arithmetic, scalar ops, comparisons and `where`, alone, mixed
/// with each other (promoting to i32), with i64, f32 and bool: one kernel per op equal to the
/// eager kernels bit for bit, overflowing results saturating as the eager cast does.
#[test]
fn narrow_integer_arithmetic_matches_eager() {
    let cases = tessera_testkit::narrow_int_cases();
    assert!(cases.len() > 80, "{} cases", cases.len());
    for (op, inputs) in cases {
        one_exact_kernel(&common::op_graph(op, &inputs), &inputs);
    }
}
