//! Data-dependent loads in generated kernels: the negative log-likelihood and its gradient,
//! embedding lookups, `index_select` and `gather` lower to kernels (no fallback) whose
//! interpreted and JIT-compiled results equal eager execution, for f32 and f64, ignored targets,
//! label smoothing (one kernel, or two with a sum or mean), empty batches and inputs with no
//! classes (whose targets are still checked); an index outside its dim fails the run with the typed
//! `IndexOutOfRange` error (naming the kernel, the index and the dim's size) in both runners,
//! as eager execution fails, and never reads out of bounds.

use crate::common;

use common::{eager, faults, lowered, lowered_agreeing, op_graph};
use tessera_cpu::JitProgram;
use tessera_kernel::{NoEnvironment, run_program};
use tessera_tensor::op::{EmbeddingOp, IndexOp, LossOp, Reduction};
use tessera_tensor::{DType, Op, Tensor};

const REDUCTIONS: [Reduction; 3] = [Reduction::None, Reduction::Sum, Reduction::Mean];

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

fn nll(reduction: Reduction, ignore_index: i64, label_smoothing: f64) -> LossOp {
    LossOp::Nll {
        reduction,
        ignore_index,
        label_smoothing,
    }
}

fn nll_backward(reduction: Reduction, ignore_index: i64, label_smoothing: f64) -> LossOp {
    LossOp::NllBackward {
        reduction,
        ignore_index,
        label_smoothing,
    }
}

#[test]
fn nll_loss_equals_eager_for_every_reduction_dtype_and_shape() {
    for dtype in [DType::F32, DType::F64] {
        for reduction in REDUCTIONS {
            // [N, C] with an ignored target, [N, C, D], and a single sample [C].
            let cases = [
                (vec![6, 5], ints(&[0, 4, -100, 2, 3, 1], &[6])),
                (vec![3, 4, 2], ints(&[3, 0, 1, -100, 2, 2], &[3, 2])),
                (vec![7], ints(&[5], &[])),
            ];
            for (i, (shape, target)) in cases.into_iter().enumerate() {
                let inputs = [floats(&shape, i as u32, dtype), target];
                let program = lowered_agreeing(Op::Loss(nll(reduction, -100, 0.0)), &inputs, 0.0);
                assert_eq!(program.kernels().count(), 1, "{program}");
            }
        }
    }
}

#[test]
fn nll_loss_with_label_smoothing_sums_the_classes_in_a_reduction_loop() {
    for dtype in [DType::F32, DType::F64] {
        let inputs = [
            floats(&[5, 6, 2], 3, dtype),
            ints(&[0, 5, 1, 1, -1, 4, 3, 3, 2, 0], &[5, 2]),
        ];
        let program = lowered_agreeing(Op::Loss(nll(Reduction::None, -1, 0.2)), &inputs, 1e-12);
        let kernel = program.kernels().next().unwrap();
        assert_eq!(kernel.reduce, vec![6], "{program}");
    }
}

#[test]
fn nll_loss_with_label_smoothing_and_a_sum_or_mean_adds_the_sample_losses_in_a_second_kernel() {
    for dtype in [DType::F32, DType::F64] {
        for reduction in [Reduction::Sum, Reduction::Mean] {
            let inputs = [floats(&[4, 3], 1, dtype), ints(&[0, 1, 2, -100], &[4])];
            let op = Op::Loss(nll(reduction, -100, 0.1));
            let program = lowered_agreeing(op.clone(), &inputs, 0.0);
            assert_eq!(program.kernels().count(), 2, "{program}");
            // A single sample: input [C], target [].
            lowered_agreeing(op, &[floats(&[5], 2, dtype), ints(&[3], &[])], 0.0);
        }
    }
}

#[test]
fn nll_loss_of_an_empty_batch_equals_eager() {
    for reduction in REDUCTIONS {
        let inputs = [floats(&[0, 4], 1, DType::F32), ints(&[], &[0])];
        lowered_agreeing(Op::Loss(nll(reduction, -100, 0.0)), &inputs, 0.0);
        let grad = match reduction {
            Reduction::None => floats(&[0], 2, DType::F32),
            _ => floats(&[], 2, DType::F32),
        };
        let inputs = [grad, inputs[0].clone(), inputs[1].clone()];
        lowered_agreeing(Op::Loss(nll_backward(reduction, -100, 0.0)), &inputs, 0.0);
    }
}

#[test]
fn nll_loss_of_only_ignored_targets_is_nan_for_a_mean_as_eager() {
    let inputs = [
        floats(&[3, 4], 1, DType::F32),
        ints(&[-100, -100, -100], &[3]),
    ];
    let g = op_graph(Op::Loss(nll(Reduction::Mean, -100, 0.0)), &inputs);
    assert!(eager(&g, &inputs)[0].to_vec::<f32>().unwrap()[0].is_nan());
    lowered_agreeing(Op::Loss(nll(Reduction::Mean, -100, 0.0)), &inputs, 0.0);
}

#[test]
fn nll_loss_of_an_input_with_no_classes_checks_the_targets_as_eager_does() {
    for reduction in REDUCTIONS {
        for smoothing in [0.0, 0.2] {
            let grad = |shape: &[usize], dtype| match reduction {
                Reduction::None => floats(shape, 2, dtype),
                _ => floats(&[], 2, dtype),
            };
            // Every target ignored: a loss of 0 (NaN for a mean), an empty gradient.
            for (shape, target) in [
                (vec![3, 0], ints(&[-100, -100, -100], &[3])),
                (vec![2, 0, 2], ints(&[-100; 4], &[2, 2])),
                (vec![0], ints(&[-100], &[])),
                (vec![0, 0], ints(&[], &[0])),
            ] {
                let x = floats(&shape, 1, DType::F64);
                let inputs = [x.clone(), target.clone()];
                lowered_agreeing(Op::Loss(nll(reduction, -100, smoothing)), &inputs, 0.0);
                let inputs = [grad(&target.shape(), DType::F64), x, target];
                let op = Op::Loss(nll_backward(reduction, -100, smoothing));
                lowered_agreeing(op, &inputs, 0.0);
            }
            // Any other target is out of range: reported as `target + 1` of a dim of size 1.
            let inputs = [floats(&[3, 0], 1, DType::F32), ints(&[-100, 0, -100], &[3])];
            faults(Op::Loss(nll(reduction, -100, smoothing)), &inputs, 1, 1);
            let inputs = [
                floats(&[3, 0], 1, DType::F32),
                ints(&[-100, -100, -7], &[3]),
            ];
            faults(Op::Loss(nll(reduction, -100, smoothing)), &inputs, -7, 1);
            let inputs = [
                grad(&[3], DType::F32),
                floats(&[3, 0], 1, DType::F32),
                ints(&[4, -100, -100], &[3]),
            ];
            let op = Op::Loss(nll_backward(reduction, -100, smoothing));
            faults(op, &inputs, 5, 1);
        }
    }
}

#[test]
fn nll_loss_backward_equals_eager_for_every_reduction_dtype_and_smoothing() {
    for dtype in [DType::F32, DType::F64] {
        for reduction in REDUCTIONS {
            for smoothing in [0.0, 0.3] {
                let target = ints(&[3, 0, 1, 7, 2, 2], &[3, 2]);
                let grad = match reduction {
                    Reduction::None => floats(&[3, 2], 5, dtype),
                    _ => floats(&[], 5, dtype),
                };
                let inputs = [grad, floats(&[3, 4, 2], 1, dtype), target];
                let op = Op::Loss(nll_backward(reduction, 7, smoothing));
                let program = lowered_agreeing(op.clone(), &inputs, 0.0);
                let kernels = 1 + usize::from(reduction == Reduction::Mean);
                assert_eq!(program.kernels().count(), kernels, "{program}");
                // A single sample: input [C], target [].
                let grad = floats(&[], 6, dtype);
                let inputs = [grad, floats(&[4], 2, dtype), ints(&[2], &[])];
                lowered_agreeing(op, &inputs, 0.0);
            }
        }
    }
}

#[test]
fn nll_loss_with_a_target_past_the_classes_fails_with_the_index_and_the_class_count() {
    for reduction in REDUCTIONS {
        let inputs = [floats(&[4, 5], 1, DType::F32), ints(&[0, 5, 1, 2], &[4])];
        faults(Op::Loss(nll(reduction, -100, 0.0)), &inputs, 5, 5);
        let inputs = [floats(&[4, 5], 1, DType::F64), ints(&[0, 1, -3, 2], &[4])];
        faults(Op::Loss(nll(reduction, -100, 0.0)), &inputs, -3, 5);
        let grad = match reduction {
            Reduction::None => floats(&[4], 2, DType::F32),
            _ => floats(&[], 2, DType::F32),
        };
        let inputs = [
            grad,
            floats(&[4, 5], 1, DType::F32),
            ints(&[9, 1, 1, 2], &[4]),
        ];
        faults(Op::Loss(nll_backward(reduction, -100, 0.0)), &inputs, 9, 5);
    }
}

#[test]
fn embedding_gathers_rows_even_of_a_transposed_table() {
    for dtype in [DType::F32, DType::F64] {
        let table = floats(&[6, 10], 4, dtype);
        let ids = ints(&[5, 0, 3, 3, 1, 0], &[2, 3]);
        let op = Op::Embedding(EmbeddingOp { padding_idx: None });
        let program = lowered_agreeing(op.clone(), &[table, ids.clone()], 0.0);
        assert_eq!(program.kernels().count(), 1, "{program}");
        // A table whose rows are strided: the gather steps by its row stride.
        let transposed = floats(&[10, 6], 5, dtype).t().unwrap();
        lowered_agreeing(op, &[transposed, ids], 0.0);
    }
}

#[test]
fn embedding_with_an_id_past_the_table_fails_with_the_id_and_the_row_count() {
    let op = Op::Embedding(EmbeddingOp { padding_idx: None });
    let inputs = [floats(&[6, 4], 1, DType::F32), ints(&[1, 6, 2], &[3])];
    faults(op, &inputs, 6, 6);
}

#[test]
fn index_select_and_gather_equal_eager_along_every_dim() {
    let x = floats(&[4, 5, 3], 7, DType::F32);
    for dim in 0..3 {
        let size = x.shape()[dim] as i64;
        let picks: Vec<i64> = (0..6).map(|i| (i * 3 + 1) % size).collect();
        let op = Op::Index(IndexOp::IndexSelect { dim });
        lowered_agreeing(op, &[x.clone(), ints(&picks, &[6])], 0.0);
        let mut shape = x.shape();
        shape[dim] = 2;
        let n: usize = shape.iter().product();
        let index: Vec<i64> = (0..n as i64).map(|i| (i * 5 + 2) % size).collect();
        let op = Op::Index(IndexOp::Gather { dim });
        lowered_agreeing(op, &[x.clone(), ints(&index, &shape)], 0.0);
    }
}

#[test]
fn index_select_and_gather_past_the_dim_fail_with_the_index_and_the_size() {
    let x = floats(&[4, 5], 7, DType::F64);
    let op = Op::Index(IndexOp::IndexSelect { dim: 1 });
    faults(op, &[x.clone(), ints(&[0, 5], &[2])], 5, 5);
    let op = Op::Index(IndexOp::Gather { dim: 0 });
    faults(op, &[x, ints(&[0, 1, -1, 2, 3], &[1, 5])], -1, 4);
}

#[test]
fn a_fault_does_not_outlive_its_run() {
    let op = Op::Embedding(EmbeddingOp { padding_idx: None });
    let bad = [floats(&[3, 2], 1, DType::F32), ints(&[3], &[1])];
    let good = [floats(&[3, 2], 1, DType::F32), ints(&[2], &[1])];
    let g = op_graph(op, &bad);
    let program = lowered(&g, &bad);
    let jit = JitProgram::compile(&program).unwrap();
    assert!(run_program(&program, &NoEnvironment, &jit, &bad).is_err());
    let out = run_program(&program, &NoEnvironment, &jit, &good).unwrap();
    assert_eq!(
        out[0].to_vec::<f32>().unwrap(),
        eager(&g, &good)[0].to_vec::<f32>().unwrap()
    );
}
