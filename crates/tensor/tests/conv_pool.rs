//! Convolution and pooling: hand-computed cases, gradchecks over strides, padding, dilation,
//! groups, bias and ceil_mode, error messages, and PyTorch conformance (case `d_cnn_eval`).

use crate::common;

use common::{Case, assert_close, iota, leaf, tensor};
use tessera_tensor::functional as F;
use tessera_tensor::{DType, GradcheckOptions, Result, Tensor, gradcheck};

fn check_grads(f: impl Fn(&[Tensor]) -> Result<Tensor>, inputs: &[Tensor]) {
    gradcheck(f, inputs, GradcheckOptions::default()).unwrap();
}

fn values(t: &Tensor) -> Vec<f64> {
    t.to_vec_f64().unwrap()
}

// ----- hand-computed cases -----

#[test]
fn conv2d_sums_each_window_with_ones_kernel() -> Result<()> {
    let x = iota(&[1, 1, 3, 3], DType::F64);
    let w = Tensor::ones(&[1, 1, 2, 2], DType::F64)?;
    let y = F::conv2d(&x, &w, None, [1, 1], [0, 0], [1, 1], 1)?;
    assert_eq!(y.shape(), vec![1, 1, 2, 2]);
    assert_eq!(values(&y), vec![8.0, 12.0, 20.0, 24.0]);
    Ok(())
}

#[test]
fn conv2d_padding_stride_and_bias() -> Result<()> {
    let x = iota(&[1, 1, 3, 3], DType::F64);
    let w = Tensor::ones(&[1, 1, 3, 3], DType::F64)?;
    let b = tensor(&[10.0], &[1], DType::F64)?;
    let y = F::conv2d(&x, &w, Some(&b), [2, 2], [1, 1], [1, 1], 1)?;
    // Windows centred on the corners: 0+1+3+4, 1+2+4+5, 3+4+6+7, 4+5+7+8.
    assert_eq!(values(&y), vec![18.0, 22.0, 30.0, 34.0]);
    Ok(())
}

#[test]
fn conv2d_dilation_reads_spread_taps() -> Result<()> {
    let x = iota(&[1, 1, 3, 3], DType::F64);
    let w = Tensor::ones(&[1, 1, 2, 2], DType::F64)?;
    let y = F::conv2d(&x, &w, None, [1, 1], [0, 0], [2, 2], 1)?;
    assert_eq!(values(&y), vec![0.0 + 2.0 + 6.0 + 8.0]);
    Ok(())
}

#[test]
fn conv2d_groups_keep_channels_apart() -> Result<()> {
    let x = iota(&[1, 2, 2, 2], DType::F64);
    let w = tensor(&[1.0, 10.0], &[2, 1, 1, 1], DType::F64)?;
    let y = F::conv2d(&x, &w, None, [1, 1], [0, 0], [1, 1], 2)?;
    assert_eq!(values(&y), vec![0.0, 1.0, 2.0, 3.0, 40.0, 50.0, 60.0, 70.0]);
    Ok(())
}

#[test]
fn conv2d_accepts_unbatched_input_and_f32() -> Result<()> {
    let x = iota(&[1, 3, 3], DType::F64).to_dtype(DType::F32)?;
    let w = Tensor::ones(&[1, 1, 2, 2], DType::F32)?;
    let y = F::conv2d(&x, &w, None, [1, 1], [0, 0], [1, 1], 1)?;
    assert_eq!(y.shape(), vec![1, 2, 2]);
    assert_eq!(y.to_vec::<f32>()?, vec![8.0, 12.0, 20.0, 24.0]);
    Ok(())
}

#[test]
fn conv2d_half_input_computes_in_f32() -> Result<()> {
    let x = iota(&[1, 1, 3, 3], DType::F64).to_dtype(DType::F16)?;
    let w = Tensor::ones(&[1, 1, 2, 2], DType::F16)?;
    let y = F::conv2d(&x, &w, None, [1, 1], [0, 0], [1, 1], 1)?;
    assert_eq!(y.dtype(), DType::F16);
    assert_eq!(values(&y), vec![8.0, 12.0, 20.0, 24.0]);
    Ok(())
}

#[test]
fn conv1d_slides_along_the_last_dimension() -> Result<()> {
    let x = iota(&[1, 1, 5], DType::F64);
    let w = tensor(&[1.0, -1.0], &[1, 1, 2], DType::F64)?;
    let y = F::conv1d(&x, &w, None, 1, 1, 1, 1)?;
    assert_eq!(y.shape(), vec![1, 1, 6]);
    assert_eq!(values(&y), vec![-0.0, -1.0, -1.0, -1.0, -1.0, 4.0]);
    let strided = F::conv1d(&x, &w, None, 2, 0, 2, 1)?;
    assert_eq!(values(&strided), vec![-2.0, -2.0]);
    Ok(())
}

/// `conv2d(x, w)` with stride `s` and padding `pad`, by its definition, in f64.
fn conv_by_definition(x: &Tensor, w: &Tensor, s: usize, pad: usize) -> Vec<f64> {
    let (xs, ws) = (x.shape(), w.shape());
    let (xv, wv) = (values(x), values(w));
    let (n, ci, h, wd, co, k) = (xs[0], xs[1], xs[2], xs[3], ws[0], ws[2]);
    let (oh, ow) = ((h + 2 * pad - k) / s + 1, (wd + 2 * pad - k) / s + 1);
    let mut out = vec![0.0; n * co * oh * ow];
    for (i, o) in out.iter_mut().enumerate() {
        let (b, c_o, oy, ox) = (i / (co * oh * ow), i / (oh * ow) % co, i / ow % oh, i % ow);
        for c in 0..ci {
            for ky in 0..k {
                for kx in 0..k {
                    let (iy, ix) = (
                        (oy * s + ky) as isize - pad as isize,
                        (ox * s + kx) as isize - pad as isize,
                    );
                    if iy >= 0 && ix >= 0 && (iy as usize) < h && (ix as usize) < wd {
                        let xi = ((b * ci + c) * h + iy as usize) * wd + ix as usize;
                        *o += xv[xi] * wv[((c_o * ci + c) * k + ky) * k + kx];
                    }
                }
            }
        }
    }
    out
}

#[test]
fn strided_and_padded_pointwise_convolutions_match_their_definition_in_both_types() -> Result<()> {
    // ResNet's downsampling shapes at batch 1 (the im2col patches of one image filled channel
    // by channel on the thread pool) and at batch 3 (images in parallel): 3x3 and 1x1
    // convolutions of stride 2 (the 1x1 one a GEMM on every second pixel), and a padded 1x1
    // convolution of stride 1 (a GEMM on its padded patches, not the direct kernel).
    for (n, k, s, pad) in [
        (1, 3, 2, 1),
        (1, 1, 2, 0),
        (3, 3, 2, 1),
        (3, 1, 2, 0),
        (1, 1, 1, 1),
    ] {
        let x = leaf(&[n, 48, 15, 13], 4).detach();
        let w = leaf(&[40, 48, k, k], 5).detach();
        let want = conv_by_definition(&x, &w, s, pad);
        let conv = |x: &Tensor, w: &Tensor| F::conv2d(x, w, None, [s, s], [pad, pad], [1, 1], 1);
        for dtype in [DType::F64, DType::F32] {
            let got = conv(&x.to_dtype(dtype)?, &w.to_dtype(dtype)?)?;
            let want = Tensor::from_vec(want.clone(), &got.shape())?;
            let what = format!("batch {n}, {k}x{k} kernel, stride {s}, {dtype:?}");
            assert_close(&got.to_dtype(DType::F64)?, &want, 1e-5, 1e-5, &what);
        }
    }
    Ok(())
}

#[test]
fn conv_large_batch_matches_per_image_results() -> Result<()> {
    // The batch runs in parallel with serial GEMMs; each image alone uses a parallel GEMM.
    let x = leaf(&[6, 4, 9, 7], 1).detach();
    let w = leaf(&[8, 2, 3, 3], 2).detach();
    let b = leaf(&[8], 3).detach();
    let all = F::conv2d(&x, &w, Some(&b), [2, 1], [1, 2], [1, 2], 2)?;
    for n in 0..6 {
        let one = F::conv2d(&x.narrow(0, n, 1)?, &w, Some(&b), [2, 1], [1, 2], [1, 2], 2)?;
        assert_close(&all.narrow(0, n, 1)?, &one, 1e-12, 1e-12, "image");
    }
    Ok(())
}

#[test]
fn max_pool2d_returns_values_and_plane_indices() -> Result<()> {
    let x = tensor(
        &[
            1.0, 5.0, 2.0, 0.0, 3.0, 4.0, 9.0, 1.0, 7.0, 6.0, 8.0, 2.0, 0.0, 1.0, 3.0, 4.0,
        ],
        &[1, 1, 4, 4],
        DType::F64,
    )?;
    let (y, i) = F::max_pool2d_with_indices(&x, [2, 2], [2, 2], [0, 0], [1, 1], false)?;
    assert_eq!(values(&y), vec![5.0, 9.0, 7.0, 8.0]);
    assert_eq!(i.dtype(), DType::I64);
    assert_eq!(i.to_vec::<i64>()?, vec![1, 6, 8, 10]);
    Ok(())
}

#[test]
fn max_pool2d_ceil_mode_keeps_the_partial_window() -> Result<()> {
    let x = iota(&[1, 5, 5], DType::F64);
    let floor = F::max_pool2d(&x, [2, 2], [2, 2], [0, 0], [1, 1], false)?;
    assert_eq!(floor.shape(), vec![1, 2, 2]);
    let ceil = F::max_pool2d(&x, [2, 2], [2, 2], [0, 0], [1, 1], true)?;
    assert_eq!(ceil.shape(), vec![1, 3, 3]);
    assert_eq!(
        values(&ceil),
        vec![6.0, 8.0, 9.0, 16.0, 18.0, 19.0, 21.0, 23.0, 24.0]
    );
    Ok(())
}

#[test]
fn max_pool2d_padding_is_never_the_max() -> Result<()> {
    let x = tensor(&[-1.0, -2.0, -3.0, -4.0], &[1, 1, 2, 2], DType::F64)?;
    let (y, i) = F::max_pool2d_with_indices(&x, [2, 2], [1, 1], [1, 1], [1, 1], false)?;
    assert_eq!(
        values(&y),
        vec![-1.0, -1.0, -2.0, -1.0, -1.0, -2.0, -3.0, -3.0, -4.0]
    );
    assert_eq!(i.to_vec::<i64>()?, vec![0, 0, 1, 0, 0, 1, 2, 2, 3]);
    Ok(())
}

#[test]
fn max_pool2d_propagates_nan() -> Result<()> {
    let x = tensor(&[1.0, f64::NAN, 3.0, 2.0], &[1, 1, 2, 2], DType::F64)?;
    let y = F::max_pool2d(&x, [2, 2], [2, 2], [0, 0], [1, 1], false)?;
    assert!(values(&y)[0].is_nan());
    Ok(())
}

#[test]
fn max_pool2d_gradient_goes_to_the_argmax() -> Result<()> {
    let x = tensor(&[1.0, 5.0, 2.0, 0.0], &[1, 1, 2, 2], DType::F64)?.requires_grad_(true)?;
    let (y, i) = F::max_pool2d_with_indices(&x, [2, 2], [2, 2], [0, 0], [1, 1], false)?;
    assert!(!i.requires_grad());
    y.sum_all()?.backward()?;
    assert_eq!(values(&x.grad().unwrap()), vec![0.0, 1.0, 0.0, 0.0]);
    Ok(())
}

#[test]
fn avg_pool2d_count_include_pad_sets_the_divisor() -> Result<()> {
    let x = Tensor::ones(&[1, 1, 2, 2], DType::F64)?;
    let with_pad = F::avg_pool2d(&x, [2, 2], [2, 2], [1, 1], false, true)?;
    assert_eq!(values(&with_pad), vec![0.25, 0.25, 0.25, 0.25]);
    let without = F::avg_pool2d(&x, [2, 2], [2, 2], [1, 1], false, false)?;
    assert_eq!(values(&without), vec![1.0, 1.0, 1.0, 1.0]);
    Ok(())
}

#[test]
fn avg_pool2d_ceil_mode_divides_by_the_clipped_window() -> Result<()> {
    let x = iota(&[1, 1, 3, 3], DType::F64);
    let y = F::avg_pool2d(&x, [2, 2], [2, 2], [0, 0], true, true)?;
    // The last windows hang over the edge: divisors 2 and 1, not 4 (no padding to include).
    assert_eq!(values(&y), vec![2.0, 3.5, 6.5, 8.0]);
    Ok(())
}

#[test]
fn adaptive_avg_pool2d_uses_overlapping_bins() -> Result<()> {
    let x = iota(&[1, 1, 1, 5], DType::F64);
    let y = F::adaptive_avg_pool2d(&x, [1, 3])?;
    // Bins [0, 2), [1, 4), [3, 5).
    assert_eq!(values(&y), vec![0.5, 2.0, 3.5]);
    let gap = F::adaptive_avg_pool2d(&iota(&[2, 3, 3], DType::F64), [1, 1])?;
    assert_eq!(gap.shape(), vec![2, 1, 1]);
    assert_eq!(values(&gap), vec![4.0, 13.0]);
    Ok(())
}

// ----- gradchecks -----

#[test]
fn conv2d_gradcheck_over_configurations() {
    // (input shape, weight shape, stride, padding, dilation, groups, bias)
    type Config = (
        [usize; 4],
        [usize; 4],
        [usize; 2],
        [usize; 2],
        [usize; 2],
        usize,
        bool,
    );
    let configs: [Config; 6] = [
        ([2, 3, 5, 5], [4, 3, 3, 3], [1, 1], [0, 0], [1, 1], 1, true),
        ([2, 2, 6, 5], [3, 2, 3, 2], [2, 2], [1, 0], [1, 1], 1, false),
        ([1, 2, 7, 7], [2, 2, 3, 3], [1, 2], [2, 2], [2, 2], 1, true),
        ([2, 4, 5, 4], [6, 2, 2, 3], [1, 1], [1, 1], [1, 1], 2, true),
        ([3, 4, 4, 4], [4, 2, 1, 1], [1, 1], [0, 0], [1, 1], 2, false),
        ([2, 3, 4, 4], [2, 3, 1, 1], [2, 2], [1, 1], [1, 1], 1, true),
    ];
    for (i, (xs, ws, stride, padding, dilation, groups, bias)) in configs.into_iter().enumerate() {
        let seed = 10 * i as u64;
        let mut inputs = vec![leaf(&xs, seed), leaf(&ws, seed + 1)];
        if bias {
            inputs.push(leaf(&[ws[0]], seed + 2));
        }
        check_grads(
            |t| F::conv2d(&t[0], &t[1], t.get(2), stride, padding, dilation, groups),
            &inputs,
        );
    }
}

#[test]
fn conv1d_gradcheck_with_stride_padding_dilation_groups() {
    check_grads(
        |t| F::conv1d(&t[0], &t[1], Some(&t[2]), 2, 1, 2, 2),
        &[leaf(&[2, 4, 9], 1), leaf(&[2, 2, 3], 2), leaf(&[2], 3)],
    );
    check_grads(
        |t| F::conv1d(&t[0], &t[1], None, 1, 0, 1, 1),
        &[leaf(&[3, 6], 4), leaf(&[2, 3, 2], 5)],
    );
}

#[test]
fn max_pool2d_gradcheck_over_configurations() {
    // Distinct values keep the argmax away from ties, where the gradient is not defined.
    let configs = [
        ([2, 2], [2, 2], [0, 0], [1, 1], false),
        ([3, 3], [2, 2], [1, 1], [1, 1], true),
        ([2, 2], [1, 1], [1, 0], [2, 2], false),
        ([3, 2], [2, 3], [0, 1], [1, 1], true),
    ];
    for (i, (kernel, stride, padding, dilation, ceil)) in configs.into_iter().enumerate() {
        check_grads(
            |t| F::max_pool2d(&t[0], kernel, stride, padding, dilation, ceil),
            &[leaf(&[2, 2, 7, 6], 20 + i as u64)],
        );
    }
}

#[test]
fn avg_pool2d_gradcheck_over_configurations() {
    let configs = [
        ([2, 2], [2, 2], [0, 0], false, true),
        ([3, 3], [2, 2], [1, 1], true, true),
        ([3, 2], [2, 1], [1, 1], true, false),
    ];
    for (i, (kernel, stride, padding, ceil, include_pad)) in configs.into_iter().enumerate() {
        check_grads(
            |t| F::avg_pool2d(&t[0], kernel, stride, padding, ceil, include_pad),
            &[leaf(&[2, 2, 7, 6], 30 + i as u64)],
        );
    }
}

#[test]
fn adaptive_avg_pool2d_gradcheck() {
    for (i, size) in [[1, 1], [3, 2], [4, 5]].into_iter().enumerate() {
        check_grads(
            |t| F::adaptive_avg_pool2d(&t[0], size),
            &[leaf(&[2, 3, 7, 5], 40 + i as u64)],
        );
    }
}

#[test]
fn small_cnn_gradcheck_through_conv_pool_conv_gap() {
    check_grads(
        |t| {
            let h = F::conv2d(&t[0], &t[1], Some(&t[2]), [1, 1], [1, 1], [1, 1], 1)?.relu()?;
            let h = F::max_pool2d(&h, [2, 2], [2, 2], [0, 0], [1, 1], false)?;
            let h = F::conv2d(&h, &t[3], None, [2, 2], [1, 1], [1, 1], 1)?;
            F::adaptive_avg_pool2d(&h, [1, 1])
        },
        &[
            leaf(&[2, 2, 6, 6], 50),
            leaf(&[3, 2, 3, 3], 51),
            leaf(&[3], 52),
            leaf(&[2, 3, 3, 3], 53),
        ],
    );
}

// ----- errors -----

fn error_text(r: Result<Tensor>) -> String {
    r.expect_err("expected an error").to_string()
}

#[test]
fn conv2d_channel_mismatch_names_op_and_shapes() {
    let x = Tensor::zeros(&[1, 5, 8, 8], DType::F32).unwrap();
    let w = Tensor::zeros(&[16, 3, 3, 3], DType::F32).unwrap();
    let e = error_text(F::conv2d(&x, &w, None, [1, 1], [0, 0], [1, 1], 1));
    assert!(e.starts_with("conv2d:"), "{e}");
    assert!(
        e.contains("[1, 5, 8, 8]") && e.contains("[16, 3, 3, 3]"),
        "{e}"
    );
    assert!(
        e.contains("expected input to have 3 channels, but got 5"),
        "{e}"
    );
}

#[test]
fn conv2d_groups_must_divide_out_channels() {
    let x = Tensor::zeros(&[1, 4, 8, 8], DType::F32).unwrap();
    let w = Tensor::zeros(&[6, 1, 3, 3], DType::F32).unwrap();
    let e = error_text(F::conv2d(&x, &w, None, [1, 1], [0, 0], [1, 1], 4));
    assert!(
        e.contains("conv2d") && e.contains("divisible by groups (4)"),
        "{e}"
    );
}

#[test]
fn conv2d_kernel_larger_than_padded_input_is_an_error() {
    let x = Tensor::zeros(&[1, 1, 2, 2], DType::F32).unwrap();
    let w = Tensor::zeros(&[1, 1, 3, 3], DType::F32).unwrap();
    let e = error_text(F::conv2d(&x, &w, None, [1, 1], [0, 0], [1, 1], 1));
    assert!(
        e.contains("conv2d") && e.contains("(2 x 2)") && e.contains("(3 x 3)"),
        "{e}"
    );
    assert!(F::conv2d(&x, &w, None, [1, 1], [1, 1], [1, 1], 1).is_ok());
}

#[test]
fn conv_rejects_bad_bias_rank_stride_and_dtype() {
    let x = Tensor::zeros(&[1, 2, 4, 4], DType::F32).unwrap();
    let w = Tensor::zeros(&[3, 2, 3, 3], DType::F32).unwrap();
    let b = Tensor::zeros(&[2], DType::F32).unwrap();
    let e = error_text(F::conv2d(&x, &w, Some(&b), [1, 1], [0, 0], [1, 1], 1));
    assert!(e.contains("bias must be [out_channels] = [3]"), "{e}");
    let e = error_text(F::conv2d(&x, &w, None, [0, 1], [0, 0], [1, 1], 1));
    assert!(e.contains("stride"), "{e}");
    let x2 = Tensor::zeros(&[2, 4, 4], DType::F32)
        .unwrap()
        .unsqueeze(0)
        .unwrap()
        .unsqueeze(0)
        .unwrap();
    let e = error_text(F::conv2d(&x2, &w, None, [1, 1], [0, 0], [1, 1], 1));
    assert!(e.contains("conv2d") && e.contains("4-D"), "{e}");
    let xi = Tensor::zeros(&[1, 2, 4, 4], DType::I64).unwrap();
    assert!(F::conv2d(&xi, &w, None, [1, 1], [0, 0], [1, 1], 1).is_err());
    let x1 = Tensor::zeros(&[1, 2, 4], DType::F32).unwrap();
    let w1 = Tensor::zeros(&[1, 3, 2], DType::F32).unwrap();
    let e = error_text(F::conv1d(&x1, &w1, None, 1, 0, 1, 1));
    assert!(e.starts_with("conv1d:") && e.contains("[1, 2, 4]"), "{e}");
}

#[test]
fn pool_errors_name_the_op() {
    let x = Tensor::zeros(&[1, 1, 4, 4], DType::F32).unwrap();
    let e = error_text(F::max_pool2d(&x, [2, 2], [2, 2], [2, 2], [1, 1], false));
    assert!(
        e.starts_with("max_pool2d:") && e.contains("pad should be at most half"),
        "{e}"
    );
    let e = error_text(F::avg_pool2d(&x, [5, 5], [1, 1], [0, 0], false, true));
    assert!(
        e.starts_with("avg_pool2d:") && e.contains("too small"),
        "{e}"
    );
    let flat = Tensor::zeros(&[4, 4], DType::F32).unwrap();
    let e = error_text(F::adaptive_avg_pool2d(&flat, [1, 1]));
    assert!(
        e.starts_with("adaptive_avg_pool2d:") && e.contains("[4, 4]"),
        "{e}"
    );
    let e = error_text(F::max_pool2d(&x, [0, 2], [2, 2], [0, 0], [1, 1], false));
    assert!(e.contains("must be positive"), "{e}");
}

// ----- PyTorch conformance -----

#[test]
fn small_cnn_conv_and_pool_layers_match_pytorch() -> Result<()> {
    let case = Case::load("d_cnn_eval");
    let conv1 = F::conv2d(
        &case.io("input"),
        &case.weight("conv1.weight"),
        Some(&case.weight("conv1.bias")),
        [1, 1],
        [1, 1],
        [1, 1],
        1,
    )?;
    case.check("act/conv1", &conv1);
    let pool1 = F::max_pool2d(&case.io("act/relu1"), [2, 2], [2, 2], [0, 0], [1, 1], false)?;
    case.check("act/pool1", &pool1);
    let conv2 = F::conv2d(
        &case.io("act/pool1"),
        &case.weight("conv2.weight"),
        Some(&case.weight("conv2.bias")),
        [2, 2],
        [1, 1],
        [1, 1],
        1,
    )?;
    case.check("act/conv2", &conv2);
    let gap = F::adaptive_avg_pool2d(&case.io("act/relu2"), [1, 1])?;
    case.check("act/gap", &gap);
    Ok(())
}

#[test]
fn max_pool2d_without_indices_matches_the_indexed_op_and_propagates_nan() {
    let x = leaf(&[2, 3, 8, 9], 90).detach();
    x.narrow(3, 2, 1)
        .unwrap()
        .narrow(2, 2, 1)
        .unwrap()
        .fill_(f64::NAN)
        .unwrap();
    let configs = [
        ([2, 2], [2, 2], [0, 0], [1, 1], false),
        ([3, 3], [3, 3], [0, 0], [1, 1], false),
        ([3, 2], [2, 3], [1, 1], [1, 1], true),
        ([2, 2], [1, 1], [0, 0], [2, 2], false),
    ];
    for (kernel, stride, padding, dilation, ceil) in configs {
        let values = F::max_pool2d(&x, kernel, stride, padding, dilation, ceil).unwrap();
        let (indexed, _) =
            F::max_pool2d_with_indices(&x, kernel, stride, padding, dilation, ceil).unwrap();
        let (a, b) = (
            values.to_vec::<f64>().unwrap(),
            indexed.to_vec::<f64>().unwrap(),
        );
        assert!(
            a.iter().any(|v| v.is_nan()),
            "{kernel:?}: the NaN reaches the output"
        );
        assert!(
            a.iter()
                .zip(&b)
                .all(|(p, q)| p == q || (p.is_nan() && q.is_nan())),
            "{kernel:?}"
        );
    }
}
