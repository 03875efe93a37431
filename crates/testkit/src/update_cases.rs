//! Graphs of optimizer updates, the inputs of the launch-group and fused-update tests of every
//! backend: over several parameters, one update node per parameter, each reading its
//! parameter, gradient and one state tensor and the shared learning rate ([`updates`]); and
//! one update whose gradient a GEMM computes, as a linear's weight gradient ([`gemm_update`]).

use tessera_fx::{Graph, NodeId};
use tessera_tensor::op::{OptimOp, ViewOp};
use tessera_tensor::{DType, Op, Tensor, TensorMeta};

/// Deterministic f32 values in about [-2, 2], different for each `seed`.
pub fn values(shape: &[usize], seed: u64) -> Tensor {
    let n: usize = shape.iter().product();
    let v: Vec<f32> = (0..n)
        .map(|i| ((i as u64 * 7919 + seed * 104_729) % 997) as f32 / 997.0 * 4.0 - 2.0)
        .collect();
    Tensor::from_vec(v, shape).expect("values match the shape")
}

/// SGD with nesterov momentum and weight decay: an update returning the new parameter and
/// momentum buffer.
pub fn sgd_momentum() -> OptimOp {
    OptimOp::SgdUpdate {
        momentum: 0.9,
        dampening: 0.0,
        weight_decay: 1e-3,
        nesterov: true,
        maximize: false,
    }
}

/// `op` (an update taking parameter, gradient and one state tensor, then the learning rate,
/// and returning `outputs` values) over one f32 parameter per shape of `shapes`; the inputs
/// are the learning rate (an f64 scalar), then each parameter's three tensors ([`values`]),
/// the outputs each update's values in turn.
pub fn updates(op: &OptimOp, shapes: &[&[usize]], outputs: usize) -> (Graph, Vec<Tensor>) {
    let mut g = Graph::new();
    let mut inputs = Vec::new();
    let lr = g.placeholder("lr", TensorMeta::new([], DType::F64));
    inputs.push(Tensor::scalar(0.0371f64));
    let mut outs = Vec::new();
    for (i, shape) in shapes.iter().enumerate() {
        let meta = TensorMeta::new(shape.to_vec(), DType::F32);
        let args: Vec<NodeId> = ["param", "grad", "buf"]
            .iter()
            .map(|n| g.placeholder(&format!("{n}{i}"), meta.clone()))
            .collect();
        for k in 0..3 {
            inputs.push(values(shape, (3 * i + k) as u64));
        }
        let update = g
            .call_function(Op::Optim(op.clone()), &[&args[0], &args[1], &args[2], &lr])
            .expect("an update of matching shapes");
        for k in 0..outputs {
            outs.push(g.getitem(&update, k).expect("an output of the update"));
        }
    }
    g.output(&outs.iter().collect::<Vec<_>>())
        .expect("the updates' outputs");
    (g, inputs)
}

/// The GEMM of [`gemm_update`]: the parameter's rows and columns and the reduced dimension.
#[derive(Debug, Clone, Copy)]
pub struct GemmUpdate {
    pub rows: usize,
    pub cols: usize,
    pub k: usize,
}

/// `op` applied to a `[rows, cols]` parameter of `dtype` whose gradient is `a^T @ x` (`a:
/// [k, rows]`, `x: [k, cols]`, as a linear's weight gradient comes from its output gradient and
/// its input), with `state` state tensors (momentum buffer, moments) and `scalars` f64 scalars
/// after them (the learning rate, then Adam's step size and bias correction). Every output of
/// the update is returned, then, with `grad_returned`, the gradient too (a second consumer of
/// the GEMM). Inputs in order: parameter, `a`, `x`, the state, the scalars; the state is
/// non-negative (a second moment).
pub fn gemm_update(
    op: &OptimOp,
    shape: GemmUpdate,
    dtype: DType,
    (state, scalars): (usize, usize),
    grad_returned: bool,
) -> (Graph, Vec<Tensor>) {
    let GemmUpdate { rows, cols, k } = shape;
    let mut g = Graph::new();
    let tensor =
        |shape: &[usize], seed: u64| values(shape, seed).to_dtype(dtype).expect("a float dtype");
    let param = g.placeholder("param", TensorMeta::new([rows, cols], dtype));
    let a = g.placeholder("a", TensorMeta::new([k, rows], dtype));
    let x = g.placeholder("x", TensorMeta::new([k, cols], dtype));
    let mut inputs = vec![
        tensor(&[rows, cols], 1),
        tensor(&[k, rows], 2),
        tensor(&[k, cols], 3),
    ];
    let at = g
        .call_function(Op::View(ViewOp::Permute(vec![1, 0])), &[&a])
        .expect("a 2-d permute");
    let grad = g
        .call_function(Op::Matmul, &[&at, &x])
        .expect("a matching matmul");
    let mut args = vec![param, grad];
    for i in 0..state {
        args.push(g.placeholder(&format!("state{i}"), TensorMeta::new([rows, cols], dtype)));
        inputs.push(tensor(&[rows, cols], 4 + i as u64).abs().expect("abs"));
    }
    for (i, value) in [0.0371f64, 0.0123, 0.75].iter().take(scalars).enumerate() {
        args.push(g.placeholder(&format!("scalar{i}"), TensorMeta::new([], DType::F64)));
        inputs.push(Tensor::scalar(*value));
    }
    let update = g
        .call_function(Op::Optim(op.clone()), &args.iter().collect::<Vec<_>>())
        .expect("an update of matching inputs");
    let outputs = g.node(&update).map(|n| n.meta.len()).unwrap_or(1);
    let mut outs: Vec<NodeId> = if outputs == 1 {
        vec![update]
    } else {
        (0..outputs)
            .map(|i| g.getitem(&update, i).expect("an output of the update"))
            .collect()
    };
    if grad_returned {
        outs.push(grad);
    }
    g.output(&outs.iter().collect::<Vec<_>>())
        .expect("the update's outputs");
    (g, inputs)
}
