//! The elementwise losses (`mse_loss`, `l1_loss`, `binary_cross_entropy`,
//! `binary_cross_entropy_with_logits` with and without a broadcast `pos_weight`), each
//! reduction, f32 and f64, lowered to one kernel that the kernel-IR interpreter and the JIT run
//! with the eager kernels' results (within 2e-6 relative in f32: logarithms and sums round
//! differently), on values with infinities and NaN, 0-dim and empty inputs; and a loss reading
//! the output of the kernel before it and a transposed target in place.

use crate::common;

use common::{check_backends, eager, lowered, one_kernel_agreeing};
use tessera_fx::Graph;
use tessera_tensor::op::{LossOp, Reduction, UnaryOp};
use tessera_tensor::{DType, Op, Tensor, TensorMeta};

const REDUCTIONS: [Reduction; 3] = [Reduction::None, Reduction::Mean, Reduction::Sum];

/// `shape` of `dtype` with values in `[lo, hi]`, every 13th infinite or NaN when `special`.
fn t(shape: &[usize], dtype: DType, seed: usize, (lo, hi): (f64, f64), special: bool) -> Tensor {
    let n: usize = shape.iter().product();
    let v: Vec<f64> = (0..n)
        .map(|i| {
            let k = i * 7919 + seed * 104_729;
            match k % 13 {
                4 if special => f64::NAN,
                8 if special => f64::INFINITY,
                _ => lo + (k % 101) as f64 / 100.0 * (hi - lo),
            }
        })
        .collect();
    Tensor::from_vec(v, shape).unwrap().to_dtype(dtype).unwrap()
}

fn tolerance(dtype: DType) -> f64 {
    if dtype == DType::F64 { 1e-13 } else { 2e-6 }
}

#[test]
fn every_elementwise_loss_is_one_kernel_agreeing_with_eager() {
    for dtype in [DType::F32, DType::F64] {
        for reduction in REDUCTIONS {
            let any = (-4.0, 4.0);
            let probability = (0.0, 1.0);
            let losses = [
                (LossOp::Mse { reduction }, any),
                (LossOp::L1 { reduction }, any),
                (LossOp::Bce { reduction }, probability),
                (
                    LossOp::BceWithLogits {
                        reduction,
                        pos_weight: false,
                    },
                    (-40.0, 40.0),
                ),
            ];
            for (loss, range) in losses {
                for shape in [vec![3, 17], vec![], vec![2, 0], vec![129]] {
                    for special in [false, true] {
                        let inputs = [
                            t(&shape, dtype, 1, range, special),
                            t(&shape, dtype, 2, probability, false),
                        ];
                        let g = common::op_graph(Op::Loss(loss.clone()), &inputs);
                        one_kernel_agreeing(&g, &inputs, tolerance(dtype));
                    }
                }
            }
            let weighted = Op::Loss(LossOp::BceWithLogits {
                reduction,
                pos_weight: true,
            });
            let inputs = [
                t(&[4, 6], dtype, 3, (-9.0, 9.0), true),
                t(&[4, 6], dtype, 4, (0.0, 1.0), false),
                t(&[6], dtype, 5, (0.5, 3.0), false),
            ];
            one_kernel_agreeing(
                &common::op_graph(weighted, &inputs),
                &inputs,
                tolerance(dtype),
            );
        }
    }
}

#[test]
fn a_loss_reads_its_input_from_the_kernel_before_it_and_transposed_targets_in_place() {
    let mut g = Graph::new();
    let x = g.placeholder("x", TensorMeta::new(vec![5, 8], DType::F32));
    let y = g.placeholder("y", TensorMeta::new(vec![5, 8], DType::F32));
    let p = g.call_function(Op::Unary(UnaryOp::Sigmoid), &[&x]).unwrap();
    let loss = Op::Loss(LossOp::Bce {
        reduction: Reduction::Mean,
    });
    let l = g.call_function(loss, &[&p, &y]).unwrap();
    g.output(&[&l]).unwrap();
    let inputs = [
        t(&[5, 8], DType::F32, 6, (-6.0, 6.0), false),
        t(&[8, 5], DType::F32, 7, (0.0, 1.0), false).t().unwrap(),
    ];
    let program = lowered(&g, &inputs);
    assert!(program.fallbacks.is_empty(), "{program}");
    check_backends(&program, &inputs, &eager(&g, &inputs), 2e-6);
}
