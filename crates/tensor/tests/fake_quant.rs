//! Fake quantization against PyTorch's definitions, computed here element by element: the
//! forward `(clamp(nearbyint(x * (1/scale)) + zp, qmin, qmax) - zp) * scale` in f32 (ties
//! to even), the straight-through gradient of `x`, and the learnable ops' gradients of scale
//! and zero point (`_fake_quantize_learnable_per_tensor_affine_backward` and its per-channel
//! twin), with finite differences where the function is differentiable.

use tessera_tensor::op::{
    fake_quantize_learnable_per_channel_affine, fake_quantize_learnable_per_tensor_affine,
    fake_quantize_per_channel_affine, fake_quantize_per_tensor_affine,
};
use tessera_tensor::{DType, Generator, Tensor};

fn f32s(values: &[f32], shape: &[usize]) -> Tensor {
    Tensor::from_vec(values.to_vec(), shape).unwrap()
}

fn leaf(values: &[f32], shape: &[usize]) -> Tensor {
    f32s(values, shape).requires_grad_(true).unwrap()
}

fn read(t: &Tensor) -> Vec<f32> {
    t.detach().to_vec::<f32>().unwrap()
}

/// PyTorch's fake-quantized value of one element.
fn expected(x: f32, scale: f32, zp: i64, (qmin, qmax): (i64, i64)) -> f32 {
    let q = ((x * (1.0 / scale)).round_ties_even() as i64 + zp).clamp(qmin, qmax);
    (q - zp) as f32 * scale
}

/// Whether the straight-through estimator passes the gradient of `x`.
fn passes(x: f32, scale: f32, zp: i64, (qmin, qmax): (i64, i64)) -> bool {
    let q = (x * (1.0 / scale)).round_ties_even() as i64 + zp;
    qmin <= q && q <= qmax
}

/// `sum(out * dy)`, whose gradient with respect to `out` is `dy`.
fn weighted_sum(out: &Tensor, dy: &[f32]) -> Tensor {
    out.mul(&f32s(dy, &out.shape())).unwrap().sum_all().unwrap()
}

/// Ties at .5 steps (scale 0.5: x * 2 = k + 0.5), values beyond both ends, the ends exactly.
const XS: [f32; 12] = [
    0.25, 0.75, -0.25, -0.75, 1.25, 0.0, 3.0, -3.0, 100.0, -100.0, 0.6, 2.2,
];

#[test]
fn per_tensor_forward_rounds_ties_to_even_and_clamps_to_the_range() {
    let (scale, zp, range) = (0.5f32, 3i64, (0i64, 9i64));
    let x = f32s(&XS, &[3, 4]);
    let out = fake_quantize_per_tensor_affine(
        &x,
        &f32s(&[scale], &[1]),
        &Tensor::from_vec(vec![zp], &[1]).unwrap(),
        range.0,
        range.1,
    )
    .unwrap();
    let want: Vec<f32> = XS.iter().map(|&x| expected(x, scale, zp, range)).collect();
    assert_eq!(read(&out), want);
    // Ties: 0.5 -> 0, 1.5 -> 2, -0.5 -> -0, -1.5 -> -2, 2.5 -> 2; the range ends clamp.
    assert_eq!(&read(&out)[..5], &[0.0, 1.0, 0.0, -1.0, 1.0]);
    assert_eq!(read(&out)[8], 3.0);
    assert_eq!(read(&out)[9], -1.5);
}

#[test]
fn per_tensor_backward_passes_the_gradient_only_inside_the_range() {
    let (scale, zp, range) = (0.5f32, 3i64, (0i64, 9i64));
    let x = leaf(&XS, &[12]);
    let out = fake_quantize_per_tensor_affine(
        &x,
        &f32s(&[scale], &[1]),
        &Tensor::from_vec(vec![zp], &[1]).unwrap(),
        range.0,
        range.1,
    )
    .unwrap();
    let dy: Vec<f32> = (0..12).map(|i| 0.5 + i as f32).collect();
    weighted_sum(&out, &dy).backward().unwrap();
    let want: Vec<f32> = XS
        .iter()
        .zip(&dy)
        .map(|(&x, &g)| if passes(x, scale, zp, range) { g } else { 0.0 })
        .collect();
    assert_eq!(read(&x.grad().unwrap()), want);
    // x = 3.0 rounds to q = 9 = quant_max: still inside; x = -3.0 gives q = -3: outside.
    assert_eq!(want[6], dy[6]);
    assert_eq!(want[7], 0.0);
}

#[test]
fn per_channel_forward_and_backward_use_each_channels_scale_and_zero_point() {
    let (scales, zps, range) = ([0.5f32, 0.1, 0.3], [0i64, -2, 5], (-128i64, 127i64));
    let values: Vec<f32> = (0..24).map(|i| (i as f32 - 11.0) * 3.1).collect();
    // Channels along axis 1 of [2, 3, 4].
    let x = leaf(&values, &[2, 3, 4]);
    let out = fake_quantize_per_channel_affine(
        &x,
        &f32s(&scales, &[3]),
        &Tensor::from_vec(zps.to_vec(), &[3]).unwrap(),
        1,
        range.0,
        range.1,
    )
    .unwrap();
    let channel = |i: usize| (i / 4) % 3;
    let want: Vec<f32> = values
        .iter()
        .enumerate()
        .map(|(i, &v)| expected(v, scales[channel(i)], zps[channel(i)], range))
        .collect();
    assert_eq!(read(&out), want);
    out.sum_all().unwrap().backward().unwrap();
    let mask: Vec<f32> = values
        .iter()
        .enumerate()
        .map(|(i, &v)| {
            f32::from(u8::from(passes(
                v,
                scales[channel(i)],
                zps[channel(i)],
                range,
            )))
        })
        .collect();
    assert_eq!(read(&x.grad().unwrap()), mask);
    assert!(mask.contains(&0.0) && mask.contains(&1.0), "{mask:?}");
}

#[test]
fn fake_quantize_errors_name_the_op_and_shapes() {
    let x = f32s(&[1.0, 2.0], &[2]);
    let zp = Tensor::from_vec(vec![0i64, 0], &[2]).unwrap();
    let err = fake_quantize_per_tensor_affine(&x, &f32s(&[1.0, 1.0], &[2]), &zp, 0, 255)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("fake_quantize_per_tensor_affine") && err.contains("[2]"),
        "{err}"
    );
    let out_of_range = Tensor::from_vec(vec![300i64], &[1]).unwrap();
    let err = fake_quantize_per_tensor_affine(&x, &f32s(&[1.0], &[1]), &out_of_range, 0, 255)
        .unwrap_err()
        .to_string();
    assert!(err.contains("zero point 300"), "{err}");
    let err = fake_quantize_per_channel_affine(&x, &f32s(&[1.0], &[1]), &zp, 3, 0, 255)
        .unwrap_err()
        .to_string();
    assert!(err.contains("axis 3"), "{err}");
}

/// The learnable gradients of one element as PyTorch's CPU kernel writes them:
/// `(dx, dscale, dzero_point)` for integer zero point `zp`.
fn learnable_grads(
    x: f32,
    dy: f32,
    scale: f32,
    zp: i64,
    (qmin, qmax): (i64, i64),
    grad_factor: f32,
) -> (f32, f32, f32) {
    let inv = 1.0 / scale;
    let q = (zp as f32 + x * inv).round_ties_even() as i64;
    if q < qmin || q > qmax {
        let end = if q < qmin { qmin } else { qmax };
        (
            0.0,
            dy * (end - zp) as f32 * grad_factor,
            -dy * scale * grad_factor,
        )
    } else {
        let fq = (q - zp) as f32 * scale;
        (dy, dy * (fq - x) * inv * grad_factor, 0.0)
    }
}

fn close(a: f32, b: f32, tol: f32) -> bool {
    (a - b).abs() <= tol * (1.0 + b.abs())
}

#[test]
fn learnable_per_tensor_gradients_follow_pytorchs_lsq_formulas() {
    let (range, grad_factor) = ((0i64, 12i64), 0.25f32);
    let (scale_v, zp_v) = (0.4f32, 2.3f32);
    let values: Vec<f32> = (0..20).map(|i| (i as f32 - 6.0) * 0.37).collect();
    let dy: Vec<f32> = (0..20).map(|i| 1.0 + 0.1 * i as f32).collect();
    let (x, scale, zp) = (
        leaf(&values, &[4, 5]),
        leaf(&[scale_v], &[1]),
        leaf(&[zp_v], &[1]),
    );
    let out = fake_quantize_learnable_per_tensor_affine(
        &x,
        &scale,
        &zp,
        range.0,
        range.1,
        f64::from(grad_factor),
    )
    .unwrap();
    // The forward rounds the zero point to nearest (2.3 -> 2).
    let want: Vec<f32> = values
        .iter()
        .map(|&v| expected(v, scale_v, 2, range))
        .collect();
    assert_eq!(read(&out), want);
    weighted_sum(&out, &dy).backward().unwrap();
    // The backward's zero point is `zp + 0.5` truncated: 2.8 -> 2.
    let grads: Vec<(f32, f32, f32)> = values
        .iter()
        .zip(&dy)
        .map(|(&v, &g)| learnable_grads(v, g, scale_v, 2, range, grad_factor))
        .collect();
    let dx: Vec<f32> = grads.iter().map(|g| g.0).collect();
    assert_eq!(read(&x.grad().unwrap()), dx);
    let dscale: f32 = grads.iter().map(|g| g.1).sum();
    let dzero: f32 = grads.iter().map(|g| g.2).sum();
    let (got_scale, got_zero) = (read(&scale.grad().unwrap()), read(&zp.grad().unwrap()));
    assert!(
        close(got_scale[0], dscale, 1e-5),
        "{got_scale:?} vs {dscale}"
    );
    assert!(close(got_zero[0], dzero, 1e-5), "{got_zero:?} vs {dzero}");
    // Some elements fall below and above the range, so every branch ran.
    assert!(dx.contains(&0.0) && dzero != 0.0);
}

#[test]
fn learnable_per_tensor_backward_rounds_the_zero_point_half_up() {
    // zp = 2.5: the forward rounds to 2 (ties to even), the backward truncates 3.0 to 3.
    let (x, scale, zp) = (leaf(&[0.2], &[1]), leaf(&[1.0], &[1]), leaf(&[2.5], &[1]));
    let out = fake_quantize_learnable_per_tensor_affine(&x, &scale, &zp, 0, 3, 1.0).unwrap();
    assert_eq!(read(&out), [expected(0.2, 1.0, 2, (0, 3))]);
    out.sum_all().unwrap().backward().unwrap();
    let (_, dscale, _) = learnable_grads(0.2, 1.0, 1.0, 3, (0, 3), 1.0);
    assert_eq!(read(&scale.grad().unwrap()), [dscale]);
}

#[test]
fn learnable_per_channel_gradients_sum_over_each_channel() {
    let (range, grad_factor) = ((-8i64, 7i64), 1.0f32);
    let (scales, zps) = ([0.3f32, 0.7], [0.6f32, -1.5]);
    let values: Vec<f32> = (0..12).map(|i| (i as f32 - 5.0) * 0.9).collect();
    let (x, scale, zp) = (
        leaf(&values, &[2, 6]),
        leaf(&scales, &[2]),
        leaf(&zps, &[2]),
    );
    let out = fake_quantize_learnable_per_channel_affine(
        &x,
        &scale,
        &zp,
        0,
        range.0,
        range.1,
        f64::from(grad_factor),
    )
    .unwrap();
    // Per channel, forward and backward round the zero point half to even: 0.6 -> 1, -1.5 -> -2.
    let rounded = [1i64, -2];
    let want: Vec<f32> = values
        .iter()
        .enumerate()
        .map(|(i, &v)| expected(v, scales[i / 6], rounded[i / 6], range))
        .collect();
    assert_eq!(read(&out), want);
    out.sum_all().unwrap().backward().unwrap();
    let grads: Vec<(f32, f32, f32)> = values
        .iter()
        .enumerate()
        .map(|(i, &v)| learnable_grads(v, 1.0, scales[i / 6], rounded[i / 6], range, grad_factor))
        .collect();
    let (got_scale, got_zero) = (read(&scale.grad().unwrap()), read(&zp.grad().unwrap()));
    for c in 0..2 {
        let ds: f32 = grads[c * 6..][..6].iter().map(|g| g.1).sum();
        let dz: f32 = grads[c * 6..][..6].iter().map(|g| g.2).sum();
        assert!(
            close(got_scale[c], ds, 1e-5),
            "channel {c}: {got_scale:?} vs {ds}"
        );
        assert!(
            close(got_zero[c], dz, 1e-5),
            "channel {c}: {got_zero:?} vs {dz}"
        );
    }
}

#[test]
fn learnable_scale_gradient_equals_finite_differences_where_values_are_clamped() {
    // Every x lies beyond the range, where out = (qmax - zp) * scale or (qmin - zp) * scale:
    // differentiable in scale (and constant in x).
    let mut g = Generator::new(5);
    let values: Vec<f32> = (0..16)
        .map(|i| {
            let far = 50.0 + 10.0 * g.uniform() as f32;
            if i % 2 == 0 { far } else { -far }
        })
        .collect();
    let forward = |s: f32| {
        let out = fake_quantize_learnable_per_tensor_affine(
            &f32s(&values, &[16]),
            &f32s(&[s], &[1]),
            &f32s(&[1.0], &[1]),
            -4,
            5,
            1.0,
        )
        .unwrap();
        read(&out).iter().map(|&v| f64::from(v)).sum::<f64>()
    };
    let (s, h) = (0.75f32, 1e-2f32);
    let numeric = (forward(s + h) - forward(s - h)) / f64::from(2.0 * h);
    let (x, scale) = (leaf(&values, &[16]), leaf(&[s], &[1]));
    let out =
        fake_quantize_learnable_per_tensor_affine(&x, &scale, &f32s(&[1.0], &[1]), -4, 5, 1.0)
            .unwrap();
    out.sum_all().unwrap().backward().unwrap();
    let analytic = f64::from(read(&scale.grad().unwrap())[0]);
    assert!((analytic - numeric).abs() < 1e-3, "{analytic} vs {numeric}");
    assert_eq!(read(&x.grad().unwrap()), vec![0.0; 16]);
}

#[test]
fn fake_quantize_refuses_other_dtypes_than_f32() {
    let x = Tensor::zeros(&[2], DType::F64).unwrap();
    let err = fake_quantize_per_tensor_affine(
        &x,
        &f32s(&[1.0], &[1]),
        &Tensor::from_vec(vec![0i64], &[1]).unwrap(),
        0,
        255,
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("fake_quantize_per_tensor_affine"), "{err}");
}
