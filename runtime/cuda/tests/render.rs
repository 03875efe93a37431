//! What the renderer refuses and what it returns besides the text: a kernel with an external
//! GEMM call is a typed `Unsupported` error naming the kernel (never a panic), the launch
//! configuration covers the work with a grid capped per multiprocessor, and contiguous f32
//! kernels use vector loads with a scalar tail.

mod common;

use common::{kernels, op_graph, reduce_graph};
use tessera_cuda::{BLOCKS_PER_MULTIPROCESSOR, CudaError, PtxTarget, render};
use tessera_fx::Graph;
use tessera_tensor::op::{ReduceKind, UnaryOp};
use tessera_tensor::{DType, Op, TensorMeta};

#[test]
fn a_gemm_kernel_is_unsupported_with_the_kernel_named() {
    let mut g = Graph::new();
    let x = g.placeholder("x", TensorMeta::new([4, 8], DType::F32));
    let w = g.placeholder("w", TensorMeta::new([6, 8], DType::F32));
    let y = g
        .call_function(Op::Linear { bias: false }, &[&x, &w])
        .unwrap();
    let r = g.call_function(Op::Unary(UnaryOp::Relu), &[&y]).unwrap();
    g.output(&[&r]).unwrap();
    let kernel = kernels(&g)
        .into_iter()
        .find(|k| k.gemm.is_some())
        .expect("a linear layer lowers to a kernel calling the GEMM");
    match render(&kernel, &PtxTarget::SM80) {
        Err(CudaError::Unsupported { kernel: name, what }) => {
            assert_eq!(name, kernel.name);
            assert!(what.contains("GEMM"), "{what}");
        }
        other => panic!("expected Unsupported, got {other:?}"),
    }
}

#[test]
fn elementwise_launch_gives_every_point_a_thread_within_the_grid_cap() {
    let g = op_graph(Op::Unary(UnaryOp::Relu), DType::F32, &[&[1000, 1000]]);
    let r = render(&kernels(&g)[0], &PtxTarget::SM80).unwrap();
    assert_eq!(r.block % 32, 0);
    // Contiguous f32: four points per thread.
    assert!(r.ptx.contains("ld.global.v4.f32"), "{}", r.ptx);
    assert_eq!(
        r.blocks_needed as usize,
        250_000usize.div_ceil(r.block as usize)
    );
    assert_eq!(r.grid_for(100), 100 * BLOCKS_PER_MULTIPROCESSOR);
    assert_eq!(r.grid_for(100_000), r.blocks_needed);
    // f64: one point per thread.
    let g = op_graph(Op::Unary(UnaryOp::Relu), DType::F64, &[&[1000, 1000]]);
    let r = render(&kernels(&g)[0], &PtxTarget::SM80).unwrap();
    assert!(!r.ptx.contains(".v4"), "{}", r.ptx);
    assert_eq!(
        r.blocks_needed as usize,
        1_000_000usize.div_ceil(r.block as usize)
    );
}

#[test]
fn reduction_launch_is_a_block_per_row_sized_to_the_row() {
    let r = render(
        &kernels(&reduce_graph(ReduceKind::Sum, DType::F64, 7, 40))[0],
        &PtxTarget::SM80,
    )
    .unwrap();
    assert_eq!((r.block, r.blocks_needed), (64, 7));
    let wide = render(
        &kernels(&reduce_graph(ReduceKind::Sum, DType::F32, 3, 100_000))[0],
        &PtxTarget::SM80,
    )
    .unwrap();
    assert_eq!((wide.block, wide.blocks_needed), (256, 3));
}

#[test]
fn the_target_sets_the_version_and_architecture_lines() {
    let g = op_graph(Op::Unary(UnaryOp::Exp), DType::F32, &[&[5]]);
    let target = PtxTarget::SM80
        .for_driver(12040)
        .with_compute_capability(9, 0);
    let ptx = render(&kernels(&g)[0], &target).unwrap().ptx;
    assert!(ptx.contains(".version 8.4\n.target sm_90\n"), "{ptx}");
}

#[test]
fn contiguous_f32_kernels_use_vector_accesses_and_a_scalar_tail() {
    // 3 x 7 = 21 points: five groups of four, one point in the tail; the row is broadcast.
    let g = op_graph(
        Op::Binary(tessera_tensor::op::BinaryOp::Add),
        DType::F32,
        &[&[21], &[1]],
    );
    let ptx = render(&kernels(&g)[0], &PtxTarget::SM80).unwrap().ptx;
    assert!(
        ptx.contains("ld.global.v4.f32") && ptx.contains("st.global.v4.f32"),
        "{ptx}"
    );
    assert!(ptx.contains("the scalar tail"), "{ptx}");
    // A transposed read is not contiguous: scalar code.
    let g = op_graph(
        Op::Binary(tessera_tensor::op::BinaryOp::Add),
        DType::F32,
        &[&[3, 5], &[5]],
    );
    let ptx = render(&kernels(&g)[0], &PtxTarget::SM80).unwrap().ptx;
    assert!(!ptx.contains(".v4"), "{ptx}");
}
