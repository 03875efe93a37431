//! What the renderer refuses and what it returns besides the text: a GEMM kernel's launch (one
//! 64 x 64 tile per block, FMA unless tf32 is allowed), a GEMM result read at another point
//! than the output's is a typed `Unsupported` error naming the kernel (never a panic), the launch
//! configuration covers the work with a grid capped per multiprocessor, and contiguous f32
//! kernels use vector loads with a scalar tail.

use crate::common;

use common::{kernels, op_graph, reduce_graph};
use tessera_cuda::{
    BLOCKS_PER_MULTIPROCESSOR, CudaError, GemmOptions, PtxTarget, render, render_with,
};
use tessera_fx::Graph;
use tessera_tensor::op::{ReduceKind, UnaryOp};
use tessera_tensor::{DType, Op, TensorMeta};

/// `relu(x @ w^T)` for `x: [rows, k]`, `w: [n, k]`: its kernel calling the GEMM.
fn linear_relu_kernel(rows: usize, k: usize, n: usize) -> tessera_kernel::Kernel {
    let mut g = Graph::new();
    let x = g.placeholder("x", TensorMeta::new([rows, k], DType::F32));
    let w = g.placeholder("w", TensorMeta::new([n, k], DType::F32));
    let y = g
        .call_function(Op::Linear { bias: false }, &[&x, &w])
        .unwrap();
    let r = g.call_function(Op::Unary(UnaryOp::Relu), &[&y]).unwrap();
    g.output(&[&r]).unwrap();
    kernels(&g)
        .into_iter()
        .find(|k| k.gemm.is_some())
        .expect("a linear layer lowers to a kernel calling the GEMM")
}

#[test]
fn a_gemm_kernel_renders_one_tile_per_block_and_fma_unless_tf32_is_allowed() {
    let kernel = linear_relu_kernel(100, 8, 130);
    let r = render(&kernel, &PtxTarget::SM80).unwrap();
    // 64 x 64 output tiles: 2 x 3 of them, 256 threads each.
    assert_eq!((r.block, r.blocks_needed), (256, 6));
    assert_eq!(r.buffers, kernel.buffers);
    assert!(r.ptx.contains("fma.rn.f32"), "{}", r.ptx);
    assert!(!r.ptx.contains("mma.sync"), "{}", r.ptx);
    let tf32 = render_with(&kernel, &PtxTarget::SM80, GemmOptions { allow_tf32: true }).unwrap();
    assert_eq!((tf32.block, tf32.blocks_needed), (128, 6));
    assert!(tf32.ptx.contains("cvt.rna.tf32.f32"), "{}", tf32.ptx);
    assert!(
        tf32.ptx
            .contains("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32"),
        "{}",
        tf32.ptx
    );
}

#[test]
fn a_gemm_result_read_at_another_point_is_unsupported_with_the_kernel_named() {
    use tessera_kernel::{
        BufferRole, Expr, GemmCall, IndexExpr, KernelBuilder, MatrixIndex, ScalarType,
    };
    let f32 = ScalarType::F32;
    let mut b = KernelBuilder::new("transposed_read", vec![4, 4]);
    let x = b.buffer(BufferRole::Input, f32, 16);
    let w = b.buffer(BufferRole::Input, f32, 16);
    let scratch = b.buffer(BufferRole::Scratch, f32, 16);
    let out = b.buffer(BufferRole::Output, f32, 16);
    let packed = MatrixIndex {
        offset: 0,
        row_stride: 4,
        col_stride: 1,
    };
    b.gemm(GemmCall {
        a: x,
        a_index: packed,
        b: w,
        b_index: packed,
        out: scratch,
        k: 4,
    });
    let v = b.push(
        f32,
        Expr::Load {
            buffer: scratch,
            index: IndexExpr {
                offset: 0,
                strides: vec![1, 4],
            },
        },
    );
    b.store(
        out,
        IndexExpr {
            offset: 0,
            strides: vec![4, 1],
        },
        v,
    );
    match render(&b.finish(), &PtxTarget::SM80) {
        Err(CudaError::Unsupported { kernel, what }) => {
            assert_eq!(kernel, "transposed_read");
            assert!(what.contains("another point"), "{what}");
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

#[test]
fn standalone_products_of_integers_or_misfit_shapes_are_typed_errors() {
    use tessera_cuda::{ConvSpec, GemmSpec, StridedOperand, render_conv, render_gemm};
    use tessera_tensor::op::ConvParams;
    let spec = GemmSpec {
        name: "int_gemm".into(),
        dtype: DType::I32,
        batch: 1,
        m: 3,
        n: 4,
        k: 5,
        a: StridedOperand::row_major(3, 5),
        b: StridedOperand::row_major(5, 4),
        c: StridedOperand::row_major(3, 4),
        bias: None,
        options: GemmOptions::default(),
    };
    match render_gemm(&spec, &PtxTarget::SM80) {
        Err(CudaError::Unsupported { kernel, what }) => {
            assert_eq!(kernel, "int_gemm");
            assert!(what.contains("3x5 @ 5x4") && what.contains("I32"), "{what}");
        }
        other => panic!("expected Unsupported, got {other:?}"),
    }
    // 3 input channels do not split into 2 groups.
    let conv = ConvSpec {
        name: "bad_conv".into(),
        dtype: DType::F32,
        input_shape: [1, 3, 8, 8],
        weight_shape: [4, 1, 3, 3],
        params: ConvParams::conv2d([1, 1], [0, 0], [1, 1], 2),
        bias: false,
        options: GemmOptions::default(),
    };
    match render_conv(&conv, &PtxTarget::SM80) {
        Err(CudaError::Unsupported { kernel, what }) => {
            assert_eq!(kernel, "bad_conv");
            assert!(what.contains("[1, 3, 8, 8]"), "{what}");
        }
        other => panic!("expected Unsupported, got {other:?}"),
    }
}
