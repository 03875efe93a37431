//! Printing: each expected string is what PyTorch's `repr` prints for the same tensor with the
//! default print options.

use tessera_tensor::{DType, Tensor};

fn f32s(values: &[f32], shape: &[usize]) -> Tensor {
    Tensor::from_slice(values, shape).unwrap()
}

fn arange(n: usize, dtype: DType) -> Tensor {
    Tensor::arange(0.0, n as f64, 1.0, dtype).unwrap()
}

#[track_caller]
fn prints(t: &Tensor, expected: &str) {
    assert_eq!(t.to_string(), expected);
}

#[test]
fn float_matrix_uses_four_decimals() {
    prints(
        &f32s(&[1.5, 2.25, 3.0, 4.125], &[2, 2]),
        "tensor([[1.5000, 2.2500],\n        [3.0000, 4.1250]])",
    );
}

#[test]
fn integer_valued_floats_end_in_a_dot() {
    prints(&f32s(&[1., 2., 3.], &[3]), "tensor([1., 2., 3.])");
    prints(&f32s(&[0., 0.], &[2]), "tensor([0., 0.])");
    prints(
        &f32s(&[1., 2., 3., 4.], &[2, 2]),
        "tensor([[1., 2.],\n        [3., 4.]])",
    );
}

#[test]
fn small_or_wide_ranges_switch_to_scientific() {
    prints(
        &f32s(&[1e-5, 1.0], &[2]),
        "tensor([1.0000e-05, 1.0000e+00])",
    );
    prints(
        &Tensor::from_slice(&[0.5f64, 2000.0], &[2]).unwrap(),
        "tensor([5.0000e-01, 2.0000e+03], dtype=torch.float64)",
    );
    prints(&f32s(&[1., 1e9], &[2]), "tensor([1.0000e+00, 1.0000e+09])");
}

#[test]
fn negative_numbers_align_to_one_width() {
    prints(&f32s(&[-1.5, 2.0], &[2]), "tensor([-1.5000,  2.0000])");
    prints(&f32s(&[-1., 10.], &[2]), "tensor([-1., 10.])");
    prints(
        &Tensor::from_slice(&[-10i64, 5, 300], &[3]).unwrap(),
        "tensor([-10,   5, 300])",
    );
}

#[test]
fn infinities_and_nans_print_as_python_does() {
    prints(
        &f32s(&[1., f32::INFINITY, f32::NAN], &[3]),
        "tensor([1., inf, nan])",
    );
    prints(
        &f32s(&[1.5, f32::NEG_INFINITY], &[2]),
        "tensor([1.5000,   -inf])",
    );
}

#[test]
fn integers_and_bools_print_plainly() {
    prints(
        &Tensor::from_slice(&[1i64, 2, 3], &[3]).unwrap(),
        "tensor([1, 2, 3])",
    );
    prints(
        &Tensor::from_slice(&[true, false], &[2]).unwrap(),
        "tensor([ True, False])",
    );
    prints(
        &Tensor::from_slice(&[1i32, 2], &[2]).unwrap(),
        "tensor([1, 2], dtype=torch.int32)",
    );
    prints(
        &Tensor::from_slice(&[7u8], &[1]).unwrap(),
        "tensor([7], dtype=torch.uint8)",
    );
}

#[test]
fn zero_dim_tensors_print_the_bare_value() {
    prints(&Tensor::scalar(3.5f32), "tensor(3.5000)");
    prints(&Tensor::scalar(2.0f32), "tensor(2.)");
    prints(&Tensor::scalar(7i64), "tensor(7)");
    prints(&Tensor::scalar(true), "tensor(True)");
}

#[test]
fn empty_tensors_show_size_and_non_float32_dtypes() {
    prints(&Tensor::zeros(&[0], DType::F32).unwrap(), "tensor([])");
    prints(
        &Tensor::zeros(&[0, 3], DType::F32).unwrap(),
        "tensor([], size=(0, 3))",
    );
    prints(
        &Tensor::zeros(&[0], DType::I64).unwrap(),
        "tensor([], dtype=torch.int64)",
    );
    prints(
        &Tensor::zeros(&[2, 0], DType::Bool).unwrap(),
        "tensor([], size=(2, 0), dtype=torch.bool)",
    );
}

#[test]
fn non_default_float_dtypes_are_named() {
    prints(
        &Tensor::from_slice(&[1.5f64, 2.0], &[2]).unwrap(),
        "tensor([1.5000, 2.0000], dtype=torch.float64)",
    );
    prints(
        &f32s(&[1.5, 2.0], &[2]).to_dtype(DType::F16).unwrap(),
        "tensor([1.5000, 2.0000], dtype=torch.float16)",
    );
    prints(
        &f32s(&[1., 2.], &[2]).to_dtype(DType::BF16).unwrap(),
        "tensor([1., 2.], dtype=torch.bfloat16)",
    );
}

#[test]
fn leaves_that_require_grad_say_so() {
    let x = f32s(&[1.5, 2.25, 3.0, 4.125], &[2, 2])
        .requires_grad_(true)
        .unwrap();
    prints(
        &x,
        "tensor([[1.5000, 2.2500],\n        [3.0000, 4.1250]], requires_grad=True)",
    );
    let y = Tensor::from_slice(&[1.0f64], &[1])
        .unwrap()
        .requires_grad_(true)
        .unwrap();
    prints(&y, "tensor([1.], dtype=torch.float64, requires_grad=True)");
}

#[test]
fn results_of_recorded_ops_name_their_grad_fn() {
    let x = f32s(&[1., 2.], &[2]).requires_grad_(true).unwrap();
    let text = x.mul_scalar(2.0).unwrap().to_string();
    assert!(text.starts_with("tensor([2., 4.], grad_fn=<"), "{text}");
    assert!(!text.contains("requires_grad"), "{text}");
}

#[test]
fn suffixes_wrap_past_the_line_width() {
    let x = arange(14, DType::F32).requires_grad_(true).unwrap();
    prints(
        &x,
        "tensor([ 0.,  1.,  2.,  3.,  4.,  5.,  6.,  7.,  8.,  9., 10., 11., 12., 13.],\n       requires_grad=True)",
    );
}

#[test]
fn three_dim_tensors_separate_blocks_with_a_blank_line() {
    prints(
        &arange(8, DType::F32).reshape(&[2, 2, 2]).unwrap(),
        "tensor([[[0., 1.],\n         [2., 3.]],\n\n        [[4., 5.],\n         [6., 7.]]])",
    );
}

#[test]
fn long_rows_wrap_at_eighty_columns() {
    prints(
        &arange(30, DType::F32),
        "tensor([ 0.,  1.,  2.,  3.,  4.,  5.,  6.,  7.,  8.,  9., 10., 11., 12., 13.,\n        14., 15., 16., 17., 18., 19., 20., 21., 22., 23., 24., 25., 26., 27.,\n        28., 29.])",
    );
}

#[test]
fn views_print_their_own_elements() {
    let t = arange(6, DType::I64).reshape(&[2, 3]).unwrap().t().unwrap();
    prints(&t, "tensor([[0, 3],\n        [1, 4],\n        [2, 5]])");
}

#[test]
fn more_than_a_thousand_elements_are_summarised() {
    prints(
        &arange(2000, DType::I64),
        "tensor([   0,    1,    2,  ..., 1997, 1998, 1999])",
    );
    prints(
        &Tensor::arange(1000.0, 3000.0, 1.0, DType::F32).unwrap(),
        "tensor([1000., 1001., 1002.,  ..., 2997., 2998., 2999.])",
    );
    // 1999 / 1 > 1000 among the printed values, so PyTorch switches to scientific here.
    prints(
        &arange(2000, DType::F32),
        "tensor([0.0000e+00, 1.0000e+00, 2.0000e+00,  ..., 1.9970e+03, 1.9980e+03,\n        1.9990e+03])",
    );
}

#[test]
fn summarised_matrices_elide_rows_and_columns() {
    prints(
        &arange(2000, DType::I64).reshape(&[40, 50]).unwrap(),
        "tensor([[   0,    1,    2,  ...,   47,   48,   49],\n        [  50,   51,   52,  ...,   97,   98,   99],\n        [ 100,  101,  102,  ...,  147,  148,  149],\n        ...,\n        [1850, 1851, 1852,  ..., 1897, 1898, 1899],\n        [1900, 1901, 1902,  ..., 1947, 1948, 1949],\n        [1950, 1951, 1952,  ..., 1997, 1998, 1999]])",
    );
}

#[test]
fn summarising_considers_only_the_printed_values() {
    // The middle element would force scientific notation were it printed.
    let mut values = vec![1.0f32; 1001];
    values[500] = 1e9;
    prints(
        &Tensor::from_vec(values, &[1001]).unwrap(),
        "tensor([1., 1., 1.,  ..., 1., 1., 1.])",
    );
}
