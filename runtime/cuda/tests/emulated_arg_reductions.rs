//! Reductions with positions on the PTX backend: `argmax`/`argmin` and `max`/`min` along a
//! dim rendered to PTX (assembled by ptxas for sm_80 and sm_90 when it is installed), run in
//! the emulator and checked bit for bit against the kernel-IR interpreter and the eager
//! kernels: ties keep the first position and the first NaN wins across the threads of a
//! block (rows longer than a warp, than a block, shuffles and shared-memory partials
//! included), rows of -inf only, size-1 and odd lengths, transposed inputs, every dim, f32,
//! f64, f16 and bf16; and the same ops as eager ops on CUDA tensors of the emulated driver.
//! Reductions of integer and bool tensors (`sum`, `amax`/`amin`, `argmax`/`argmin`) compute in
//! i64 through the same shuffles and shared memory (an i64 moves as two 32-bit halves), so
//! their results, sums included (integer addition associates), are the eager kernel's bit for
//! bit, beyond 2^53 too.

use crate::emulated_agreement::bits;

use tessera_tensor::op::{ReduceKind, ReduceOp};
use tessera_tensor::{DType, Device, Op, Tensor};

const KINDS: [ReduceKind; 4] = [
    ReduceKind::ArgMax,
    ReduceKind::ArgMin,
    ReduceKind::MaxWithIndices,
    ReduceKind::MinWithIndices,
];

fn outputs(kind: ReduceKind) -> usize {
    if matches!(kind, ReduceKind::ArgMax | ReduceKind::ArgMin) {
        1
    } else {
        2
    }
}

/// Small integers (ties everywhere), a NaN at each of `nans`, and -inf over `ninf`.
fn tied(shape: &[usize], dtype: DType, nans: &[usize], ninf: std::ops::Range<usize>) -> Tensor {
    let n: usize = shape.iter().product();
    let mut v: Vec<f64> = (0..n).map(|i| ((i * 7 + i / 5) % 4) as f64 - 1.0).collect();
    for &at in nans.iter().filter(|&&at| at < n) {
        v[at] = f64::NAN;
    }
    for x in v.iter_mut().take(ninf.end).skip(ninf.start) {
        *x = f64::NEG_INFINITY;
    }
    Tensor::from_vec(v, shape).unwrap().to_dtype(dtype).unwrap()
}

/// Every kind along each of `dims`, keepdim or not when `both_keepdims` (keepdim changes the
/// output's shape only, not the kernel's arithmetic).
fn every_kind_along(x: &Tensor, dims: std::ops::Range<usize>, both_keepdims: bool) {
    let keepdims: &[bool] = if both_keepdims {
        &[false, true]
    } else {
        &[false]
    };
    for kind in KINDS {
        for dim in dims.clone() {
            for &keepdim in keepdims {
                let op = Op::Reduce(ReduceOp {
                    kind,
                    dims: vec![dim],
                    keepdim,
                });
                agrees(op, x, outputs(kind));
            }
        }
    }
}

#[test]
fn arg_reductions_on_emulated_ptx_equal_the_interpreter_and_eager() {
    for dtype in [DType::F32, DType::F64, DType::F16, DType::BF16] {
        let both_keepdims = dtype == DType::F32;
        for shape in [&[7][..], &[3, 5], &[2, 1, 9], &[1, 1]] {
            let x = tied(shape, dtype, &[4, 11, 13], 20..26);
            every_kind_along(&x, 0..x.ndim(), both_keepdims);
            if shape.len() >= 2 {
                let x = x.transpose(0, -1).unwrap();
                every_kind_along(&x, 0..x.ndim(), both_keepdims);
            }
        }
    }
}

#[test]
fn rows_longer_than_a_warp_and_a_block_combine_to_the_first_extreme() {
    for dtype in [DType::F32, DType::F64] {
        // Rows of 600: each thread of a 256-thread block sees two or three points; the ties'
        // first positions are in other warps than later ones.
        let x = tied(&[3, 600], dtype, &[], 0..0);
        every_kind_along(&x, 1..2, false);
        // A NaN late in row 0 and two in row 1 (the first wins); row 2 all -inf.
        let x = tied(&[3, 600], dtype, &[517, 700, 1090], 1200..1800);
        every_kind_along(&x, 1..2, false);
        // Columns of 67 (two warps, the second partly idle) read with a stride.
        let x = tied(&[67, 3], dtype, &[100, 130], 0..0);
        every_kind_along(&x, 0..1, false);
    }
}

#[test]
fn arg_reductions_run_as_eager_cuda_ops() {
    crate::eager_common::backend();
    let x = tied(&[4, 70], DType::F32, &[150], 210..280);
    let d = x.to_device(Device::Cuda(0)).unwrap();
    let on_cpu = |t: Tensor| {
        assert_eq!(t.device(), Device::Cuda(0));
        t.to_device(Device::Cpu).unwrap()
    };
    for dim in [Some(0), Some(1), Some(-1), None] {
        for keepdim in [false, true] {
            let (got, want) = (d.argmax(dim, keepdim), x.argmax(dim, keepdim));
            assert_eq!(bits(&on_cpu(got.unwrap())), bits(&want.unwrap()));
            let (got, want) = (d.argmin(dim, keepdim), x.argmin(dim, keepdim));
            assert_eq!(bits(&on_cpu(got.unwrap())), bits(&want.unwrap()));
        }
    }
    for dim in [0, 1] {
        let (values, indices) = d.max_dim(dim, true).unwrap();
        let (want_values, want_indices) = x.max_dim(dim, true).unwrap();
        assert_eq!(bits(&on_cpu(values)), bits(&want_values));
        let indices = on_cpu(indices);
        assert_eq!(indices.dtype(), DType::I64);
        assert_eq!(bits(&indices), bits(&want_indices));
        let (values, indices) = d.min_dim(dim, false).unwrap();
        let (want_values, want_indices) = x.min_dim(dim, false).unwrap();
        assert_eq!(bits(&on_cpu(values)), bits(&want_values));
        assert_eq!(bits(&on_cpu(indices)), bits(&want_indices));
    }
    // An accuracy count: the comparison and the i64 sum of its bools on the device.
    let predicted = Tensor::from_vec((0..300i64).map(|i| i % 7).collect(), &[300]).unwrap();
    let target = Tensor::from_vec((0..300i64).map(|i| i % 5).collect(), &[300]).unwrap();
    let want = predicted
        .eq_(&target)
        .unwrap()
        .sum_dims(&[0], false)
        .unwrap();
    let (p, t) = (
        predicted.to_device(Device::Cuda(0)).unwrap(),
        target.to_device(Device::Cuda(0)).unwrap(),
    );
    let got = on_cpu(p.eq_(&t).unwrap().sum_dims(&[0], false).unwrap());
    assert_eq!(got.dtype(), DType::I64);
    assert_eq!(bits(&got), bits(&want));
    let (got, want) = (
        p.argmax(Some(0), false).unwrap(),
        predicted.argmax(Some(0), false),
    );
    assert_eq!(bits(&on_cpu(got)), bits(&want.unwrap()));
}

/// Rows of i64 values beyond 2^53 differing by one, with ties and the type's extremes.
fn wide(shape: &[usize]) -> Tensor {
    let n: usize = shape.iter().product();
    let base = 1i64 << 60;
    let mut v: Vec<i64> = (0..n)
        .map(|i| base + ((i * 7 + i / 5) % 4) as i64)
        .collect();
    for (at, x) in [(3, i64::MAX), (40, i64::MIN), (41, -base)] {
        if at < n {
            v[at] = x;
        }
    }
    Tensor::from_vec(v, shape).unwrap()
}

#[test]
fn integer_reductions_on_emulated_ptx_are_exact_in_i64() {
    let value_kinds = [ReduceKind::Sum, ReduceKind::Amax, ReduceKind::Amin];
    let arg_kinds = [ReduceKind::ArgMax, ReduceKind::ArgMin];
    // Rows of 600 along dim 1 (a 256-thread block, shuffles and shared partials); 3 along dim 0.
    let x = wide(&[3, 600]);
    let small = Tensor::from_vec((0..24i64).map(|i| (i * 5) % 7).collect(), &[4, 6]).unwrap();
    for x in [
        x,
        small.to_dtype(DType::U8).unwrap(),
        small.to_dtype(DType::I32).unwrap(),
        small.to_dtype(DType::Bool).unwrap(),
    ] {
        for dim in 0..2 {
            for kind in value_kinds.into_iter().chain(arg_kinds) {
                let op = Op::Reduce(ReduceOp {
                    kind,
                    dims: vec![dim],
                    keepdim: false,
                });
                agrees(op, &x, 1);
            }
        }
    }
}

/// `op` on `x`: see [`crate::emulated_agreement::agrees`].
fn agrees(op: Op, x: &Tensor, outputs: usize) {
    crate::emulated_agreement::agrees(op, std::slice::from_ref(x), outputs);
}
