//! Hostile and careless shapes: element counts and byte sizes that overflow, or that no
//! allocator can provide, are errors naming the op and the shape, never a wrapped count, a
//! crash or an abort.

use tessera_tensor::op::{Op, ViewOp};
use tessera_tensor::{DType, Tensor, TensorError, TensorMeta};

fn is_overflow(e: &TensorError) -> bool {
    matches!(e, TensorError::ShapeOverflow { .. })
}

#[test]
fn an_overflowing_element_count_is_an_error() {
    // 2^62 * 4 wraps to 0 in usize: it used to be Ok with numel 0.
    let e = Tensor::zeros(&[1 << 62, 4], DType::F32).unwrap_err();
    assert!(is_overflow(&e), "{e}");
    assert!(e.to_string().contains("zeros"), "{e}");
    assert!(e.to_string().contains("4611686018427387904"), "{e}");
    for result in [
        Tensor::ones(&[1 << 62, 4], DType::F32),
        Tensor::full(&[4, 1 << 62], 1.0, DType::I64),
        Tensor::randn(&[1 << 32, 1 << 32], DType::F32),
        Tensor::randint(0, 3, &[1 << 33, 1 << 31], DType::I64),
        Tensor::from_vec(Vec::<f32>::new(), &[1 << 62, 4]),
    ] {
        assert!(is_overflow(&result.unwrap_err()));
    }
}

#[test]
fn a_byte_size_past_the_address_range_is_an_error() {
    // 2^61 f32 elements count fine but need 2^63 bytes.
    let e = Tensor::zeros(&[1 << 61], DType::F32).unwrap_err();
    assert!(is_overflow(&e), "{e}");
}

#[test]
fn an_allocation_the_machine_cannot_provide_is_an_error() {
    // 2^52 bytes (4 PiB) fits the address range but no allocator provides it.
    let e = Tensor::zeros(&[1 << 50], DType::F32).unwrap_err();
    assert!(matches!(e, TensorError::OutOfMemory { .. }), "{e}");
    let e = Tensor::full(&[1 << 50], 2.0, DType::F32).unwrap_err();
    assert!(matches!(e, TensorError::OutOfMemory { .. }), "{e}");
}

#[test]
fn meta_functions_refuse_outputs_that_overflow() {
    // The crafted graph of the report: expand to [2^62, 3, 16, 16].
    let x = TensorMeta::new([1, 3, 16, 16], DType::F32);
    let expand = Op::View(ViewOp::Expand(vec![1 << 62, 3, 16, 16]));
    let e = expand.meta(&[x]).unwrap_err();
    assert!(is_overflow(&e), "{e}");
    assert!(e.to_string().starts_with("expand"), "{e}");
    // Tracing on a meta input that is too large errors at the first op, not in a kernel.
    let huge = Tensor::new_meta(&[1, 3, 1 << 32, 1 << 32], DType::F32);
    let e = huge.relu().unwrap_err();
    assert!(is_overflow(&e), "{e}");
    assert_eq!(
        TensorMeta::new([1 << 62, 4], DType::F32).numel(),
        usize::MAX
    );
}

#[test]
fn ordinary_shapes_still_work() {
    let t = Tensor::zeros(&[2, 0, 3], DType::F32).unwrap();
    assert_eq!(t.numel(), 0);
    let t = Tensor::full(&[2, 3], 1.5, DType::F64).unwrap();
    assert_eq!(t.to_vec_f64().unwrap(), vec![1.5; 6]);
    let t = Tensor::zeros(&[], DType::I32).unwrap();
    assert_eq!(t.numel(), 1);
}

#[test]
fn pooling_meta_costs_nothing_per_element() {
    use tessera_tensor::op::{Pool2dParams, PoolOp};
    // Tracing SmallCnn on [1, 3, 2^32, 2^32] used to allocate 2^32 windows (or panic with
    // "capacity overflow") before any shape was checked.
    let params = Pool2dParams {
        kernel: [2, 2],
        stride: [2, 2],
        padding: [0, 0],
        dilation: [1, 1],
        ceil_mode: false,
    };
    let x = TensorMeta::new([1, 1, 1 << 32, 1 << 32], DType::F32);
    let out = Op::Pool(PoolOp::MaxPool2d(params)).meta(std::slice::from_ref(&x));
    assert!(is_overflow(&out.unwrap_err()));
    let adaptive = Op::Pool(PoolOp::AdaptiveAvgPool2d {
        output_size: [1, 1],
    });
    let out = adaptive.meta(&[x]).unwrap();
    assert_eq!(out[0].shape, vec![1, 1, 1, 1]);
    // Sizes past any real plane are refused before arithmetic can overflow.
    let big = TensorMeta::new([1, 1, usize::MAX, 4], DType::F32);
    let e = Op::Pool(PoolOp::MaxPool2d(params))
        .meta(&[big])
        .unwrap_err();
    assert!(e.to_string().contains("larger than 2^40"), "{e}");
}

#[test]
fn int8_gemm_sizes_whose_products_overflow_are_an_error() {
    use tessera_tensor::op::quant::{Int8Kernel, gemm_u8i8_with};
    let (a, b, mut c) = ([1u8; 16], [1i8; 16], [0i32; 16]);
    // m * k = 2^62 * 4 wraps to 0: the length check passed and the strip loop sliced past `a`.
    for kernel in Int8Kernel::available() {
        let e = gemm_u8i8_with(kernel, &a, &b, &mut c, (1 << 62, 4, 4), false).unwrap_err();
        assert!(e.to_string().contains("gemm_u8i8"), "{e}");
        assert!(gemm_u8i8_with(kernel, &a, &b, &mut c, (4, 4, 1 << 62), false).is_err());
    }
    gemm_u8i8_with(Int8Kernel::Scalar, &a, &b, &mut c, (4, 4, 4), false).unwrap();
    assert_eq!(c, [4; 16]);
}

#[test]
fn a_kernel_output_the_machine_cannot_provide_is_an_error() {
    // A one-element tensor expanded to 2^50 elements is a view (no memory); relu, matmul
    // and max pooling of it must allocate 4 PiB, which used to abort the process.
    let x = Tensor::ones(&[1], DType::F32).unwrap();
    let big = x.expand(&[1 << 50]).unwrap();
    let e = big.relu().unwrap_err();
    assert!(matches!(e, TensorError::OutOfMemory { .. }), "{e}");
    let e = big.add(&big).unwrap_err();
    assert!(matches!(e, TensorError::OutOfMemory { .. }), "{e}");
    let m = Tensor::ones(&[1, 1], DType::F32).unwrap();
    let e = m
        .expand(&[1 << 25, 1])
        .unwrap()
        .matmul(&m.expand(&[1, 1 << 25]).unwrap())
        .unwrap_err();
    assert!(matches!(e, TensorError::OutOfMemory { .. }), "{e}");
}

#[test]
fn an_empty_tensor_whose_other_dimensions_overflow_runs_elementwise_ops() {
    // Found by the op_shapes_property test: the contiguity check multiplied 2^40 * 2^40 and
    // panicked ("attempt to multiply with overflow") on a tensor of no elements.
    let x = Tensor::zeros(&[0, 1 << 40, 1 << 40], DType::F32).unwrap();
    let y = x.log().unwrap();
    assert_eq!(y.shape(), vec![0, 1 << 40, 1 << 40]);
    assert_eq!(y.numel(), 0);
}

#[test]
fn reducing_a_zero_dimensional_tensor_over_dim_0_works() {
    // Found by the op_shapes_property test: the leading-dimension sum sliced the shape [] at 1.
    let x = Tensor::from_vec(vec![2.5f32], &[]).unwrap();
    assert_eq!(
        x.sum_dims(&[0], false).unwrap().to_vec::<f32>().unwrap(),
        [2.5]
    );
}

#[test]
fn matmul_with_an_empty_output_whose_other_dimensions_overflow_is_empty() {
    // Found by the op_shapes_property test: `[2, 0] @ [0, 0, 2^64 - 1]` has no elements, but
    // the kernel multiplied 2 * (2^64 - 1) to size its chunks and panicked.
    let a = Tensor::zeros(&[2, 0], DType::F32).unwrap();
    let b = Tensor::zeros(&[0, 0, usize::MAX], DType::F32).unwrap();
    let y = a.matmul(&b).unwrap();
    assert_eq!(y.shape(), vec![0, 2, usize::MAX]);
    assert_eq!(y.numel(), 0);
}

#[test]
fn reshape_to_a_shape_whose_product_overflows_is_an_error() {
    // Found by the op_shapes_property test: reshape's meta multiplied the target shape
    // unchecked and panicked ("attempt to multiply with overflow").
    let x = TensorMeta::new(&[] as &[usize], DType::F32);
    let reshape = Op::View(ViewOp::Reshape(vec![usize::MAX, 3]));
    let e = reshape.meta(&[x]).unwrap_err();
    assert!(e.to_string().contains("reshape"), "{e}");
}

#[test]
fn narrow_whose_end_overflows_is_an_error() {
    // Found by the op_shapes_property test: `start + len` overflowed and panicked.
    let x = TensorMeta::new([1], DType::F32);
    let narrow = Op::View(ViewOp::Narrow {
        dim: 0,
        start: usize::MAX,
        len: 1,
    });
    let e = narrow.meta(&[x]).unwrap_err();
    assert!(e.to_string().contains("narrow"), "{e}");
}

#[test]
fn linear_over_zero_input_features_gives_the_bias() {
    // Found by the op_shapes_property test: rows were counted as numel / k, 0 when k is 0,
    // so the output held no elements for a [3, 2, 3, 3] shape.
    let x = Tensor::zeros(&[3, 2, 0], DType::F32).unwrap();
    let w = Tensor::zeros(&[4, 0], DType::F32).unwrap();
    let b = Tensor::ones(&[4], DType::F32).unwrap();
    let y = Op::Linear { bias: true }.apply1(&[&x, &w, &b]).unwrap();
    assert_eq!(y.shape(), vec![3, 2, 4]);
    assert_eq!(y.to_vec::<f32>().unwrap(), vec![1.0; 24]);
}
