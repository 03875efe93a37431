//! Finite differences on the derived backward graph of every differentiable op of the op table
//! (the backward ops included, through their own derivatives): a one-op graph in f64, its joint
//! graph run by the interpreter, against central differences of the forward graph.

use tessera_fx::autodiff::joint_graph;
use tessera_fx::trace::TracedGraph;
use tessera_fx::{Graph, NodeId};
use tessera_nn::layers::Identity;
use tessera_tensor::op::{
    BinaryOp, ConvOp, ConvParams, EmbeddingBackwardOp, EmbeddingOp, IndexOp, LossOp, NormOp,
    Pool2dParams, PoolOp, ReduceOp, Reduction, ScalarOp, UnaryOp, ViewOp,
};
use tessera_tensor::{DType, GradcheckOptions, Op, Tensor, gradcheck_vjp};
use tessera_testkit::every_reduce_kind;

fn randn(shape: &[usize], seed: u64) -> Tensor {
    tessera_testkit::leaf(shape, seed).detach()
}

/// Samples away from zero, for logs, square roots and powers.
fn positive(shape: &[usize], seed: u64) -> Tensor {
    randn(shape, seed).abs().unwrap().add_scalar(0.5).unwrap()
}

/// Samples in `(0.1, 0.9)`, for probabilities.
fn probability(shape: &[usize], seed: u64) -> Tensor {
    randn(shape, seed)
        .sigmoid()
        .unwrap()
        .mul_scalar(0.8)
        .unwrap()
        .add_scalar(0.1)
        .unwrap()
}

fn indices(values: &[i64], shape: &[usize]) -> Tensor {
    Tensor::from_vec(values.to_vec(), shape).unwrap()
}

/// Checks the joint graph of `op` applied to `inputs` (its first output differentiated) with
/// respect to the inputs flagged in `differentiable`.
fn check(op: Op, inputs: Vec<Tensor>, differentiable: &[bool]) {
    let name = op.name();
    let mut g = Graph::new();
    let placeholders: Vec<NodeId> = inputs
        .iter()
        .enumerate()
        .map(|(i, t)| g.placeholder(&format!("x{i}"), t.meta()))
        .collect();
    let refs: Vec<&NodeId> = placeholders.iter().collect();
    let y = g.call_function(op, &refs).unwrap();
    let out = if g.node(&y).unwrap().meta.len() > 1 {
        g.getitem(&y, 0).unwrap()
    } else {
        y
    };
    g.output(&[&out]).unwrap();
    let forward = TracedGraph::from(g);
    let wrt_names: Vec<String> = (0..inputs.len())
        .filter(|&i| differentiable[i])
        .map(|i| format!("x{i}"))
        .collect();
    let wrt: Vec<&str> = wrt_names.iter().map(String::as_str).collect();
    let joint = joint_graph(&forward, &wrt).unwrap_or_else(|e| panic!("{name}: {e}"));
    let root = Identity::new();
    let leaves: Vec<Tensor> = inputs
        .iter()
        .zip(differentiable)
        .map(|(t, &d)| {
            // A fresh handle: the caller may pass one tensor to several checks.
            let t = t.detach();
            if d {
                t.requires_grad_(true).unwrap()
            } else {
                t
            }
        })
        .collect();
    let f = |xs: &[Tensor]| -> tessera_tensor::Result<Tensor> {
        let detached: Vec<Tensor> = xs.iter().map(Tensor::detach).collect();
        Ok(forward
            .interpret(&root, &detached)
            .unwrap_or_else(|e| panic!("{name}: {e}"))
            .remove(0))
    };
    let vjp = |xs: &[Tensor], w: &Tensor| -> tessera_tensor::Result<Vec<Option<Tensor>>> {
        let mut args: Vec<Tensor> = xs.iter().map(Tensor::detach).collect();
        let seeded = joint.tangents.is_empty();
        if !seeded {
            args.push(w.clone());
        }
        let outs = joint
            .traced
            .interpret(&root, &args)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let mut grads = outs[joint.forward_outputs..].iter();
        (0..xs.len())
            .map(|i| {
                if !differentiable[i] {
                    return Ok(None);
                }
                let g = grads.next().expect("one gradient per value").clone();
                // A one-element output was seeded with ones: scale by the weight.
                Ok(Some(if seeded { g.mul(&w.reshape(&[])?)? } else { g }))
            })
            .collect()
    };
    let options = GradcheckOptions {
        atol: 1e-5,
        rtol: 1e-4,
        ..Default::default()
    };
    gradcheck_vjp(f, vjp, &leaves, options).unwrap_or_else(|e| panic!("{name}: {e}"));
}

fn all(n: usize) -> Vec<bool> {
    vec![true; n]
}

#[test]
fn unary_ops_and_their_backward_ops() {
    for (k, u) in UnaryOp::EVERY.into_iter().enumerate() {
        let seed = k as u64;
        let needs_positive = matches!(u, UnaryOp::Log | UnaryOp::Sqrt | UnaryOp::Rsqrt);
        let x = if needs_positive {
            positive(&[2, 3], seed)
        } else {
            randn(&[2, 3], seed)
        };
        check(Op::Unary(u), vec![x.clone()], &all(1));
        // The backward op reads the input or the output; the input stands in for either.
        let piecewise_linear = matches!(
            u,
            UnaryOp::Neg
                | UnaryOp::Abs
                | UnaryOp::Sign
                | UnaryOp::Relu
                | UnaryOp::LeakyRelu { .. }
                | UnaryOp::Hardsigmoid
                | UnaryOp::Relu6
        );
        check(
            Op::UnaryBackward(u),
            vec![randn(&[2, 3], seed + 100), x],
            &[true, piecewise_linear],
        );
    }
}

#[test]
fn binary_scalar_and_selection_ops() {
    for (k, b) in BinaryOp::EVERY.into_iter().enumerate() {
        let a = if b == BinaryOp::Pow {
            positive(&[2, 3], k as u64)
        } else {
            randn(&[2, 3], k as u64)
        };
        // The second operand broadcasts.
        check(
            Op::Binary(b),
            vec![a.clone(), randn(&[3], 50 + k as u64)],
            &all(2),
        );
        for reversed in [false, true] {
            let op = Op::Scalar(ScalarOp {
                op: b,
                value: 1.5,
                reversed,
            });
            check(op, vec![positive(&[2, 3], 70 + k as u64)], &all(1));
        }
    }
    let cond = randn(&[2, 3], 9).gt_scalar(0.0).unwrap();
    check(
        Op::Where,
        vec![cond, randn(&[2, 3], 10), randn(&[1, 3], 11)],
        &[false, true, true],
    );
    let clamp = Op::Clamp {
        min: Some(-0.5),
        max: Some(0.5),
    };
    check(clamp, vec![randn(&[2, 3], 12)], &all(1));
}

#[test]
fn reductions_and_softmax() {
    for kind in every_reduce_kind() {
        let op = ReduceOp {
            kind,
            dims: vec![1],
            keepdim: false,
        };
        let op = Op::Reduce(op);
        if !op.output_is_differentiable(0) {
            continue;
        }
        check(op, vec![randn(&[2, 4], 13)], &all(1));
    }
    let keepdim = Op::Reduce(ReduceOp {
        kind: tessera_tensor::op::ReduceKind::Mean,
        dims: vec![0, 2],
        keepdim: true,
    });
    check(keepdim, vec![randn(&[2, 3, 2], 14)], &all(1));
    for log in [false, true] {
        check(
            Op::Softmax { dim: 1, log },
            vec![randn(&[2, 4], 15)],
            &all(1),
        );
    }
}

#[test]
fn matrix_products_and_views() {
    check(
        Op::Matmul,
        vec![randn(&[2, 3], 16), randn(&[3, 4], 17)],
        &all(2),
    );
    check(
        Op::Matmul,
        vec![randn(&[2, 2, 3], 18), randn(&[3], 19)],
        &all(2),
    );
    check(
        Op::Linear { bias: true },
        vec![randn(&[2, 3], 20), randn(&[4, 3], 21), randn(&[4], 22)],
        &all(3),
    );
    let views = [
        (ViewOp::Reshape(vec![3, 2]), vec![2, 3]),
        (ViewOp::Permute(vec![1, 0]), vec![2, 3]),
        (
            ViewOp::Narrow {
                dim: 1,
                start: 1,
                len: 1,
            },
            vec![2, 3],
        ),
        (ViewOp::Expand(vec![2, 3]), vec![1, 3]),
        (ViewOp::Contiguous, vec![2, 3]),
    ];
    for (view, shape) in views {
        check(Op::View(view), vec![randn(&shape, 23)], &all(1));
    }
    check(Op::ToDType(DType::F64), vec![randn(&[3], 24)], &all(1));
}

#[test]
fn convolutions_and_their_backward_ops() {
    let params = ConvParams::conv2d([1, 1], [1, 1], [1, 1], 1);
    let (x, w) = (randn(&[1, 2, 4, 4], 25), randn(&[3, 2, 3, 3], 26));
    check(
        Op::Conv(ConvOp::Forward { params, bias: true }),
        vec![x.clone(), w.clone(), randn(&[3], 27)],
        &all(3),
    );
    let grad_out = randn(&[1, 3, 4, 4], 28);
    check(
        Op::Conv(ConvOp::BackwardInput {
            params,
            input_size: [4, 4],
        }),
        vec![grad_out.clone(), w],
        &all(2),
    );
    check(
        Op::Conv(ConvOp::BackwardWeight {
            params,
            kernel_size: [3, 3],
        }),
        vec![x, grad_out],
        &all(2),
    );
}

#[test]
fn pooling_and_its_backward_ops() {
    let params = Pool2dParams {
        kernel: [2, 2],
        stride: [2, 2],
        padding: [0, 0],
        dilation: [1, 1],
        ceil_mode: false,
    };
    let x = randn(&[1, 2, 4, 4], 29);
    let ops = [
        PoolOp::MaxPool2d(params),
        PoolOp::MaxPool2dValues(params),
        PoolOp::AvgPool2d {
            params,
            count_include_pad: true,
        },
        PoolOp::AdaptiveAvgPool2d {
            output_size: [3, 3],
        },
        PoolOp::AdaptiveMaxPool2d {
            output_size: [2, 2],
        },
    ];
    for op in ops {
        check(Op::Pool(op), vec![x.clone()], &all(1));
    }
    let grad = randn(&[1, 2, 2, 2], 30);
    check(
        Op::Pool(PoolOp::AvgPool2dBackward {
            params,
            count_include_pad: true,
            input_size: [4, 4],
        }),
        vec![grad.clone()],
        &all(1),
    );
    check(
        Op::Pool(PoolOp::AdaptiveAvgPool2dBackward { input_size: [4, 4] }),
        vec![grad],
        &all(1),
    );
}

#[test]
fn normalisations_in_training_and_eval() {
    let (eps, weight, bias) = (1e-5, true, true);
    let x = randn(&[3, 2, 2], 31);
    let affine = || vec![randn(&[2], 32), randn(&[2], 33)];
    let train = NormOp::BatchNorm {
        training: true,
        eps,
        weight,
        bias,
    };
    check(
        Op::Norm(train),
        [vec![x.clone()], affine()].concat(),
        &all(3),
    );
    let eval = NormOp::BatchNorm {
        training: false,
        eps,
        weight,
        bias,
    };
    let running = vec![randn(&[2], 34), positive(&[2], 35)];
    check(
        Op::Norm(eval),
        [vec![x.clone()], running, affine()].concat(),
        &[true, false, false, true, true],
    );
    let layer = NormOp::LayerNorm {
        normalized_ndim: 1,
        eps,
        weight,
        bias,
    };
    let y = randn(&[2, 3, 4], 36);
    check(
        Op::Norm(layer),
        vec![y.clone(), randn(&[4], 37), randn(&[4], 38)],
        &all(3),
    );
    let group = NormOp::GroupNorm {
        num_groups: 2,
        eps,
        weight,
        bias,
    };
    let z = randn(&[2, 4, 3], 39);
    check(
        Op::Norm(group),
        vec![z.clone(), randn(&[4], 40), randn(&[4], 41)],
        &all(3),
    );
    let instance = NormOp::InstanceNorm { eps, weight, bias };
    check(
        Op::Norm(instance),
        vec![z, randn(&[4], 42), randn(&[4], 43)],
        &all(3),
    );
    let rms = NormOp::RmsNorm {
        normalized_ndim: 1,
        eps,
        weight,
    };
    check(Op::Norm(rms), vec![y, randn(&[4], 44)], &all(2));
}

#[test]
fn embedding_and_indexing() {
    let rows = indices(&[0, 3, 1, 3], &[2, 2]);
    // The padding row's gradient is zero by definition, not by derivative: the forward is
    // checked without one, the backward op (linear in the grad) with one.
    let embedding = EmbeddingOp { padding_idx: None };
    check(
        Op::Embedding(embedding),
        vec![randn(&[5, 3], 45), rows.clone()],
        &[true, false],
    );
    let backward = EmbeddingBackwardOp {
        num_weights: 5,
        padding_idx: Some(1),
    };
    check(
        Op::EmbeddingBackward(backward),
        vec![randn(&[2, 2, 3], 46), rows],
        &[true, false],
    );
    check(
        Op::Index(IndexOp::Cat { dim: 1 }),
        vec![randn(&[2, 2], 47), randn(&[2, 3], 48)],
        &all(2),
    );
    let picks = indices(&[0, 2, 2], &[3]);
    check(
        Op::Index(IndexOp::IndexSelect { dim: 0 }),
        vec![randn(&[4, 3], 49), picks.clone()],
        &[true, false],
    );
    check(
        Op::Index(IndexOp::IndexAdd { dim: 0 }),
        vec![randn(&[4, 3], 50), picks, randn(&[3, 3], 51)],
        &[true, false, true],
    );
    let index = indices(&[0, 2, 1, 1], &[2, 2]);
    check(
        Op::Index(IndexOp::Gather { dim: 1 }),
        vec![randn(&[2, 3], 52), index.clone()],
        &[true, false],
    );
    // The index covers part of `src`: the rest gets no gradient.
    check(
        Op::Index(IndexOp::ScatterAdd { dim: 1 }),
        vec![randn(&[2, 3], 53), index, randn(&[2, 3], 54)],
        &[true, false, true],
    );
}

#[test]
fn losses_and_the_nll_backward_op() {
    for reduction in [Reduction::Mean, Reduction::Sum, Reduction::None] {
        let pair = || vec![randn(&[2, 3], 55), randn(&[2, 3], 56)];
        check(Op::Loss(LossOp::Mse { reduction }), pair(), &all(2));
        check(Op::Loss(LossOp::L1 { reduction }), pair(), &all(2));
        check(
            Op::Loss(LossOp::Bce { reduction }),
            vec![probability(&[2, 3], 57), probability(&[2, 3], 58)],
            &all(2),
        );
        check(
            Op::Loss(LossOp::BceWithLogits {
                reduction,
                pos_weight: true,
            }),
            vec![
                randn(&[2, 3], 59),
                probability(&[2, 3], 60),
                positive(&[3], 61),
            ],
            &all(3),
        );
        let target = indices(&[1, -100, 3], &[3]);
        let (ignore_index, label_smoothing) = (-100, 0.1);
        check(
            Op::Loss(LossOp::Nll {
                reduction,
                ignore_index,
                label_smoothing,
            }),
            vec![randn(&[3, 4], 62), target.clone()],
            &[true, false],
        );
        let grad_shape: &[usize] = if reduction == Reduction::None {
            &[3]
        } else {
            &[]
        };
        check(
            Op::Loss(LossOp::NllBackward {
                reduction,
                ignore_index,
                label_smoothing,
            }),
            vec![randn(grad_shape, 63), randn(&[3, 4], 64), target],
            &[true, true, false],
        );
    }
}
