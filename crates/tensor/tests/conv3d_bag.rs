//! Issue 14's conv3d, conv_transpose1d and embedding_bag: gradients against finite
//! differences in f64, values from the definitions, and errors for hostile shapes.

use crate::common;

use common::{check, leaf, tensor};
use tessera_tensor::functional::{EmbeddingBagMode, conv_transpose1d, conv3d, embedding_bag};
use tessera_tensor::{DType, Tensor};

#[test]
fn conv3d_matches_finite_differences_with_depth_padding_stride_and_groups() {
    let x = leaf(&[1, 2, 4, 4, 3], 1);
    let w = leaf(&[4, 1, 2, 2, 2], 2);
    let b = leaf(&[4], 3);
    check(
        |i| {
            conv3d(
                &i[0],
                &i[1],
                Some(&i[2]),
                [2, 1, 1],
                [1, 0, 1],
                [1, 1, 2],
                2,
            )
        },
        &[x, w, b],
    );
}

#[test]
fn conv_transpose1d_matches_finite_differences() {
    let x = leaf(&[2, 4, 5], 4);
    let w = leaf(&[4, 3, 3], 5);
    let b = leaf(&[6], 6);
    check(
        |i| conv_transpose1d(&i[0], &i[1], Some(&i[2]), 2, 1, 1, 2, 1),
        &[x, w, b],
    );
}

#[test]
fn conv_transpose1d_scatters_each_input_through_the_kernel() {
    // y[i * stride + j] += x[i] * w[j] with stride 2: [1, 2] and kernel [1, 10] give
    // [1, 10, 2, 20].
    let x = tensor(&[1.0, 2.0], &[1, 1, 2], DType::F64).unwrap();
    let w = tensor(&[1.0, 10.0], &[1, 1, 2], DType::F64).unwrap();
    let y = conv_transpose1d(&x, &w, None, 2, 0, 0, 1, 1).unwrap();
    assert_eq!(y.to_vec_f64().unwrap(), [1.0, 10.0, 2.0, 20.0]);
}

#[test]
fn embedding_bag_matches_finite_differences_and_its_definition() {
    let weight = leaf(&[5, 3], 7);
    let input = Tensor::from_vec(vec![1i64, 1, 4, 0, 2], &[5]).unwrap();
    let offsets = Tensor::from_vec(vec![0i64, 2, 2], &[3]).unwrap();
    for mode in [EmbeddingBagMode::Sum, EmbeddingBagMode::Mean] {
        check(
            |i| embedding_bag(&input, &i[0], Some(&offsets), mode),
            std::slice::from_ref(&weight),
        );
    }
    // Bag 0 sums row 1 twice, bag 1 is empty, bag 2 averages rows 4, 0 and 2.
    let w = tensor(&[0.0, 1.0, 2.0, 3.0, 4.0], &[5, 1], DType::F64).unwrap();
    let sum = embedding_bag(&input, &w, Some(&offsets), EmbeddingBagMode::Sum).unwrap();
    assert_eq!(sum.to_vec_f64().unwrap(), [2.0, 0.0, 6.0]);
    let mean = embedding_bag(&input, &w, Some(&offsets), EmbeddingBagMode::Mean).unwrap();
    assert_eq!(mean.to_vec_f64().unwrap(), [1.0, 0.0, 2.0]);
    let rows = Tensor::from_vec(vec![1i64, 2, 3, 4], &[2, 2]).unwrap();
    let by_rows = embedding_bag(&rows, &w, None, EmbeddingBagMode::Sum).unwrap();
    assert_eq!(by_rows.to_vec_f64().unwrap(), [3.0, 7.0]);
}

/// A leaf call while tracing sees meta offsets: the bags are unknown, the shape is not.
#[test]
fn embedding_bag_with_meta_offsets_gives_a_meta_result_of_the_output_shape() {
    let ids = Tensor::new_meta(&[5], DType::I64);
    let offsets = Tensor::new_meta(&[3], DType::I64);
    let weight = Tensor::zeros(&[10, 4], DType::F32).unwrap();
    let bags = embedding_bag(&ids, &weight, Some(&offsets), EmbeddingBagMode::Sum).unwrap();
    assert!(bags.is_meta());
    assert_eq!((bags.shape(), bags.dtype()), (vec![3, 4], DType::F32));
}

#[test]
fn hostile_shapes_are_errors_not_panics() {
    let w = Tensor::zeros(&[5, 3], DType::F32).unwrap();
    let input = Tensor::from_vec(vec![1i64, 2], &[2]).unwrap();
    let bad_offsets = [vec![1i64], vec![0, 3], vec![0, 2, 1]];
    for offsets in bad_offsets {
        let n = offsets.len();
        let offsets = Tensor::from_vec(offsets, &[n]).unwrap();
        assert!(embedding_bag(&input, &w, Some(&offsets), EmbeddingBagMode::Sum).is_err());
    }
    let out_of_range = Tensor::from_vec(vec![9i64], &[1]).unwrap();
    let zero = Tensor::from_vec(vec![0i64], &[1]).unwrap();
    assert!(embedding_bag(&out_of_range, &w, Some(&zero), EmbeddingBagMode::Sum).is_err());

    let x = Tensor::zeros(&[1, 1, 2, 3, 3], DType::F32).unwrap();
    let k = Tensor::zeros(&[1, 1, 3, 1, 1], DType::F32).unwrap();
    assert!(
        conv3d(&x, &k, None, [1, 1, 1], [0; 3], [1; 3], 1).is_err(),
        "kernel deeper than input"
    );
    assert!(
        conv3d(&x, &k, None, [0, 1, 1], [1, 0, 0], [1; 3], 1).is_err(),
        "zero stride"
    );
    let huge = [usize::MAX / 2, 1, 1];
    assert!(
        conv3d(&x, &k, None, [1; 3], [1, 0, 0], huge, 1).is_err(),
        "dilation overflows"
    );
    let x1 = Tensor::zeros(&[1, 2, 3], DType::F32).unwrap();
    let k1 = Tensor::zeros(&[2, 1, 3], DType::F32).unwrap();
    assert!(
        conv_transpose1d(&x1, &k1, None, 1, 5, 0, 1, 1).is_err(),
        "negative length"
    );
    assert!(
        conv_transpose1d(&x1, &k1, None, 2, 0, 2, 1, 1).is_err(),
        "output_padding too big"
    );
    assert!(
        conv_transpose1d(&x1, &k1, None, usize::MAX, 0, 0, 1, 1).is_err(),
        "length overflows"
    );
}
