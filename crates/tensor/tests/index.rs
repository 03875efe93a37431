//! Indexing and joining: cat, stack, split, chunk, index_select, index_add, gather,
//! scatter_add and one_hot, checked by hand on small cases, by gradcheck, and by their errors.

use crate::common;

use common::{check, leaf};
use tessera_tensor::{DType, Result, Tensor};

fn f32s(values: &[f32], shape: &[usize]) -> Tensor {
    Tensor::from_slice(values, shape).unwrap()
}

fn i64s(values: &[i64], shape: &[usize]) -> Tensor {
    Tensor::from_slice(values, shape).unwrap()
}

fn error_of(result: Result<Tensor>) -> String {
    result.expect_err("expected an error").to_string()
}

// ----- cat and stack -----

#[test]
fn cat_dim0_appends_rows() {
    let a = f32s(&[1., 2., 3., 4.], &[2, 2]);
    let b = f32s(&[5., 6.], &[1, 2]);
    let y = Tensor::cat(&[&a, &b], 0).unwrap();
    assert_eq!(y.shape(), vec![3, 2]);
    assert_eq!(y.to_vec::<f32>().unwrap(), vec![1., 2., 3., 4., 5., 6.]);
}

#[test]
fn cat_last_dim_interleaves_rows() {
    let a = f32s(&[1., 2., 3., 4.], &[2, 2]);
    let b = f32s(&[5., 6.], &[2, 1]);
    let y = Tensor::cat(&[&a, &b], -1).unwrap();
    assert_eq!(y.shape(), vec![2, 3]);
    assert_eq!(y.to_vec::<f32>().unwrap(), vec![1., 2., 5., 3., 4., 6.]);
}

#[test]
fn cat_reads_strided_views() {
    let a = f32s(&[1., 2., 3., 4.], &[2, 2]).t().unwrap();
    let y = Tensor::cat(&[&a, &a], 1).unwrap();
    assert_eq!(
        y.to_vec::<f32>().unwrap(),
        vec![1., 3., 1., 3., 2., 4., 2., 4.]
    );
}

#[test]
fn cat_works_for_every_dtype() {
    for dtype in DType::ALL {
        let a = Tensor::ones(&[2], dtype).unwrap();
        let b = Tensor::zeros(&[1], dtype).unwrap();
        let y = Tensor::cat(&[&a, &b], 0).unwrap();
        assert_eq!(y.dtype(), dtype);
        assert_eq!(y.to_vec_f64().unwrap(), vec![1., 1., 0.], "{dtype}");
    }
}

#[test]
fn cat_promotes_dtypes() {
    let a = i64s(&[1, 2], &[2]);
    let b = f32s(&[0.5], &[1]);
    let y = Tensor::cat(&[&a, &b], 0).unwrap();
    assert_eq!(y.dtype(), DType::F32);
    assert_eq!(y.to_vec::<f32>().unwrap(), vec![1., 2., 0.5]);
}

#[test]
fn cat_skips_legacy_empty_vectors() {
    let a = f32s(&[1., 2.], &[1, 2]);
    let empty = Tensor::zeros(&[0], DType::F32).unwrap();
    let y = Tensor::cat(&[&empty, &a, &empty], 0).unwrap();
    assert_eq!(y.shape(), vec![1, 2]);
}

#[test]
fn cat_mismatched_shapes_names_op_dim_and_shapes() {
    let a = Tensor::zeros(&[2, 3], DType::F32).unwrap();
    let b = Tensor::zeros(&[2, 4], DType::F32).unwrap();
    let msg = error_of(Tensor::cat(&[&a, &b], 0));
    assert!(msg.starts_with("cat:"), "{msg}");
    assert!(msg.contains("[2, 3]") && msg.contains("[2, 4]"), "{msg}");
    assert!(msg.contains("dimension 0"), "{msg}");
}

#[test]
fn cat_rejects_empty_lists_scalars_and_bad_dims() {
    assert!(error_of(Tensor::cat(&[], 0)).contains("non-empty"));
    let s = Tensor::scalar(1.0f32);
    assert!(error_of(Tensor::cat(&[&s, &s], 0)).contains("zero-dimensional"));
    let a = Tensor::zeros(&[2, 3], DType::F32).unwrap();
    assert!(error_of(Tensor::cat(&[&a], 2)).contains("dimension out of range"));
}

#[test]
fn cat_gradient_narrows_per_input() {
    let (a, b) = (leaf(&[2, 3], 1), leaf(&[2, 2], 2));
    check(|t| Tensor::cat(&[&t[0], &t[1]], 1), &[a.clone(), b.clone()]);
    let c = leaf(&[1, 3], 3);
    check(|t| Tensor::cat(&[&t[0], &t[1], &t[0]], 0), &[a, c]);
}

#[test]
fn cat_gradient_is_cast_back_to_each_input_dtype() {
    let a = Tensor::ones(&[2], DType::F32)
        .unwrap()
        .requires_grad_(true)
        .unwrap();
    let b = Tensor::ones(&[1], DType::F64)
        .unwrap()
        .requires_grad_(true)
        .unwrap();
    let y = Tensor::cat(&[&a, &b], 0).unwrap();
    assert_eq!(y.dtype(), DType::F64);
    y.sum_all().unwrap().backward().unwrap();
    assert_eq!(a.grad().unwrap().dtype(), DType::F32);
    assert_eq!(b.grad().unwrap().to_vec::<f64>().unwrap(), vec![1.0]);
}

#[test]
fn stack_adds_a_new_dimension() {
    let a = f32s(&[1., 2.], &[2]);
    let b = f32s(&[3., 4.], &[2]);
    let rows = Tensor::stack(&[&a, &b], 0).unwrap();
    assert_eq!(rows.shape(), vec![2, 2]);
    assert_eq!(rows.to_vec::<f32>().unwrap(), vec![1., 2., 3., 4.]);
    let cols = Tensor::stack(&[&a, &b], -1).unwrap();
    assert_eq!(cols.shape(), vec![2, 2]);
    assert_eq!(cols.to_vec::<f32>().unwrap(), vec![1., 3., 2., 4.]);
}

#[test]
fn stack_of_unequal_shapes_is_an_error() {
    let a = Tensor::zeros(&[2], DType::F32).unwrap();
    let b = Tensor::zeros(&[3], DType::F32).unwrap();
    let msg = error_of(Tensor::stack(&[&a, &b], 0));
    assert!(
        msg.starts_with("stack:") && msg.contains("[2]") && msg.contains("[3]"),
        "{msg}"
    );
}

#[test]
fn stack_gradient() {
    let (a, b) = (leaf(&[2, 3], 4), leaf(&[2, 3], 5));
    check(|t| Tensor::stack(&[&t[0], &t[1]], 1), &[a, b]);
}

// ----- split and chunk -----

fn sizes_along(parts: &[Tensor], dim: usize) -> Vec<usize> {
    parts.iter().map(|p| p.shape()[dim]).collect()
}

#[test]
fn split_gives_views_with_a_smaller_last_piece() {
    let x = Tensor::arange(0.0, 10.0, 1.0, DType::F32)
        .unwrap()
        .reshape(&[5, 2])
        .unwrap();
    let parts = x.split(2, 0).unwrap();
    assert_eq!(sizes_along(&parts, 0), vec![2, 2, 1]);
    assert!(parts.iter().all(|p| p.shares_storage(&x)));
    assert_eq!(parts[2].to_vec::<f32>().unwrap(), vec![8., 9.]);
}

#[test]
fn split_sizes_follow_the_list() {
    let x = Tensor::arange(0.0, 5.0, 1.0, DType::I64).unwrap();
    let parts = x.split_sizes(&[1, 0, 4], 0).unwrap();
    assert_eq!(sizes_along(&parts, 0), vec![1, 0, 4]);
    assert_eq!(parts[2].to_vec::<i64>().unwrap(), vec![1, 2, 3, 4]);
    let msg = x.split_sizes(&[2, 2], 0).unwrap_err().to_string();
    assert!(msg.contains("[2, 2]") && msg.contains("5"), "{msg}");
}

#[test]
fn chunk_uses_ceil_sizes_and_may_give_fewer_pieces() {
    let x = Tensor::zeros(&[3, 6], DType::F32).unwrap();
    assert_eq!(sizes_along(&x.chunk(4, 1).unwrap(), 1), vec![2, 2, 2]);
    assert_eq!(sizes_along(&x.chunk(2, 0).unwrap(), 0), vec![2, 1]);
    assert_eq!(sizes_along(&x.chunk(5, 1).unwrap(), 1), vec![2, 2, 2]);
    let empty = Tensor::zeros(&[0], DType::F32).unwrap();
    assert_eq!(empty.chunk(3, 0).unwrap().len(), 3);
    assert!(x.chunk(0, 0).is_err());
    assert!(x.split(0, 0).is_err());
}

#[test]
fn split_gradient_flows_through_each_piece() {
    let x = leaf(&[5, 2], 6);
    check(
        |t| {
            let parts = t[0].split(2, 0)?;
            parts[0]
                .mul_scalar(2.0)?
                .sum_all()?
                .add(&parts[2].sum_all()?)
        },
        &[x],
    );
}

// ----- index_select and index_add -----

#[test]
fn index_select_picks_rows_and_columns() {
    let x = f32s(&[1., 2., 3., 4., 5., 6.], &[3, 2]);
    let rows = x.index_select(0, &i64s(&[2, 0, 2], &[3])).unwrap();
    assert_eq!(rows.shape(), vec![3, 2]);
    assert_eq!(rows.to_vec::<f32>().unwrap(), vec![5., 6., 1., 2., 5., 6.]);
    let cols = x
        .index_select(1, &Tensor::from_vec(vec![1i32], &[1]).unwrap())
        .unwrap();
    assert_eq!(cols.to_vec::<f32>().unwrap(), vec![2., 4., 6.]);
}

#[test]
fn index_select_keeps_half_dtypes() {
    let x = Tensor::arange(0.0, 4.0, 1.0, DType::BF16).unwrap();
    let y = x.index_select(0, &i64s(&[3, 1], &[2])).unwrap();
    assert_eq!(y.dtype(), DType::BF16);
    assert_eq!(y.to_vec_f64().unwrap(), vec![3., 1.]);
}

#[test]
fn index_select_out_of_range_names_value_dim_and_size() {
    let x = Tensor::zeros(&[3, 2], DType::F32).unwrap();
    let msg = error_of(x.index_select(0, &i64s(&[0, 3], &[2])));
    assert_eq!(
        msg,
        "index_select: index 3 is out of bounds for dimension 0 with size 3"
    );
    let msg = error_of(x.index_select(1, &i64s(&[-1], &[1])));
    assert!(
        msg.contains("index -1") && msg.contains("dimension 1"),
        "{msg}"
    );
}

#[test]
fn index_select_rejects_float_and_2d_indices() {
    let x = Tensor::zeros(&[3], DType::F32).unwrap();
    assert!(error_of(x.index_select(0, &f32s(&[0.], &[1]))).contains("int64"));
    assert!(error_of(x.index_select(0, &i64s(&[0, 1], &[1, 2]))).contains("1-D"));
}

#[test]
fn index_add_accumulates_repeated_indices() {
    let x = Tensor::zeros(&[3, 2], DType::F32).unwrap();
    let src = f32s(&[1., 2., 3., 4., 5., 6.], &[3, 2]);
    let y = x.index_add(0, &i64s(&[2, 0, 2], &[3]), &src).unwrap();
    assert_eq!(y.to_vec::<f32>().unwrap(), vec![3., 4., 0., 0., 6., 8.]);
    let ints = Tensor::ones(&[3], DType::I32).unwrap();
    let y = ints
        .index_add(
            0,
            &i64s(&[1, 1], &[2]),
            &Tensor::ones(&[2], DType::I32).unwrap(),
        )
        .unwrap();
    assert_eq!(y.to_vec::<i32>().unwrap(), vec![1, 3, 1]);
}

#[test]
fn index_select_gradient_adds_repeated_rows() {
    let x = leaf(&[4, 3], 7);
    let index = i64s(&[3, 0, 3, 1], &[4]);
    check(|t| t[0].index_select(0, &index), std::slice::from_ref(&x));
    check(
        |t| t[0].index_select(1, &i64s(&[2, 2], &[2])),
        std::slice::from_ref(&x),
    );
    x.set_grad(None);
    let y = x.index_select(0, &index).unwrap();
    y.sum_all().unwrap().backward().unwrap();
    let g = x.grad().unwrap().sum(&[1], false).unwrap();
    assert_eq!(g.to_vec::<f64>().unwrap(), vec![3., 3., 0., 6.]);
}

#[test]
fn index_add_gradient_for_self_and_src() {
    let (x, src) = (leaf(&[3, 2], 8), leaf(&[4, 2], 9));
    let index = i64s(&[0, 2, 2, 1], &[4]);
    check(|t| t[0].index_add(0, &index, &t[1]), &[x, src]);
}

// ----- gather and scatter_add -----

#[test]
fn gather_follows_pytorch_semantics() {
    let x = f32s(&[1., 2., 3., 4.], &[2, 2]);
    // dim 1: out[i][j] = x[i][index[i][j]].
    let y = x.gather(1, &i64s(&[0, 0, 1, 0], &[2, 2])).unwrap();
    assert_eq!(y.to_vec::<f32>().unwrap(), vec![1., 1., 4., 3.]);
    // dim 0: out[i][j] = x[index[i][j]][j].
    let y = x.gather(0, &i64s(&[1, 0, 1, 1, 0, 0], &[3, 2])).unwrap();
    assert_eq!(y.shape(), vec![3, 2]);
    assert_eq!(y.to_vec::<f32>().unwrap(), vec![3., 2., 3., 4., 1., 2.]);
}

#[test]
fn gather_index_may_be_smaller_than_the_input() {
    let x = f32s(&[1., 2., 3., 4., 5., 6.], &[2, 3]);
    let y = x.gather(1, &i64s(&[2, 1], &[2, 1])).unwrap();
    assert_eq!(y.to_vec::<f32>().unwrap(), vec![3., 5.]);
}

#[test]
fn gather_errors_name_value_dim_and_size() {
    let x = Tensor::zeros(&[2, 2], DType::F32).unwrap();
    let msg = error_of(x.gather(1, &i64s(&[0, 2, 1, 0], &[2, 2])));
    assert_eq!(
        msg,
        "gather: index 2 is out of bounds for dimension 1 with size 2"
    );
    let msg = error_of(x.gather(0, &i64s(&[0, 0, 0], &[1, 3])));
    assert!(
        msg.starts_with("gather:") && msg.contains("[1, 3]"),
        "{msg}"
    );
    assert!(error_of(x.gather(0, &i64s(&[0], &[1]))).contains("dimensions"));
}

#[test]
fn scatter_add_is_the_transpose_of_gather() {
    let x = Tensor::zeros(&[2, 3], DType::F32).unwrap();
    let src = f32s(&[1., 2., 3., 4.], &[2, 2]);
    // dim 1: out[i][index[i][j]] += src[i][j].
    let y = x
        .scatter_add(1, &i64s(&[2, 2, 0, 1], &[2, 2]), &src)
        .unwrap();
    assert_eq!(y.to_vec::<f32>().unwrap(), vec![0., 0., 3., 3., 4., 0.]);
}

#[test]
fn scatter_add_uses_only_the_part_of_src_that_index_covers() {
    let x = Tensor::ones(&[3], DType::I64).unwrap();
    let src = i64s(&[10, 20, 30], &[3]);
    let y = x.scatter_add(0, &i64s(&[2, 2], &[2]), &src).unwrap();
    assert_eq!(y.to_vec::<i64>().unwrap(), vec![1, 1, 31]);
}

#[test]
fn scatter_add_rejects_mixed_dtypes_and_bad_indices() {
    let x = Tensor::zeros(&[3], DType::F32).unwrap();
    let src = Tensor::zeros(&[2], DType::F64).unwrap();
    assert!(error_of(x.scatter_add(0, &i64s(&[0, 1], &[2]), &src)).contains("dtype mismatch"));
    let src = Tensor::zeros(&[2], DType::F32).unwrap();
    assert_eq!(
        error_of(x.scatter_add(0, &i64s(&[0, 5], &[2]), &src)),
        "scatter_add: index 5 is out of bounds for dimension 0 with size 3"
    );
}

#[test]
fn gather_gradient_scatters_back() {
    let x = leaf(&[3, 4], 10);
    let index = i64s(&[0, 3, 3, 1, 2, 2, 0, 0], &[2, 4]);
    check(|t| t[0].gather(1, &index), std::slice::from_ref(&x));
    check(|t| t[0].gather(0, &i64s(&[2, 0, 1, 2], &[1, 4])), &[x]);
}

#[test]
fn scatter_add_gradient_for_self_and_src() {
    let (x, src) = (leaf(&[3, 4], 11), leaf(&[2, 4], 12));
    let index = i64s(&[0, 1, 2, 0, 2, 2, 1, 0], &[2, 4]);
    check(|t| t[0].scatter_add(0, &index, &t[1]), &[x.clone(), src]);
    let wider = leaf(&[3, 5], 13);
    check(
        |t| t[0].scatter_add(0, &i64s(&[1, 0, 2, 2], &[1, 4]), &t[1]),
        &[x, wider],
    );
}

// ----- one_hot -----

#[test]
fn one_hot_infers_the_class_count() {
    let y = i64s(&[0, 2, 1], &[3]).one_hot(None).unwrap();
    assert_eq!(y.dtype(), DType::I64);
    assert_eq!(y.shape(), vec![3, 3]);
    assert_eq!(y.to_vec::<i64>().unwrap(), vec![1, 0, 0, 0, 0, 1, 0, 1, 0]);
}

#[test]
fn one_hot_with_explicit_classes_keeps_the_input_shape() {
    let y = Tensor::one_hot(&i64s(&[1, 0], &[2, 1]), Some(4)).unwrap();
    assert_eq!(y.shape(), vec![2, 1, 4]);
    assert_eq!(y.to_vec::<i64>().unwrap(), vec![0, 1, 0, 0, 1, 0, 0, 0]);
}

#[test]
fn one_hot_rejects_negative_and_out_of_range_classes() {
    let msg = error_of(i64s(&[0, 3], &[2]).one_hot(Some(3)));
    assert!(msg.starts_with("one_hot:") && msg.contains("3"), "{msg}");
    assert!(error_of(i64s(&[-1, 0], &[2]).one_hot(Some(3))).contains("-1"));
    assert!(error_of(i64s(&[-2, -1], &[2]).one_hot(None)).contains("negative"));
    assert!(error_of(i64s(&[], &[0]).one_hot(None)).contains("empty"));
    assert!(error_of(f32s(&[1.], &[1]).one_hot(None)).contains("integer"));
}

#[test]
fn zero_dim_inputs_index_as_one_element() {
    let x = Tensor::scalar(5.0f32);
    let y = x.index_select(0, &i64s(&[0], &[1])).unwrap();
    assert_eq!(y.shape(), Vec::<usize>::new());
    assert_eq!(y.item::<f32>().unwrap(), 5.0);
    let g = x.gather(0, &Tensor::scalar(0i64)).unwrap();
    assert_eq!(g.item::<f32>().unwrap(), 5.0);
    assert!(x.index_select(0, &i64s(&[1], &[1])).is_err());
    let s = leaf(&[], 14);
    check(
        |t| t[0].index_select(0, &i64s(&[0], &[1])),
        std::slice::from_ref(&s),
    );
    check(|t| t[0].gather(0, &Tensor::scalar(0i64)), &[s]);
}
