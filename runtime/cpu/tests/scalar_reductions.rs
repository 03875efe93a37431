//! Reductions and softmax of a 0-d tensor as generated kernels: the value reductions (which
//! reduce nothing: the element itself, its variance over one element) and softmax and
//! log-softmax (1 and 0) lower to one kernel over a frame of the one element, and the
//! kernel-IR interpreter and the JIT give the eager results, NaN and infinities included.

use crate::common;

use common::{one_kernel_agreeing, op_graph};
use tessera_tensor::op::{ReduceKind, ReduceOp};
use tessera_tensor::{DType, Op, Tensor};

const KINDS: [ReduceKind; 9] = [
    ReduceKind::Sum,
    ReduceKind::Mean,
    ReduceKind::Amax,
    ReduceKind::Amin,
    ReduceKind::Var { correction: 0 },
    ReduceKind::Var { correction: 1 },
    ReduceKind::Std { correction: 0 },
    ReduceKind::Std { correction: 1 },
    ReduceKind::LogSumExp,
];

/// 0-d tensors of `dtype` holding ordinary and special values.
fn scalars(dtype: DType) -> Vec<Tensor> {
    [1.5, -2.25, 0.0, f64::INFINITY, f64::NEG_INFINITY, f64::NAN]
        .into_iter()
        .map(|v| {
            Tensor::from_vec(vec![v], &[])
                .unwrap()
                .to_dtype(dtype)
                .unwrap()
        })
        .collect()
}

#[test]
fn value_reductions_of_a_0d_tensor_are_one_kernel_equal_to_eager() {
    for dtype in [DType::F32, DType::F64] {
        for x in scalars(dtype) {
            for kind in KINDS {
                // Eager logsumexp takes its maximum ignoring NaN (a NaN-only row gives -inf),
                // the kernels' maximum lets NaN win (NaN, as PyTorch): a known difference of
                // every logsumexp kernel, not of 0-d ones.
                if kind == ReduceKind::LogSumExp && x.to_vec_f64().unwrap()[0].is_nan() {
                    continue;
                }
                for keepdim in [false, true] {
                    let op = Op::Reduce(ReduceOp {
                        kind,
                        dims: vec![],
                        keepdim,
                    });
                    let inputs = [x.clone()];
                    one_kernel_agreeing(&op_graph(op, &inputs), &inputs, 1e-6);
                }
            }
        }
    }
}

#[test]
fn softmax_of_a_0d_tensor_is_one_kernel_equal_to_eager() {
    for dtype in [DType::F32, DType::F64] {
        for x in scalars(dtype) {
            for log in [false, true] {
                let inputs = [x.clone()];
                let op = Op::Softmax { dim: 0, log };
                one_kernel_agreeing(&op_graph(op, &inputs), &inputs, 1e-6);
            }
        }
    }
}
