//! Every elementwise op of the lowering table and the reductions (sum, mean, amax, amin, var,
//! std, logsumexp, softmax, log-softmax, layer and RMS norm), in f32 and f64, rendered to PTX
//! and assembled by `ptxas` for sm_80 and sm_90: a kernel ptxas rejects fails with its
//! message. Skipped (with a printed line) when `TESSERA_PTXAS` is unset, unless
//! `TESSERA_REQUIRE_PTXAS=1`.

mod common;

use common::{assemble, kernels, layer_norm_graph, op_graph, ptxas, reduce_graph};
use tessera_cuda::{PtxTarget, render};
use tessera_fx::Graph;
use tessera_tensor::op::{BinaryOp, CompareOp, NormOp, PoolOp, ReduceKind, ScalarOp, UnaryOp};
use tessera_tensor::{DType, Op};

const ARCHS: [u32; 2] = [80, 90];

fn check(ptxas: &str, what: &str, graph: &Graph) {
    let kernels = kernels(graph);
    assert!(!kernels.is_empty(), "{what}: no kernel");
    for k in kernels {
        let r = render(&k, &PtxTarget::SM80).unwrap_or_else(|e| panic!("{what}: {e}"));
        assemble(ptxas, &r.name, &r.ptx, &ARCHS);
    }
}

fn elementwise_graphs(dtype: DType) -> Vec<(String, Graph)> {
    let shape: &[usize] = &[3, 37];
    let mut out = Vec::new();
    for u in UnaryOp::EVERY {
        out.push((format!("{u:?}"), op_graph(Op::Unary(u), dtype, &[shape])));
    }
    for b in BinaryOp::EVERY {
        // The second operand broadcast along the rows.
        out.push((
            format!("{b:?}"),
            op_graph(Op::Binary(b), dtype, &[shape, &[37]]),
        ));
        out.push((
            format!("{b:?} scalar"),
            op_graph(
                Op::Scalar(ScalarOp {
                    op: b,
                    value: 1.5,
                    reversed: true,
                }),
                dtype,
                &[shape],
            ),
        ));
    }
    for c in CompareOp::EVERY {
        let mut g = Graph::new();
        let x = g.placeholder("x", tessera_tensor::TensorMeta::new(shape.to_vec(), dtype));
        let y = g.placeholder("y", tessera_tensor::TensorMeta::new(shape.to_vec(), dtype));
        let cond = g.call_function(Op::Compare(c), &[&x, &y]).unwrap();
        let w = g.call_function(Op::Where, &[&cond, &x, &y]).unwrap();
        g.output(&[&w]).unwrap();
        out.push((format!("{c:?} where"), g));
    }
    out.push((
        "clamp".into(),
        op_graph(
            Op::Clamp {
                min: Some(-0.5),
                max: Some(0.5),
            },
            dtype,
            &[shape],
        ),
    ));
    let other = if dtype == DType::F32 {
        DType::F64
    } else {
        DType::F32
    };
    out.push((
        "to_dtype".into(),
        op_graph(Op::ToDType(other), dtype, &[shape]),
    ));
    out
}

#[test]
fn every_elementwise_op_assembles_for_sm80_and_sm90() {
    let Some(ptxas) = ptxas() else { return };
    for dtype in [DType::F32, DType::F64] {
        for (what, g) in elementwise_graphs(dtype) {
            check(&ptxas, &format!("{what} {dtype:?}"), &g);
        }
    }
}

#[test]
fn reductions_assemble_for_sm80_and_sm90() {
    let Some(ptxas) = ptxas() else { return };
    let kinds = [
        ReduceKind::Sum,
        ReduceKind::Mean,
        ReduceKind::Amax,
        ReduceKind::Amin,
        ReduceKind::Var { correction: 1 },
        ReduceKind::Std { correction: 0 },
        ReduceKind::LogSumExp,
    ];
    for dtype in [DType::F32, DType::F64] {
        for kind in kinds {
            check(
                &ptxas,
                &format!("{kind:?}"),
                &reduce_graph(kind, dtype, 4, 300),
            );
        }
        for log in [false, true] {
            let g = op_graph(Op::Softmax { dim: 1, log }, dtype, &[&[4, 300]]);
            check(&ptxas, "softmax", &g);
        }
        check(&ptxas, "layer norm", &layer_norm_graph(dtype, 4, 300));
        let mut g = Graph::new();
        let x = g.placeholder("x", tessera_tensor::TensorMeta::new([4, 300], dtype));
        let rms = Op::Norm(NormOp::RmsNorm {
            normalized_ndim: 1,
            eps: 1e-5,
            weight: false,
        });
        let norm = g.call_function(rms, &[&x]).unwrap();
        let y = g.getitem(&norm, 0).unwrap();
        g.output(&[&y]).unwrap();
        check(&ptxas, "rms norm", &g);
    }
}

#[test]
fn padded_pooling_and_channel_norms_assemble_for_sm80_and_sm90() {
    let Some(ptxas) = ptxas() else { return };
    let pools = [
        PoolOp::max_pool2d_values([3, 3], [2, 2], [1, 1], [1, 1], false),
        PoolOp::max_pool2d_values([9, 9], [2, 2], [4, 4], [1, 1], true),
        PoolOp::avg_pool2d([3, 3], [2, 2], [1, 1], true, false),
    ];
    let norms = [
        NormOp::GroupNorm {
            num_groups: 2,
            eps: 1e-5,
            weight: false,
            bias: false,
        },
        NormOp::InstanceNorm {
            eps: 1e-5,
            weight: false,
            bias: false,
        },
    ];
    for dtype in [DType::F32, DType::F64] {
        for pool in &pools {
            let g = op_graph(Op::Pool(pool.clone()), dtype, &[&[2, 4, 19, 17]]);
            check(&ptxas, &format!("{pool:?}"), &g);
        }
        for norm in &norms {
            let mut g = Graph::new();
            let x = g.placeholder("x", tessera_tensor::TensorMeta::new([2, 4, 5, 7], dtype));
            let n = g.call_function(Op::Norm(norm.clone()), &[&x]).unwrap();
            let y = g.getitem(&n, 0).unwrap();
            g.output(&[&y]).unwrap();
            check(&ptxas, &format!("{norm:?}"), &g);
        }
        let mut g = Graph::new();
        let meta = |s: &[usize]| tessera_tensor::TensorMeta::new(s.to_vec(), dtype);
        let x = g.placeholder("x", meta(&[2, 4, 5, 7]));
        let mean = g.placeholder("mean", meta(&[4]));
        let var = g.placeholder("var", meta(&[4]));
        let bn = Op::Norm(NormOp::BatchNorm {
            training: false,
            eps: 1e-5,
            weight: false,
            bias: false,
        });
        let n = g.call_function(bn, &[&x, &mean, &var]).unwrap();
        let y = g.getitem(&n, 0).unwrap();
        g.output(&[&y]).unwrap();
        check(&ptxas, "eval batch norm", &g);
    }
}
