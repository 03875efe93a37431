//! Every elementwise op of the lowering table and the reductions (sum, mean, amax, amin, var,
//! std, logsumexp, softmax, log-softmax, layer and RMS norm), in f32, f64, f16 and bf16, and
//! the elementwise losses and `cat` (of every dtype), rendered to PTX and assembled by `ptxas` for sm_80 and sm_90: a kernel ptxas rejects fails
//! with its message. Skipped (with a printed line) when `TESSERA_PTXAS` is unset, unless
//! `TESSERA_REQUIRE_PTXAS=1`.

use crate::common;

use common::{
    assemble, elementwise_graphs, kernels, layout_graphs, op_graph, ptxas, reduction_graphs,
};
use tessera_cuda::{PtxTarget, render};
use tessera_fx::Graph;
use tessera_tensor::op::{IndexOp, LossOp, NormOp, PoolOp, Reduction};
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

#[test]
fn every_elementwise_op_assembles_for_sm80_and_sm90() {
    let Some(ptxas) = ptxas() else { return };
    for dtype in [DType::F32, DType::F64] {
        for (what, g) in elementwise_graphs(dtype) {
            check(&ptxas, &format!("{what} {dtype:?}"), &g);
        }
    }
}

/// f16 and bf16 kernels: `.b16` loads and stores (vectorised where contiguous), the
/// conversions to and from f32, and the reductions accumulating in f32.
#[test]
fn half_kernels_assemble_for_sm80_and_sm90() {
    let Some(ptxas) = ptxas() else { return };
    for dtype in [DType::F16, DType::BF16] {
        for (what, g) in elementwise_graphs(dtype)
            .into_iter()
            .chain(reduction_graphs(dtype))
        {
            check(&ptxas, &format!("{what} {dtype:?}"), &g);
        }
        let vector = op_graph(Op::Unary(tessera_tensor::op::UnaryOp::Exp), dtype, &[&[64]]);
        check(&ptxas, &format!("vectorised exp {dtype:?}"), &vector);
    }
}

#[test]
fn reductions_assemble_for_sm80_and_sm90() {
    let Some(ptxas) = ptxas() else { return };
    for dtype in [DType::F32, DType::F64] {
        for (what, g) in reduction_graphs(dtype) {
            check(&ptxas, &format!("{what} {dtype:?}"), &g);
        }
    }
}

#[test]
fn views_broadcasts_and_degenerate_domains_assemble() {
    let Some(ptxas) = ptxas() else { return };
    for (what, g) in layout_graphs() {
        check(&ptxas, &what, &g);
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

/// Every elementwise loss, each reduction: the per-element kernel and the f64-accumulating
/// reduction into a 0-dim result, with a broadcast `pos_weight` for the logits loss.
#[test]
fn loss_kernels_assemble_for_sm80_and_sm90() {
    let Some(ptxas) = ptxas() else { return };
    for dtype in [DType::F32, DType::F64] {
        for reduction in [Reduction::None, Reduction::Mean, Reduction::Sum] {
            let losses = [
                LossOp::Mse { reduction },
                LossOp::L1 { reduction },
                LossOp::Bce { reduction },
                LossOp::BceWithLogits {
                    reduction,
                    pos_weight: false,
                },
            ];
            for loss in losses {
                let g = op_graph(Op::Loss(loss.clone()), dtype, &[&[7, 33], &[7, 33]]);
                check(&ptxas, &format!("{loss:?} {dtype:?}"), &g);
            }
            let weighted = LossOp::BceWithLogits {
                reduction,
                pos_weight: true,
            };
            let g = op_graph(Op::Loss(weighted), dtype, &[&[7, 33], &[7, 33], &[33]]);
            check(&ptxas, &format!("weighted bce_with_logits {dtype:?}"), &g);
        }
    }
}

/// `cat` as one kernel of guarded loads, three inputs (one of them empty) along a middle dim.
#[test]
fn cat_kernels_assemble_for_sm80_and_sm90() {
    let Some(ptxas) = ptxas() else { return };
    let every = [
        DType::F32,
        DType::F64,
        DType::F16,
        DType::BF16,
        DType::U8,
        DType::I8,
        DType::I32,
        DType::I64,
        DType::Bool,
    ];
    for dtype in every {
        let cat = Op::Index(IndexOp::Cat { dim: 1 });
        let g = op_graph(cat, dtype, &[&[2, 3, 5], &[2, 0, 5], &[2, 7, 5]]);
        check(&ptxas, &format!("cat {dtype:?}"), &g);
    }
}

/// `y = exp(x)` over `n` f32 points, or the sum of each of `rows` rows of `n` when `rows` is
/// set: kernel IR only, so sizes past 2^31 (64-bit index arithmetic) need no memory.
fn big_kernel(n: usize, rows: Option<usize>) -> tessera_kernel::Kernel {
    use tessera_kernel::{
        BufferRole, Expr, IndexExpr, KernelBuilder, ReduceFn, ScalarType, UnaryFn,
    };
    let f32 = ScalarType::F32;
    match rows {
        None => {
            let mut b = KernelBuilder::new("big_exp", vec![n]);
            let x = b.buffer(BufferRole::Input, f32, n);
            let y = b.buffer(BufferRole::Output, f32, n);
            let at = IndexExpr {
                offset: 0,
                strides: vec![1],
            };
            let v = b.push(
                f32,
                Expr::Load {
                    buffer: x,
                    index: at.clone(),
                },
            );
            let e = b.push(f32, Expr::Unary(UnaryFn::Exp, v));
            b.store(y, at, e);
            b.finish()
        }
        Some(rows) => {
            let mut b = KernelBuilder::reduction("big_sum", vec![rows], vec![n]);
            let x = b.buffer(BufferRole::Input, f32, rows * n);
            let y = b.buffer(BufferRole::Output, f32, rows);
            let v = b.push(
                f32,
                Expr::Load {
                    buffer: x,
                    index: IndexExpr {
                        offset: 0,
                        strides: vec![n, 1],
                    },
                },
            );
            let s = b.push(f32, Expr::Reduce(ReduceFn::Sum, v));
            b.store(
                y,
                IndexExpr {
                    offset: 0,
                    strides: vec![1, 0],
                },
                s,
            );
            b.finish()
        }
    }
}

#[test]
fn kernels_past_2_pow_31_points_use_64_bit_indices_and_assemble() {
    let Some(ptxas) = ptxas() else { return };
    let n = (1usize << 31) + 7;
    for kernel in [big_kernel(n, None), big_kernel(n, Some(3))] {
        kernel.verify().unwrap();
        let r = render(&kernel, &PtxTarget::SM80).unwrap();
        assert!(r.ptx.contains("setp.ge.u64"), "{}", r.ptx);
        assemble(&ptxas, &r.name, &r.ptx, &ARCHS);
    }
}
