//! Eager `matmul`, `linear` and convolutions on CUDA tensors, on the emulated driver (the
//! generated GEMM and implicit-GEMM PTX run by the emulator): every operand rank matmul
//! accepts, broadcast batches, transposed, narrowed and permuted operands, linear with and
//! without a bias, conv2d with groups, stride, padding and dilation, conv1d, and gradients
//! through matmul, linear and convolutions (the input and weight gradient ops for the same
//! convolutions, over views too), all against the CPU's eager results in f32 and f64.
//! (A module of the `integration` binary: the backend it registers, `eager_common::backend`,
//! is the only one registered there.)

use crate::eager_common;

use eager_common::{
    CUDA, assert_close, cuda, same_on_device_within, same_views_on_device_within, tensor,
};
use tessera_tensor::op::{ConvOp, ConvParams};
use tessera_tensor::{DType, Op, Result, Tensor};

/// How far a product may be from the CPU's: the two sum in different orders.
fn tolerance(dtype: DType) -> f64 {
    if dtype == DType::F64 { 1e-12 } else { 2e-4 }
}

#[test]
fn matmul_equals_the_cpu_for_every_operand_rank_and_broadcast() {
    let cases: [(&str, &[usize], &[usize]); 11] = [
        ("2-D", &[5, 7], &[7, 3]),
        ("vector @ matrix", &[7], &[7, 3]),
        ("matrix @ vector", &[5, 7], &[7]),
        ("dot", &[7], &[7]),
        ("batched @ matrix", &[2, 5, 7], &[7, 3]),
        ("matrix @ batched", &[5, 7], &[2, 7, 3]),
        ("batches broadcast both ways", &[2, 1, 5, 7], &[3, 7, 4]),
        ("vector @ batched", &[7], &[2, 7, 3]),
        ("empty reduction", &[3, 0], &[0, 4]),
        ("no rows", &[0, 7], &[7, 3]),
        ("past one tile", &[67, 9], &[9, 70]),
    ];
    for dtype in [DType::F32, DType::F64] {
        for (i, (what, a, b)) in cases.iter().enumerate() {
            let inputs = [
                tensor(dtype, a, 2 * i, false),
                tensor(dtype, b, 2 * i + 1, false),
            ];
            same_on_device_within(
                &format!("{what} {dtype}"),
                &Op::Matmul,
                &inputs,
                tolerance(dtype),
            );
        }
    }
}

#[test]
fn matmul_reads_transposed_narrowed_and_permuted_operands() -> Result<()> {
    for dtype in [DType::F32, DType::F64] {
        let a = tensor(dtype, &[7, 5], 20, false);
        let b = tensor(dtype, &[3, 9], 21, false);
        let c = tensor(dtype, &[5, 3, 7], 22, false);
        let d = tensor(dtype, &[3, 2, 7, 4], 23, false);
        let (da, db, dc, dd) = (cuda(&a)?, cuda(&b)?, cuda(&c)?, cuda(&d)?);
        // a^T [5, 7] times a narrowed, transposed [7, 3] (offset 1, strides [1, 9]).
        let views = |a: &Tensor, b: &Tensor| -> Result<Vec<Tensor>> {
            Ok(vec![a.t()?, b.narrow(1, 1, 7)?.t()?])
        };
        let want = Op::Matmul.apply(&views(&a, &b)?.iter().collect::<Vec<_>>())?;
        same_views_on_device_within(
            &format!("transposed {dtype}"),
            &Op::Matmul,
            &views(&a, &b)?,
            &views(&da, &db)?,
            &want,
            tolerance(dtype),
        );
        // A batch read with one stride ([3, 5, 7] of strides [7, 21, 1]) broadcast against a
        // batch whose two dims no one stride walks: both packed first.
        let views = |c: &Tensor, d: &Tensor| -> Result<Vec<Tensor>> {
            Ok(vec![c.transpose(0, 1)?, d.transpose(0, 1)?])
        };
        let want = Op::Matmul.apply(&views(&c, &d)?.iter().collect::<Vec<_>>())?;
        assert_eq!(want[0].shape(), vec![2, 3, 5, 4]);
        same_views_on_device_within(
            &format!("permuted batches {dtype}"),
            &Op::Matmul,
            &views(&c, &d)?,
            &views(&dc, &dd)?,
            &want,
            tolerance(dtype),
        );
    }
    Ok(())
}

#[test]
fn linear_with_and_without_bias_equals_the_cpu() -> Result<()> {
    for dtype in [DType::F32, DType::F64] {
        let x = tensor(dtype, &[4, 6, 9], 30, false);
        let w = tensor(dtype, &[5, 9], 31, false);
        let b = tensor(dtype, &[5], 32, false);
        let tol = tolerance(dtype);
        same_on_device_within(
            &format!("linear {dtype}"),
            &Op::Linear { bias: true },
            &[x.clone(), w.clone(), b.clone()],
            tol,
        );
        same_on_device_within(
            &format!("linear without bias {dtype}"),
            &Op::Linear { bias: false },
            &[x.clone(), w.clone()],
            tol,
        );
        // Rows that are one strided matrix (a transpose: read in place), rows that are not
        // (a batch transpose: packed first), a transposed weight and a narrowed bias.
        let xt = tensor(dtype, &[9, 6], 33, false);
        let wt = tensor(dtype, &[9, 5], 34, false);
        let long_bias = tensor(dtype, &[12], 35, false);
        let (dx, dxt, dwt, dbias) = (cuda(&x)?, cuda(&xt)?, cuda(&wt)?, cuda(&long_bias)?);
        let op = Op::Linear { bias: true };
        for (what, cpu_x, dev_x) in [
            ("transposed rows", xt.t()?, dxt.t()?),
            (
                "rows of a batch transpose",
                x.transpose(0, 1)?,
                dx.transpose(0, 1)?,
            ),
        ] {
            let cpu = [cpu_x, wt.t()?, long_bias.narrow(0, 3, 5)?];
            let dev = [dev_x, dwt.t()?, dbias.narrow(0, 3, 5)?];
            let want = op.apply(&cpu.iter().collect::<Vec<_>>())?;
            same_views_on_device_within(&format!("{what} {dtype}"), &op, &cpu, &dev, &want, tol);
        }
    }
    Ok(())
}

/// A named convolution: input and weight shapes, parameters, whether it adds a bias.
type ConvCase<'a> = (&'a str, &'a [usize], &'a [usize], ConvParams, bool);

fn conv(params: ConvParams, bias: bool) -> Op {
    Op::Conv(ConvOp::Forward { params, bias })
}

/// The convolutions every test runs: 1-D and 2-D, groups (depthwise too), stride, padding,
/// dilation, 1x1 and 7x7 kernels, one image and two.
fn conv_cases() -> Vec<ConvCase<'static>> {
    let c2 = ConvParams::conv2d;
    vec![
        (
            "3x3 padded",
            &[2, 3, 6, 7],
            &[4, 3, 3, 3],
            c2([1, 1], [1, 1], [1, 1], 1),
            true,
        ),
        (
            "grouped, strided, dilated",
            &[1, 4, 9, 8],
            &[6, 2, 3, 2],
            c2([2, 1], [1, 0], [1, 2], 2),
            true,
        ),
        (
            "depthwise",
            &[2, 4, 5, 5],
            &[4, 1, 3, 3],
            c2([1, 1], [1, 1], [1, 1], 4),
            false,
        ),
        (
            "1x1",
            &[2, 5, 4, 4],
            &[3, 5, 1, 1],
            c2([1, 1], [0, 0], [1, 1], 1),
            false,
        ),
        (
            "7x7 stride 2",
            &[1, 2, 11, 11],
            &[3, 2, 7, 7],
            c2([2, 2], [3, 3], [1, 1], 1),
            true,
        ),
        (
            "conv1d",
            &[2, 3, 10],
            &[4, 3, 3],
            ConvParams::conv1d(2, 1, 1, 1),
            true,
        ),
    ]
}

#[test]
fn convolutions_equal_the_cpu_with_groups_stride_padding_and_dilation() -> Result<()> {
    let c2 = ConvParams::conv2d;
    let cases = conv_cases();
    for dtype in [DType::F32, DType::F64] {
        for (i, (what, x, w, params, bias)) in cases.iter().enumerate() {
            let mut inputs = vec![
                tensor(dtype, x, 40 + i, false),
                tensor(dtype, w, 50 + i, false),
            ];
            if *bias {
                inputs.push(tensor(dtype, &[w[0]], 60 + i, false));
            }
            same_on_device_within(
                &format!("{what} {dtype}"),
                &conv(*params, *bias),
                &inputs,
                tolerance(dtype),
            );
        }
        // A transposed input and a narrowed bias are packed first.
        let x = tensor(dtype, &[2, 3, 7, 6], 70, false);
        let w = tensor(dtype, &[4, 3, 3, 3], 71, false);
        let b = tensor(dtype, &[9], 72, false);
        let op = conv(c2([1, 1], [1, 1], [1, 1], 1), true);
        let views = |x: &Tensor, w: &Tensor, b: &Tensor| -> Result<Vec<Tensor>> {
            Ok(vec![x.transpose(2, 3)?, w.clone(), b.narrow(0, 2, 4)?])
        };
        let cpu = views(&x, &w, &b)?;
        let want = op.apply(&cpu.iter().collect::<Vec<_>>())?;
        let dev = views(&cuda(&x)?, &cuda(&w)?, &cuda(&b)?)?;
        same_views_on_device_within(
            &format!("views {dtype}"),
            &op,
            &cpu,
            &dev,
            &want,
            tolerance(dtype),
        );
    }
    Ok(())
}

#[test]
fn gradients_through_matmul_and_linear_equal_the_cpu() -> Result<()> {
    for dtype in [DType::F32, DType::F64] {
        let leaves = [
            tensor(dtype, &[2, 3, 8], 80, false),
            tensor(dtype, &[5, 8], 81, false),
            tensor(dtype, &[5], 82, false),
            tensor(dtype, &[5, 4], 83, false),
            tensor(dtype, &[4], 84, false),
        ];
        let run = |leaves: Vec<Tensor>| -> Result<(Tensor, Vec<Tensor>)> {
            let leaves: Vec<Tensor> = leaves
                .into_iter()
                .map(|t| t.requires_grad_(true))
                .collect::<Result<_>>()?;
            let [x, w, b, m, v] = [0, 1, 2, 3, 4].map(|i| leaves[i].clone());
            // linear, a batched matmul broadcasting its matrix, a matrix-vector product,
            // softmax and a mean.
            let h = Op::Linear { bias: true }.apply1(&[&x, &w, &b])?;
            let y = h.matmul(&m)?.softmax(2)?;
            let z = y.matmul(&v)?.mul(&y.sum_dims(&[2], false)?)?;
            let loss = z.mean(&[0, 1], false)?;
            loss.backward()?;
            Ok((loss, leaves))
        };
        let (cpu_loss, cpu) = run(leaves.to_vec())?;
        let device: Vec<Tensor> = leaves.iter().map(cuda).collect::<Result<_>>()?;
        let (dev_loss, dev) = run(device)?;
        let tol = tolerance(dtype);
        assert_close(&format!("loss {dtype}"), &cpu_loss, &dev_loss, tol);
        for (i, (c, d)) in cpu.iter().zip(&dev).enumerate() {
            let (c, d) = (c.grad().unwrap(), d.grad().unwrap());
            assert_close(&format!("gradient {i} {dtype}"), &c, &d, tol);
        }
    }
    Ok(())
}

/// The op of `params`' input gradient, for an input `x`.
fn input_grad(params: ConvParams, x: &[usize]) -> Op {
    let input_size = if params.spatial_dims == 1 {
        [1, x[2]]
    } else {
        [x[2], x[3]]
    };
    Op::Conv(ConvOp::BackwardInput { params, input_size })
}

/// The op of `params`' weight gradient, for a weight `w`.
fn weight_grad(params: ConvParams, w: &[usize]) -> Op {
    let kernel_size = if params.spatial_dims == 1 {
        [1, w[2]]
    } else {
        [w[2], w[3]]
    };
    Op::Conv(ConvOp::BackwardWeight {
        params,
        kernel_size,
    })
}

#[test]
fn convolution_gradient_ops_equal_the_cpu_with_groups_stride_padding_and_dilation() -> Result<()> {
    for dtype in [DType::F32, DType::F64] {
        for (i, (what, x, w, params, _)) in conv_cases().into_iter().enumerate() {
            let (x, w) = (
                tensor(dtype, x, 100 + i, false),
                tensor(dtype, w, 110 + i, false),
            );
            let y = conv(params, false).apply1(&[&x, &w])?;
            let go = tensor(dtype, &y.shape(), 120 + i, false);
            let tol = tolerance(dtype);
            same_on_device_within(
                &format!("{what} input gradient {dtype}"),
                &input_grad(params, &x.shape()),
                &[go.clone(), w.clone()],
                tol,
            );
            same_on_device_within(
                &format!("{what} weight gradient {dtype}"),
                &weight_grad(params, &w.shape()),
                &[x.clone(), go],
                tol,
            );
        }
    }
    Ok(())
}

#[test]
fn convolution_gradients_read_views_and_pack_what_is_not_one_matrix() -> Result<()> {
    // Two images (the output gradient gathered per group), a 3x3 weight (transposed per
    // group by the copy kernel), and operands that are transposed or narrowed views.
    let params = ConvParams::conv2d([2, 1], [1, 1], [1, 1], 2);
    for dtype in [DType::F32, DType::F64] {
        let x = tensor(dtype, &[2, 4, 6, 7], 130, false);
        let w = tensor(dtype, &[6, 2, 3, 3], 131, false);
        let y_shape = conv(params, false).apply1(&[&x, &w])?.shape();
        let go = tensor(
            dtype,
            &[y_shape[0], y_shape[1], y_shape[3], y_shape[2]],
            132,
            false,
        );
        let wide = tensor(dtype, &[6, 2, 3, 5], 133, false);
        let tol = tolerance(dtype);
        let (dgo, dwide, dx) = (cuda(&go)?, cuda(&wide)?, cuda(&x)?);
        let op = input_grad(params, &x.shape());
        let views = |go: &Tensor, wide: &Tensor| -> Result<Vec<Tensor>> {
            Ok(vec![go.transpose(2, 3)?, wide.narrow(3, 1, 3)?])
        };
        let cpu = views(&go, &wide)?;
        let want = op.apply(&cpu.iter().collect::<Vec<_>>())?;
        let dev = views(&dgo, &dwide)?;
        same_views_on_device_within(
            &format!("input gradient of views {dtype}"),
            &op,
            &cpu,
            &dev,
            &want,
            tol,
        );
        let op = weight_grad(params, &w.shape());
        let views = |x: &Tensor, go: &Tensor| -> Result<Vec<Tensor>> {
            Ok(vec![x.clone(), go.transpose(2, 3)?])
        };
        let cpu = views(&x, &go)?;
        let want = op.apply(&cpu.iter().collect::<Vec<_>>())?;
        let dev = views(&dx, &dgo)?;
        same_views_on_device_within(
            &format!("weight gradient of a view {dtype}"),
            &op,
            &cpu,
            &dev,
            &want,
            tol,
        );
    }
    Ok(())
}

#[test]
fn gradients_through_a_convolution_equal_the_cpu() -> Result<()> {
    for dtype in [DType::F32, DType::F64] {
        for (i, (what, x, w, params, bias)) in conv_cases().into_iter().enumerate() {
            let mut leaves = vec![
                tensor(dtype, x, 140 + i, false),
                tensor(dtype, w, 150 + i, false),
            ];
            if bias {
                leaves.push(tensor(dtype, &[w[0]], 160 + i, false));
            }
            let run = |leaves: &[Tensor]| -> Result<(Tensor, Vec<Tensor>)> {
                let leaves: Vec<Tensor> = leaves
                    .iter()
                    .map(|t| t.clone().requires_grad_(true))
                    .collect::<Result<_>>()?;
                let y = conv(params, bias).apply1(&leaves.iter().collect::<Vec<_>>())?;
                // A loss whose gradient differs per output element.
                let loss = y.mul(&y)?.sum_all()?;
                loss.backward()?;
                Ok((loss, leaves))
            };
            let (cpu_loss, cpu) = run(&leaves)?;
            let device: Vec<Tensor> = leaves.iter().map(cuda).collect::<Result<_>>()?;
            let (dev_loss, dev) = run(&device)?;
            assert_eq!(dev_loss.device(), CUDA);
            let tol = tolerance(dtype);
            assert_close(&format!("{what} loss {dtype}"), &cpu_loss, &dev_loss, tol);
            for (n, (c, d)) in cpu.iter().zip(&dev).enumerate() {
                let (c, d) = (c.grad().unwrap(), d.grad().unwrap());
                assert_eq!(d.device(), CUDA, "{what}: gradient {n} left the device");
                assert_close(&format!("{what} gradient {n} {dtype}"), &c, &d, tol);
            }
        }
    }
    Ok(())
}
