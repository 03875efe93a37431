//! Graphs of optimizer updates over several parameters, the inputs of the launch-group tests
//! of every backend: one update node per parameter, each reading its parameter, gradient and
//! one state tensor and the shared learning rate.

use tessera_fx::{Graph, NodeId};
use tessera_tensor::op::OptimOp;
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
