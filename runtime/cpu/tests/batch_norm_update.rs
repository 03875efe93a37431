//! Batch norm's running-statistics update lowered to kernels (the i64 batch count, then the
//! per-channel blend in f64): interpreted and JIT-compiled results equal the eager kernel's bit
//! for bit, with a momentum and as a cumulative average.

use crate::common;

use common::{check_backends, eager, lowered};
use tessera_fx::Graph;
use tessera_tensor::op::BatchNormUpdateOp;
use tessera_tensor::{DType, Op, Tensor, TensorMeta};

fn update_graph(op: BatchNormUpdateOp, dtype: DType, channels: usize) -> Graph {
    let mut g = Graph::new();
    let mut args = Vec::new();
    for name in ["batch_mean", "batch_var", "running_mean", "running_var"] {
        args.push(g.placeholder(name, TensorMeta::new([channels], dtype)));
    }
    if op.counted {
        args.push(g.placeholder("num_batches_tracked", TensorMeta::new([], DType::I64)));
    }
    let refs: Vec<_> = args.iter().collect();
    let update = g.call_function(Op::BatchNormUpdate(op), &refs).unwrap();
    let outs: Vec<_> = (0..2 + usize::from(op.counted))
        .map(|i| g.getitem(&update, i).unwrap())
        .collect();
    g.output(&outs.iter().collect::<Vec<_>>()).unwrap();
    g
}

fn stats(dtype: DType, channels: usize, seed: usize) -> Tensor {
    let v: Vec<f64> = (0..channels)
        .map(|i| ((i * 37 + seed * 11) % 23) as f64 / 7.0 + 0.1)
        .collect();
    Tensor::from_vec(v, &[channels])
        .unwrap()
        .to_dtype(dtype)
        .unwrap()
}

#[test]
fn running_statistics_and_batch_count_equal_the_eager_update() {
    let cases = [(Some(0.1), true), (Some(0.3), false), (None, true)];
    for dtype in [DType::F32, DType::F64] {
        for (momentum, counted) in cases {
            let op = BatchNormUpdateOp {
                momentum,
                count: 50,
                counted,
            };
            let channels = 19;
            let g = update_graph(op, dtype, channels);
            let mut inputs: Vec<Tensor> = (0..4).map(|s| stats(dtype, channels, s)).collect();
            if counted {
                inputs.push(Tensor::scalar(6i64));
            }
            let program = lowered(&g, &inputs);
            assert!(program.fallbacks.is_empty(), "{program}");
            assert_eq!(
                program.kernels().count(),
                1 + usize::from(counted),
                "{program}"
            );
            check_backends(&program, &inputs, &eager(&g, &inputs), 0.0);
        }
    }
}

#[test]
fn half_running_statistics_run_the_eager_update() {
    let op = BatchNormUpdateOp {
        momentum: Some(0.1),
        count: 8,
        counted: true,
    };
    let g = update_graph(op, DType::F16, 4);
    let mut inputs: Vec<Tensor> = (0..4).map(|s| stats(DType::F16, 4, s)).collect();
    inputs.push(Tensor::scalar(0i64));
    let program = lowered(&g, &inputs);
    assert_eq!(program.fallbacks.len(), 1, "{program}");
    assert_eq!(program.fallbacks[0].op, "batch_norm_update");
    check_backends(&program, &inputs, &eager(&g, &inputs), 0.0);
}
