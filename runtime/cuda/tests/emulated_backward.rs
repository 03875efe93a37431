//! The backward kernels of training graphs rendered to PTX and run in the emulator give the
//! kernel-IR interpreter's results: max-pooling backward (argmax recomputed from the forward's
//! input) and adaptive average pooling backward bit for bit, training-mode batch norm and every
//! unary backward within 1e-5 relative (transcendental functions differ by a few ulp), in f32
//! and f64, on values holding infinities and NaN.

use crate::emulated;

use emulated::EmulatedPtx;
use tessera_fx::Graph;
use tessera_kernel::{Interpreter, NoEnvironment, lower, run_program};
use tessera_tensor::op::{NormOp, Pool2dParams, PoolOp, UnaryOp};
use tessera_tensor::{DType, Generator, Op, Tensor, TensorMeta};

/// `shape` of `dtype`: quarter steps in [-1.5, 1.5] with every 11th element +inf or NaN.
fn t(shape: &[usize], dtype: DType, seed: usize) -> Tensor {
    let n: usize = shape.iter().product();
    let v: Vec<f64> = (0..n)
        .map(|i| match (i + seed) % 11 {
            3 => f64::INFINITY,
            7 => f64::NAN,
            _ => (((i + seed) * 37 % 13) as f64 - 6.0) * 0.25,
        })
        .collect();
    Tensor::from_vec(v, shape).unwrap().to_dtype(dtype).unwrap()
}

/// Lowers `g` (no fallback allowed) and checks emulated PTX against the interpreter within
/// `tol` relative to `max(|expected|, 1)`.
fn check(what: &str, g: &Graph, inputs: &[Tensor], tol: f64) {
    let program = lower(g, &[]).unwrap();
    assert!(program.fallbacks.is_empty(), "{what}\n{program}");
    let want = run_program(&program, &NoEnvironment, &Interpreter, inputs).unwrap();
    let got = run_program(&program, &NoEnvironment, &EmulatedPtx::default(), inputs).unwrap();
    for (a, b) in got.iter().zip(&want) {
        for (x, y) in a.to_vec_f64().unwrap().iter().zip(b.to_vec_f64().unwrap()) {
            let ok = (x.is_nan() && y.is_nan())
                || x.to_bits() == y.to_bits()
                || (x - y).abs() <= tol * y.abs().max(1.0);
            assert!(ok, "{what}: {x} vs {y}\n{program}");
        }
    }
}

#[test]
fn pooling_batch_norm_and_unary_backward_kernels_agree_with_the_interpreter() {
    for dtype in [DType::F32, DType::F64] {
        let p = Pool2dParams {
            kernel: [2; 2],
            stride: [2; 2],
            padding: [0; 2],
            dilation: [1; 2],
            ceil_mode: false,
        };
        let mut g = Graph::new();
        let x = g.placeholder("x", TensorMeta::new(vec![2, 3, 6, 8], dtype));
        let gr = g.placeholder("g", TensorMeta::new(vec![2, 3, 3, 4], dtype));
        let pool = g
            .call_function(Op::Pool(PoolOp::MaxPool2d(p)), &[&x])
            .unwrap();
        let v = g.getitem(&pool, 0).unwrap();
        let i = g.getitem(&pool, 1).unwrap();
        let d = g
            .call_function(
                Op::Pool(PoolOp::MaxPool2dBackward {
                    input_size: [6, 8],
                    window: None,
                }),
                &[&gr, &i],
            )
            .unwrap();
        let a = g
            .call_function(
                Op::Pool(PoolOp::AdaptiveAvgPool2dBackward { input_size: [6, 8] }),
                &[&gr],
            )
            .unwrap();
        g.output(&[&v, &d, &a]).unwrap();
        check(
            "pool",
            &g,
            &[t(&[2, 3, 6, 8], dtype, 0), t(&[2, 3, 3, 4], dtype, 4)],
            0.0,
        );

        let mut g = Graph::new();
        let x = g.placeholder("x", TensorMeta::new(vec![4, 3, 5, 5], dtype));
        let w = g.placeholder("w", TensorMeta::new(vec![3], dtype));
        let b = g.placeholder("b", TensorMeta::new(vec![3], dtype));
        let n = g
            .call_function(
                Op::Norm(NormOp::BatchNorm {
                    training: true,
                    eps: 1e-5,
                    weight: true,
                    bias: true,
                }),
                &[&x, &w, &b],
            )
            .unwrap();
        let y = g.getitem(&n, 0).unwrap();
        let m = g.getitem(&n, 1).unwrap();
        let s = g.getitem(&n, 2).unwrap();
        g.output(&[&y, &m, &s]).unwrap();
        let xs = Tensor::randn_with(&[4, 3, 5, 5], DType::F32, &mut Generator::new(7))
            .unwrap()
            .to_dtype(dtype)
            .unwrap();
        check(
            "bn",
            &g,
            &[
                xs,
                Tensor::ones(&[3], dtype).unwrap(),
                Tensor::zeros(&[3], dtype).unwrap(),
            ],
            1e-5,
        );

        for op in UnaryOp::EVERY {
            let mut g = Graph::new();
            let a = g.placeholder("g", TensorMeta::new(vec![50], dtype));
            let v = g.placeholder("v", TensorMeta::new(vec![50], dtype));
            let d = g.call_function(Op::UnaryBackward(op), &[&a, &v]).unwrap();
            g.output(&[&d]).unwrap();
            check(
                &format!("{op:?}"),
                &g,
                &[t(&[50], dtype, 1), t(&[50], dtype, 2)],
                1e-5,
            );
        }
    }
}
