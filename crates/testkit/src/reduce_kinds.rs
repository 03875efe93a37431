//! One sample of every reduction kind, for the tests that run each op kind once.

use tessera_tensor::op::ReduceKind;

/// Every `ReduceKind`, with one sample correction for `Var` and `Std`.
pub fn every_reduce_kind() -> Vec<ReduceKind> {
    vec![
        ReduceKind::Sum,
        ReduceKind::Mean,
        ReduceKind::Amax,
        ReduceKind::Amin,
        ReduceKind::Var { correction: 1 },
        ReduceKind::Std { correction: 0 },
        ReduceKind::LogSumExp,
        ReduceKind::ArgMax,
        ReduceKind::ArgMin,
        ReduceKind::MaxWithIndices,
        ReduceKind::MinWithIndices,
    ]
}
