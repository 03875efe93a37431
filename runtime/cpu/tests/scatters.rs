//! Scatter-adds in generated kernels: `embedding_backward` (with and without a padding row),
//! `index_add` and `scatter_add` lower to one kernel over the output (no fallback, no atomics)
//! whose interpreted and JIT-compiled results equal eager execution, bit for bit where the
//! summation order is eager's (`embedding_backward`; `index_add`/`scatter_add` without
//! duplicate indices) and within rounding otherwise, for f32 and f64, duplicate indices,
//! empty index tensors and strided (transposed) operands; an index outside its dim fails the
//! run with the typed `IndexOutOfRange` error in both runners, as eager execution fails, also
//! for an empty embedding gradient (embedding dim 0, or no rows), whose ids eager checks.

use crate::common;

use common::{check_backends, eager, faults, lowered, op_graph};
use tessera_kernel::{Interpreter, NoEnvironment, Program, run_program};
use tessera_tensor::op::{EmbeddingBackwardOp, IndexOp};
use tessera_tensor::{DType, Op, Tensor};

fn floats(shape: &[usize], seed: u32, dtype: DType) -> Tensor {
    let n: usize = shape.iter().product();
    let v: Vec<f64> = (0..n)
        .map(|i| ((i as u32 * 7919 + seed * 104_729) % 1000) as f64 / 137.0 - 3.5)
        .collect();
    Tensor::from_vec(v, shape).unwrap().to_dtype(dtype).unwrap()
}

fn ints(values: &[i64], shape: &[usize]) -> Tensor {
    Tensor::from_vec(values.to_vec(), shape).unwrap()
}

/// `op` on `inputs` lowered to one kernel with no fallback, its interpreted and compiled
/// results equal to eager execution within `tol`; the program.
fn lowered_to_one_kernel(op: Op, inputs: &[Tensor], tol: f64) -> Program {
    let program = common::lowered_agreeing(op, inputs, tol);
    assert_eq!(program.kernels().count(), 1, "{program}");
    program
}

fn embedding_backward(num_weights: usize, padding_idx: Option<usize>) -> Op {
    Op::EmbeddingBackward(EmbeddingBackwardOp {
        num_weights,
        padding_idx,
    })
}

#[test]
fn embedding_backward_adds_duplicate_rows_in_eager_order_bit_for_bit() {
    for dtype in [DType::F32, DType::F64] {
        let ids = ints(&[5, 0, 3, 3, 1, 0, 3, 5], &[2, 4]);
        for padding in [None, Some(3), Some(2)] {
            let inputs = [floats(&[2, 4, 7], 4, dtype), ids.clone()];
            lowered_to_one_kernel(embedding_backward(6, padding), &inputs, 0.0);
        }
        // A single id (a 0-d index) and a strided gradient.
        let inputs = [floats(&[5], 1, dtype), ints(&[2], &[])];
        lowered_to_one_kernel(embedding_backward(4, None), &inputs, 0.0);
        let grad = floats(&[7, 8], 2, dtype).t().unwrap();
        lowered_to_one_kernel(
            embedding_backward(6, Some(0)),
            &[grad, ids.reshape(&[8]).unwrap()],
            0.0,
        );
    }
}

#[test]
fn embedding_backward_of_no_ids_is_a_zero_table() {
    let inputs = [floats(&[0, 3], 1, DType::F32), ints(&[], &[0])];
    let program = lowered_to_one_kernel(embedding_backward(4, None), &inputs, 0.0);
    let out = run_program(&program, &NoEnvironment, &Interpreter, &inputs).unwrap();
    assert_eq!(out[0].to_vec::<f32>().unwrap(), vec![0.0; 12]);
}

#[test]
fn embedding_backward_with_an_id_past_the_table_fails_with_the_id_and_the_row_count() {
    let inputs = [floats(&[3, 2], 1, DType::F32), ints(&[1, 6, 2], &[3])];
    faults(embedding_backward(6, None), &inputs, 6, 6);
    let inputs = [floats(&[3, 2], 1, DType::F64), ints(&[1, -1, 2], &[3])];
    faults(embedding_backward(6, Some(1)), &inputs, -1, 6);
}

#[test]
fn an_empty_embedding_gradient_checks_its_ids_as_eager_does() {
    // Embedding dim 0: an empty [6, 0] gradient, ids checked against the 6 rows.
    for dtype in [DType::F32, DType::F64] {
        let inputs = [
            floats(&[2, 3, 0], 1, dtype),
            ints(&[5, 0, 1, 5, 2, 3], &[2, 3]),
        ];
        let program = common::lowered_agreeing(embedding_backward(6, Some(5)), &inputs, 0.0);
        assert_eq!(
            program.kernels().count(),
            2,
            "a check and the empty output\n{program}"
        );
        assert_eq!(
            eager(&op_graph(embedding_backward(6, None), &inputs), &inputs)[0].shape(),
            [6, 0]
        );
    }
    let inputs = [floats(&[3, 0], 1, DType::F32), ints(&[1, 6, 2], &[3])];
    faults(embedding_backward(6, None), &inputs, 6, 6);
    let inputs = [floats(&[3, 0], 1, DType::F32), ints(&[1, -2, 2], &[3])];
    faults(embedding_backward(6, Some(1)), &inputs, -2, 6);
    // No rows: every id is out of range.
    let inputs = [floats(&[2, 4], 1, DType::F32), ints(&[0, 0], &[2])];
    faults(embedding_backward(0, None), &inputs, 0, 0);
}

#[test]
fn index_add_equals_eager_along_every_dim_with_and_without_duplicates() {
    for dtype in [DType::F32, DType::F64] {
        let x = floats(&[4, 5, 3], 7, dtype);
        for dim in 0..3 {
            let size = x.shape()[dim] as i64;
            let mut src_shape = x.shape();
            // A permutation of the dim: each element gets at most one row, eager's order.
            src_shape[dim] = size as usize;
            let perm: Vec<i64> = (0..size).rev().collect();
            let op = Op::Index(IndexOp::IndexAdd { dim });
            let inputs = [
                x.clone(),
                ints(&perm, &[size as usize]),
                floats(&src_shape, 3, dtype),
            ];
            lowered_to_one_kernel(op.clone(), &inputs, 0.0);
            // Duplicates: the rows' sum is added to x, within rounding of eager's order.
            src_shape[dim] = 6;
            let picks: Vec<i64> = (0..6).map(|i| (i * 3 + 1) % size).collect();
            let inputs = [x.clone(), ints(&picks, &[6]), floats(&src_shape, 5, dtype)];
            lowered_to_one_kernel(op.clone(), &inputs, 1e-5);
            // No rows: x unchanged.
            src_shape[dim] = 0;
            let inputs = [x.clone(), ints(&[], &[0]), floats(&src_shape, 5, dtype)];
            lowered_to_one_kernel(op, &inputs, 0.0);
        }
    }
}

#[test]
fn index_add_reads_a_transposed_input_and_source_in_place() {
    let x = floats(&[5, 4], 1, DType::F32).t().unwrap();
    let src = floats(&[3, 4], 2, DType::F32).t().unwrap();
    let op = Op::Index(IndexOp::IndexAdd { dim: 1 });
    lowered_to_one_kernel(op, &[x, ints(&[4, 0, 2], &[3]), src], 0.0);
}

#[test]
fn scatter_add_equals_eager_along_every_dim() {
    for dtype in [DType::F32, DType::F64] {
        let x = floats(&[3, 4, 2], 7, dtype);
        for dim in 0..3 {
            let size = x.shape()[dim] as i64;
            let mut shape = x.shape();
            shape[dim] = 5;
            let n: usize = shape.iter().product();
            let index: Vec<i64> = (0..n as i64).map(|i| (i * 5 + 2) % size).collect();
            // A source larger than the index: only the index's corner is added.
            let mut src_shape = shape.clone();
            src_shape[dim] += 1;
            let op = Op::Index(IndexOp::ScatterAdd { dim });
            let inputs = [
                x.clone(),
                ints(&index, &shape),
                floats(&src_shape, 3, dtype),
            ];
            lowered_to_one_kernel(op, &inputs, 1e-5);
        }
    }
}

#[test]
fn scatter_add_with_an_index_narrower_than_the_input_runs_the_eager_kernel() {
    let x = floats(&[3, 4], 1, DType::F32);
    let inputs = [x, ints(&[0, 1], &[1, 2]), floats(&[1, 2], 2, DType::F32)];
    let g = op_graph(Op::Index(IndexOp::ScatterAdd { dim: 0 }), &inputs);
    let program = lowered(&g, &inputs);
    assert_eq!(program.fallbacks.len(), 1, "{program}");
    check_backends(&program, &inputs, &eager(&g, &inputs), 0.0);
}

#[test]
fn index_add_and_scatter_add_past_the_dim_fail_with_the_index_and_the_size() {
    let x = floats(&[4, 5], 7, DType::F64);
    let op = Op::Index(IndexOp::IndexAdd { dim: 1 });
    faults(
        op,
        &[
            x.clone(),
            ints(&[0, 5], &[2]),
            floats(&[4, 2], 1, DType::F64),
        ],
        5,
        5,
    );
    let op = Op::Index(IndexOp::ScatterAdd { dim: 0 });
    let index = ints(&[0, 1, -2, 2, 3], &[1, 5]);
    faults(op, &[x, index, floats(&[1, 5], 1, DType::F64)], -2, 4);
}

#[test]
fn index_add_and_scatter_add_of_0_d_inputs_indices_and_sources_equal_eager() {
    for dtype in [DType::F32, DType::F64] {
        let index_add = Op::Index(IndexOp::IndexAdd { dim: 0 });
        // A 0-d index picks one row of a [1, ..] source.
        let inputs = [
            floats(&[2, 3, 3], 1, dtype),
            ints(&[1], &[]),
            floats(&[1, 3, 3], 2, dtype),
        ];
        lowered_to_one_kernel(index_add.clone(), &inputs, 0.0);
        // A 0-d source and input: one element each.
        let inputs = [
            floats(&[1], 3, dtype),
            ints(&[0], &[1]),
            floats(&[], 4, dtype),
        ];
        lowered_to_one_kernel(index_add.clone(), &inputs, 0.0);
        let inputs = [
            floats(&[], 3, dtype),
            ints(&[0], &[]),
            floats(&[], 4, dtype),
        ];
        lowered_to_one_kernel(index_add, &inputs, 0.0);
        let scatter_add = Op::Index(IndexOp::ScatterAdd { dim: 0 });
        let inputs = [
            floats(&[1], 3, dtype),
            ints(&[0], &[1]),
            floats(&[], 4, dtype),
        ];
        lowered_to_one_kernel(scatter_add.clone(), &inputs, 0.0);
        let inputs = [
            floats(&[], 3, dtype),
            ints(&[0], &[]),
            floats(&[], 4, dtype),
        ];
        lowered_to_one_kernel(scatter_add, &inputs, 0.0);
    }
}

#[test]
fn a_0_d_index_past_its_dim_fails_with_the_index_and_the_size() {
    let op = Op::Index(IndexOp::IndexAdd { dim: 0 });
    let inputs = [
        floats(&[2, 3], 1, DType::F32),
        ints(&[2], &[]),
        floats(&[1, 3], 2, DType::F32),
    ];
    faults(op, &inputs, 2, 2);
}
