//! Softmax computes each exponential once: its kernel stores `exp(x - max)` into the output
//! while summing, then scales what it stored (a read-back of its output), and agrees with the
//! eager op through the kernel-IR interpreter and the JIT over odd and size-1 lengths,
//! `-inf` entries and fully masked rows, along the last and a leading dim; log-softmax has one
//! exponential already, and a half softmax keeps recomputing (its output cannot hold an f32
//! exponential without rounding it).

use crate::common;

use common::{check_backends, eager, lowered};
use tessera_fx::Graph;
use tessera_kernel::{BufferRole, Expr, Kernel, Program, UnaryFn};
use tessera_tensor::op::BinaryOp;
use tessera_tensor::{DType, Op, Tensor, TensorMeta};

/// `softmax(x, dim)` (or log-softmax), optionally followed by `+ 1`, as a graph.
fn softmax_graph(shape: &[usize], dtype: DType, dim: usize, log: bool, epilogue: bool) -> Graph {
    let mut g = Graph::new();
    let x = g.placeholder("x", TensorMeta::new(shape.to_vec(), dtype));
    let mut y = g.call_function(Op::Softmax { dim, log }, &[&x]).unwrap();
    if epilogue {
        y = g
            .call_function(
                Op::Scalar(tessera_tensor::op::ScalarOp {
                    op: BinaryOp::Add,
                    value: 1.0,
                    reversed: false,
                }),
                &[&y],
            )
            .unwrap();
    }
    g.output(&[&y]).unwrap();
    g
}

/// Values in `[-3, 3)` with every fifth element `-inf` and, when the rows are long enough,
/// the second row entirely `-inf` (a fully masked attention row).
fn masked_input(shape: &[usize], dtype: DType, dim: usize) -> Tensor {
    let numel: usize = shape.iter().product();
    let row_len = shape[dim];
    let inner: usize = shape[dim + 1..].iter().product();
    let values: Vec<f64> = (0..numel)
        .map(|i| {
            let row = (i / (row_len * inner)) * inner + i % inner;
            if i % 5 == 3 || row == 1 {
                f64::NEG_INFINITY
            } else {
                ((i * 37 % 101) as f64 / 101.0 - 0.5) * 6.0
            }
        })
        .collect();
    Tensor::from_vec(values, shape)
        .unwrap()
        .to_dtype(dtype)
        .unwrap()
}

/// How many times per element the kernel evaluates an exponential: once per sweep (or
/// outer stage) whose values include one.
fn exponentials(kernel: &Kernel) -> usize {
    let stages = tessera_kernel::Stages::of(kernel);
    stages
        .sweep_values
        .iter()
        .chain(&stages.outer_values)
        .flatten()
        .filter(|v| matches!(kernel.value(**v).expr, Expr::Unary(UnaryFn::Exp, _)))
        .count()
}

fn read_backs(kernel: &Kernel) -> usize {
    kernel
        .values
        .iter()
        .filter(|v| {
            matches!(&v.expr, Expr::Load { buffer, .. }
                if kernel.buffer(*buffer).role == BufferRole::Output)
        })
        .count()
}

fn only_kernel(program: &Program) -> &Kernel {
    let kernels: Vec<&Kernel> = program.kernels().collect();
    assert_eq!(kernels.len(), 1, "{program}");
    assert!(program.fallbacks.is_empty(), "{program}");
    kernels[0]
}

/// Lowers and runs the case, checks it against eager, and returns the program.
fn agreeing(shape: &[usize], dtype: DType, dim: usize, log: bool, epilogue: bool) -> Program {
    let graph = softmax_graph(shape, dtype, dim, log, epilogue);
    let inputs = vec![masked_input(shape, dtype, dim)];
    let program = lowered(&graph, &inputs);
    let tol = match dtype {
        DType::F64 => 1e-12,
        DType::F32 => 1e-6,
        _ => 1e-2,
    };
    check_backends(&program, &inputs, &eager(&graph, &inputs), tol);
    program
}

#[test]
fn softmax_computes_each_exponential_once_over_odd_and_unit_lengths() {
    for dtype in [DType::F32, DType::F64] {
        for len in [1, 2, 3, 5, 37, 129] {
            let program = agreeing(&[3, len], dtype, 1, false, false);
            let kernel = only_kernel(&program);
            assert_eq!(exponentials(kernel), 1, "{program}");
            // A row of one element has no reduction loop left to sweep twice.
            if len > 1 {
                assert_eq!(read_backs(kernel), 1, "{program}");
            }
        }
    }
}

#[test]
fn softmax_along_a_leading_dim_reads_back_its_strided_output() {
    let program = agreeing(&[6, 2, 5], DType::F32, 0, false, false);
    let kernel = only_kernel(&program);
    assert_eq!(
        (exponentials(kernel), read_backs(kernel)),
        (1, 1),
        "{program}"
    );
}

#[test]
fn softmax_with_an_epilogue_scales_the_stored_exponentials_then_applies_it() {
    let program = agreeing(&[4, 33], DType::F32, 1, false, true);
    let kernel = only_kernel(&program);
    assert_eq!(
        (exponentials(kernel), read_backs(kernel)),
        (1, 1),
        "{program}"
    );
    assert_eq!(tessera_kernel::Stages::of(kernel).sweeps, 3, "{program}");
}

#[test]
fn log_softmax_has_one_exponential_and_no_read_back() {
    let program = agreeing(&[5, 19], DType::F32, 1, true, false);
    let kernel = only_kernel(&program);
    assert_eq!(
        (exponentials(kernel), read_backs(kernel)),
        (1, 0),
        "{program}"
    );
}

#[test]
fn half_softmax_recomputes_rather_than_round_its_exponentials() {
    let program = agreeing(&[3, 21], DType::F16, 1, false, false);
    let kernel = only_kernel(&program);
    assert_eq!(read_backs(kernel), 0, "{program}");
}

#[test]
fn a_read_back_of_an_output_no_earlier_sweep_stores_is_refused() {
    let program = agreeing(&[2, 8], DType::F32, 1, false, false);
    let mut kernel = only_kernel(&program).clone();
    // Dropping the store of the exponentials leaves the read-back without a source.
    let stash = kernel
        .stores
        .iter()
        .position(|s| matches!(kernel.value(s.value).expr, Expr::Unary(UnaryFn::Exp, _)))
        .expect("the exponentials are stored");
    kernel.stores.remove(stash);
    let error = kernel.verify().unwrap_err().to_string();
    assert!(error.contains("reads output"), "{error}");
}
