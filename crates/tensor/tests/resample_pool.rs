//! Issue 14's pooling and resampling functions (max_pool1d, avg_pool1d, adaptive_max_pool2d,
//! interpolate, pixel_shuffle): gradients against finite differences in f64, and errors for
//! shapes they cannot take.

use crate::common;

use common::{check, leaf, tensor};
use tessera_tensor::functional::{
    InterpolateMode, InterpolateSize, adaptive_max_pool2d, avg_pool1d, interpolate, max_pool1d,
    pixel_shuffle,
};
use tessera_tensor::{DType, Tensor};

#[test]
fn pooling_1d_and_adaptive_max_match_finite_differences() {
    let x = leaf(&[2, 3, 9], 1);
    check(
        |i| max_pool1d(&i[0], 3, 2, 1, 1, false),
        std::slice::from_ref(&x),
    );
    check(
        |i| max_pool1d(&i[0], 2, 2, 0, 1, true),
        std::slice::from_ref(&x),
    );
    check(
        |i| avg_pool1d(&i[0], 3, 2, 1, false, true),
        std::slice::from_ref(&x),
    );
    check(
        |i| avg_pool1d(&i[0], 3, 2, 1, false, false),
        std::slice::from_ref(&x),
    );
    let img = leaf(&[2, 7, 9], 2);
    check(|i| adaptive_max_pool2d(&i[0], [3, 4]), &[img]);
}

#[test]
fn interpolate_and_pixel_shuffle_match_finite_differences() {
    let x = leaf(&[1, 2, 3, 4], 3);
    for mode in [InterpolateMode::Nearest, InterpolateMode::Bilinear] {
        for size in [
            InterpolateSize::ScaleFactor([1.7, 1.7]),
            InterpolateSize::Size([5, 7]),
        ] {
            check(
                |i| interpolate(&i[0], size, mode, false),
                std::slice::from_ref(&x),
            );
        }
    }
    let corners = InterpolateSize::ScaleFactor([2.0, 2.0]);
    check(
        |i| interpolate(&i[0], corners, InterpolateMode::Bilinear, true),
        std::slice::from_ref(&x),
    );
    check(|i| pixel_shuffle(&i[0], 2), &[leaf(&[2, 8, 2, 3], 4)]);
}

#[test]
fn pixel_shuffle_places_channel_blocks_as_defined() {
    // out[0, h * 2 + i, w * 2 + j] = in[i * 2 + j, h, w] for one 1x1 plane of 4 channels.
    let x = tensor(&[1.0, 2.0, 3.0, 4.0], &[4, 1, 1], DType::F32).unwrap();
    let y = pixel_shuffle(&x, 2).unwrap();
    assert_eq!(y.shape(), [1, 2, 2]);
    assert_eq!(y.to_vec_f64().unwrap(), [1.0, 2.0, 3.0, 4.0]);
}

#[test]
fn resampling_refuses_shapes_it_cannot_take() {
    let x = Tensor::zeros(&[1, 3, 2, 2], DType::F32).unwrap();
    assert!(
        pixel_shuffle(&x, 2).is_err(),
        "3 channels are not a multiple of 4"
    );
    assert!(pixel_shuffle(&x, usize::MAX).is_err(), "r * r overflows");
    assert!(pixel_shuffle(&x, 0).is_err());
    let nearest = InterpolateMode::Nearest;
    assert!(interpolate(&x, InterpolateSize::Size([0, 3]), nearest, false).is_err());
    assert!(
        interpolate(
            &x,
            InterpolateSize::ScaleFactor([f64::NAN, 1.0]),
            nearest,
            false
        )
        .is_err()
    );
    assert!(
        interpolate(
            &x,
            InterpolateSize::ScaleFactor([1e300, 1.0]),
            nearest,
            false
        )
        .is_err()
    );
    assert!(interpolate(&x, InterpolateSize::Size([2, 2]), nearest, true).is_err());
    for mode in [nearest, InterpolateMode::Bilinear] {
        let huge = InterpolateSize::Size([1 << 60, 1]);
        assert!(
            interpolate(&x, huge, mode, false).is_err(),
            "a 2^60-row output"
        );
    }
    let flat = Tensor::zeros(&[3, 2], DType::F32).unwrap();
    assert!(interpolate(&flat, InterpolateSize::Size([2, 2]), nearest, false).is_err());
    assert!(max_pool1d(&Tensor::zeros(&[4], DType::F32).unwrap(), 2, 2, 0, 1, false).is_err());
    // An empty output plane is an empty result, as for adaptive_avg_pool2d.
    assert_eq!(
        adaptive_max_pool2d(&x, [0, 1]).unwrap().shape(),
        [1, 3, 0, 1]
    );
}
