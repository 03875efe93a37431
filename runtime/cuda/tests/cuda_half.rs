//! f16 and bf16 CUDA tensors on the emulated driver: conversions to and from the half types
//! (f64 to a half type through f32, as the eager cast), every elementwise op, the reductions, softmax and layer norm computed in f32 from half
//! loads and rounded once (as the CPU's eager kernels), and matmul, linear and conv2d on the
//! tensor-core (`mma.sync`) kernels, all against the CPU's eager results.
//! (A module of the `integration` binary: the backend it registers, `eager_common::backend`,
//! is the only one registered there.)

use crate::eager_common;

use eager_common::{assert_close, cuda, same_on_device_within, tensor};
use tessera_tensor::op::{BinaryOp, ConvOp, ConvParams, ReduceKind, ReduceOp, ScalarOp, UnaryOp};
use tessera_tensor::{DType, Op, Result, Tensor};

const HALVES: [DType; 2] = [DType::F16, DType::BF16];

/// One unit in the last place of the type, relative: the two sides may round a result that
/// lies near a tie differently when its f32 value differs in the last f32 bits.
fn ulp(dtype: DType) -> f64 {
    if dtype == DType::F16 {
        1.0 / 1024.0
    } else {
        1.0 / 128.0
    }
}

#[test]
fn conversions_to_and_from_half_equal_the_cpu_exactly() -> Result<()> {
    for half in HALVES {
        // Values with more bits than a half holds, ties, subnormals and overflow.
        let mut v: Vec<f64> = (0..61).map(|i| (i as f64 - 30.0) * 0.3337 + 1e-3).collect();
        v.extend([
            65504.0,
            65520.0,
            1e6,
            -1e6,
            6e-8,
            3e-5,
            1.0 + 1.0 / 2048.0,
            0.0,
            -0.0,
        ]);
        v.extend([f64::NAN, f64::INFINITY, f64::NEG_INFINITY]);
        let x = Tensor::from_vec(v.clone(), &[v.len()])?.to_dtype(DType::F32)?;
        let down = x.to_dtype(half)?;
        assert_close(
            &format!("f32 -> {half}"),
            &down,
            &cuda(&x)?.to_dtype(half)?,
            0.0,
        );
        for wide in [DType::F32, DType::F64] {
            let up = down.to_dtype(wide)?;
            let dev_up = cuda(&down)?.to_dtype(wide)?;
            assert_close(&format!("{half} -> {wide}"), &up, &dev_up, 0.0);
        }
        // f64 to a half type rounds through f32, on the device as in the eager cast.
        let wide = x.to_dtype(DType::F64)?;
        assert_close(
            &format!("f64 -> {half}"),
            &wide.to_dtype(half)?,
            &cuda(&wide)?.to_dtype(half)?,
            0.0,
        );
        let other = if half == DType::F16 {
            DType::BF16
        } else {
            DType::F16
        };
        let x = tensor(half, &[3, 17], 1, true);
        assert_close(
            &format!("{half} -> {other}"),
            &x.to_dtype(other)?,
            &cuda(&x)?.to_dtype(other)?,
            0.0,
        );
    }
    Ok(())
}

#[test]
fn elementwise_ops_on_half_tensors_equal_the_cpu() {
    for dtype in HALVES {
        let x = tensor(dtype, &[3, 37], 3, true);
        let row = tensor(dtype, &[37], 4, true);
        let tol = ulp(dtype);
        for u in UnaryOp::EVERY {
            same_on_device_within(
                &format!("{u:?} {dtype}"),
                &Op::Unary(u),
                std::slice::from_ref(&x),
                tol,
            );
        }
        for b in BinaryOp::EVERY {
            let inputs = [x.clone(), row.clone()];
            same_on_device_within(&format!("{b:?} {dtype}"), &Op::Binary(b), &inputs, tol);
            let op = Op::Scalar(ScalarOp {
                op: b,
                value: 1.5,
                reversed: false,
            });
            same_on_device_within(
                &format!("{b:?} scalar {dtype}"),
                &op,
                std::slice::from_ref(&x),
                tol,
            );
        }
        let clamp = Op::Clamp {
            min: Some(-0.5),
            max: Some(0.75),
        };
        same_on_device_within(
            &format!("clamp {dtype}"),
            &clamp,
            std::slice::from_ref(&x),
            tol,
        );
    }
}

#[test]
fn reductions_softmax_and_layer_norm_of_half_tensors_equal_the_cpu() -> Result<()> {
    for dtype in HALVES {
        let x = tensor(dtype, &[6, 45], 8, false);
        let tol = 2.0 * ulp(dtype);
        for kind in [
            ReduceKind::Sum,
            ReduceKind::Mean,
            ReduceKind::Amax,
            ReduceKind::Var { correction: 1 },
        ] {
            for (dims, keepdim) in [(vec![1], false), (vec![0], true), (vec![0, 1], false)] {
                let op = Op::Reduce(ReduceOp {
                    kind,
                    dims: dims.clone(),
                    keepdim,
                });
                same_on_device_within(
                    &format!("{kind:?} {dims:?} {dtype}"),
                    &op,
                    std::slice::from_ref(&x),
                    tol,
                );
            }
        }
        for log in [false, true] {
            let op = Op::Softmax { dim: 1, log };
            same_on_device_within(
                &format!("softmax log={log} {dtype}"),
                &op,
                std::slice::from_ref(&x),
                tol,
            );
        }
        let w = tensor(dtype, &[45], 9, false);
        let b = tensor(dtype, &[45], 10, false);
        let norm = |x: &Tensor, w: &Tensor, b: &Tensor| {
            tessera_tensor::functional::layer_norm(x, &[45], Some(w), Some(b), 1e-5)
        };
        let want = norm(&x, &w, &b)?;
        let got = norm(&cuda(&x)?, &cuda(&w)?, &cuda(&b)?)?;
        assert_close(&format!("layer norm {dtype}"), &want, &got, tol);
    }
    Ok(())
}

#[test]
fn half_products_and_convolutions_run_on_tensor_cores_and_equal_the_cpu() {
    for dtype in HALVES {
        // f32 accumulation on both sides, in different orders, then one rounding.
        let tol = 2.0 * ulp(dtype);
        let matmuls: [(&[usize], &[usize]); 3] = [
            (&[5, 19], &[19, 3]),
            (&[2, 17, 33], &[33, 9]),
            (&[7], &[2, 7, 66]),
        ];
        for (i, (a, b)) in matmuls.iter().enumerate() {
            let inputs = [
                tensor(dtype, a, 10 + i, false),
                tensor(dtype, b, 20 + i, false),
            ];
            same_on_device_within(
                &format!("matmul {a:?} @ {b:?} {dtype}"),
                &Op::Matmul,
                &inputs,
                tol,
            );
        }
        let linear = [
            tensor(dtype, &[4, 3, 21], 30, false),
            tensor(dtype, &[6, 21], 31, false),
            tensor(dtype, &[6], 32, false),
        ];
        same_on_device_within(
            &format!("linear {dtype}"),
            &Op::Linear { bias: true },
            &linear,
            tol,
        );
        let conv = Op::Conv(ConvOp::Forward {
            params: ConvParams::conv2d([2, 1], [1, 1], [1, 1], 2),
            bias: true,
        });
        let inputs = [
            tensor(dtype, &[2, 4, 7, 6], 40, false),
            tensor(dtype, &[6, 2, 3, 3], 41, false),
            tensor(dtype, &[6], 42, false),
        ];
        same_on_device_within(&format!("conv2d {dtype}"), &conv, &inputs, tol);
    }
}
