//! Max pooling with indices, adaptive pooling and reductions and softmax of 0-d tensors on the
//! PTX backend: rendered to PTX (assembled by ptxas for sm_80 and sm_90 when it is installed),
//! run in the emulator, and checked bit for bit against the kernel-IR interpreter and the
//! eager kernels (values and i64 indices; ties keep the first maximum, NaN wins, padded,
//! dilated and ceil-mode windows, adaptive bins that are uneven or overlap, transposed inputs,
//! f32 and f64); max pooling's backward from those saved indices (the residue-grid kernel and
//! its packing copy when the forward is in the graph, the sum over the plane when the indices
//! are an input or come from adaptive max pooling), adaptive average pooling's backward and
//! average pooling's backward of overlapping windows, likewise; average pooling whose
//! ceil-mode windows pass the padding, or whose border windows are counted per point; and
//! the same ops as eager ops on CUDA tensors of the emulated driver.
use crate::common;
use crate::emulated;
use crate::emulated_agreement::{agrees, bits};

use emulated::EmulatedPtx;
use tessera_fx::Graph;
use tessera_kernel::{Interpreter, NoEnvironment, run_program};
use tessera_tensor::op::{PoolOp, ReduceKind, ReduceOp};
use tessera_tensor::{DType, Device, Op, Tensor, TensorMeta};

/// Small integers (ties are common), with NaN, +inf and -inf at a few places.
fn tied(shape: &[usize], dtype: DType) -> Tensor {
    let n: usize = shape.iter().product();
    let mut v: Vec<f64> = (0..n).map(|i| ((i * 7 + i / 5) % 4) as f64 - 1.0).collect();
    for (at, x) in [(5, f64::NAN), (11, f64::INFINITY), (17, f64::NAN)] {
        if at < n {
            v[at] = x;
        }
    }
    for x in v.iter_mut().skip(30).take(9) {
        *x = f64::NEG_INFINITY;
    }
    Tensor::from_vec(v, shape).unwrap().to_dtype(dtype).unwrap()
}

/// `(kernel, stride, padding, dilation, ceil mode)`.
type Window = ([usize; 2], [usize; 2], [usize; 2], [usize; 2], bool);

const WINDOWS: [Window; 5] = [
    ([2, 2], [2, 2], [0, 0], [1, 1], false),
    ([3, 3], [2, 2], [1, 1], [1, 1], false),
    ([5, 3], [2, 3], [2, 1], [1, 1], true),
    ([3, 2], [1, 2], [0, 1], [1, 1], false),
    ([3, 3], [2, 2], [2, 2], [2, 2], true),
];

#[test]
fn max_pool_with_indices_on_emulated_ptx_equals_the_interpreter_and_eager() {
    for dtype in [DType::F32, DType::F64] {
        for (kernel, stride, padding, dilation, ceil) in WINDOWS {
            let op = Op::Pool(PoolOp::max_pool2d(kernel, stride, padding, dilation, ceil));
            for shape in [&[2, 2, 7, 9][..], &[3, 6, 5], &[1, 1, 1, 1]] {
                let meta = tessera_tensor::TensorMeta::new(shape.to_vec(), dtype);
                if op.meta(&[meta]).is_err() {
                    continue;
                }
                let x = tied(shape, dtype);
                agrees(op.clone(), std::slice::from_ref(&x), 2);
                if shape.len() == 4 {
                    // A transposed (non-contiguous) input.
                    let t = x.transpose(2, 3).unwrap();
                    let meta = tessera_tensor::TensorMeta::new(t.shape().to_vec(), dtype);
                    if op.meta(&[meta]).is_ok() {
                        agrees(op.clone(), &[t], 2);
                    }
                }
            }
        }
    }
}

/// `max_pool2d_with_indices(x)` with `op`'s windows and its backward from a gradient of
/// the pooled shape, returning the input gradient; the graph and the gradient's shape.
fn pool_and_backward(op: &Op, x: &Tensor) -> (Graph, Vec<usize>) {
    let out = op.meta(&[x.meta()]).unwrap()[0].shape.clone();
    let mut g = Graph::new();
    let xn = g.placeholder("x", x.meta());
    let gn = g.placeholder("grad", TensorMeta::new(out.clone(), x.dtype()));
    let pool = g.call_function(op.clone(), &[&xn]).unwrap();
    let indices = g.getitem(&pool, 1).unwrap();
    let nd = x.ndim();
    let input_size = [x.shape()[nd - 2], x.shape()[nd - 1]];
    let dx = g
        .call_function(
            Op::Pool(PoolOp::MaxPool2dBackward {
                input_size,
                window: None,
            }),
            &[&gn, &indices],
        )
        .unwrap();
    g.output(&[&dx]).unwrap();
    (g, out)
}

#[test]
fn max_pool_backward_from_saved_indices_on_emulated_ptx_equals_the_interpreter_and_eager() {
    let mut copies = 0;
    for dtype in [DType::F32, DType::F64] {
        for (kernel, stride, padding, dilation, ceil) in WINDOWS {
            let op = Op::Pool(PoolOp::max_pool2d(kernel, stride, padding, dilation, ceil));
            for shape in [&[2, 2, 7, 9][..], &[3, 6, 5], &[1, 2, 8, 6]] {
                if op.meta(&[TensorMeta::new(shape.to_vec(), dtype)]).is_err() {
                    continue;
                }
                let x = tied(shape, dtype);
                let (graph, out) = pool_and_backward(&op, &x);
                // Gradients of small integers, infinities and NaN: sums in any order agree.
                let g = tied(&out, dtype)
                    .transpose(0, 1)
                    .unwrap()
                    .contiguous()
                    .unwrap();
                let g = Tensor::from_vec(g.to_vec_f64().unwrap(), &out)
                    .unwrap()
                    .to_dtype(dtype)
                    .unwrap();
                let inputs = [x.clone(), g.clone()];
                let layouts: Vec<_> = inputs.iter().map(|t| t.layout()).collect();
                let program = tessera_kernel::lower(&graph, &layouts).unwrap();
                assert!(program.fallbacks.is_empty(), "{program}");
                copies += program
                    .kernels()
                    .filter(|k| k.name.ends_with("_copy"))
                    .count();
                if let Some(ptxas) = common::ptxas() {
                    for k in program.kernels() {
                        let r = tessera_cuda::render(k, &tessera_cuda::PtxTarget::SM80).unwrap();
                        common::assemble(&ptxas, &r.name, &r.ptx, &[80, 90]);
                    }
                }
                let want = run_program(&program, &NoEnvironment, &Interpreter, &inputs).unwrap();
                let got = run_program(&program, &NoEnvironment, &EmulatedPtx::default(), &inputs)
                    .unwrap();
                assert_eq!(bits(&got[0]), bits(&want[0]), "emulated PTX\n{program}");
                let pooled = op.apply(&[&x]).unwrap();
                let backward = Op::Pool(PoolOp::MaxPool2dBackward {
                    input_size: [shape[shape.len() - 2], shape[shape.len() - 1]],
                    window: None,
                });
                let eager = backward.apply(&[&g, &pooled[1]]).unwrap();
                assert_eq!(bits(&want[0]), bits(&eager[0]), "interpreter vs eager");
                // The indices as an input: the sum over the plane.
                agrees(backward, &[g, pooled[1].clone()], 1);
            }
        }
    }
    assert!(copies > 0, "no grid overhung its input");
}

/// `(input shape, output size)` of adaptive pooling: uneven bins (5 -> 3, 7 -> 4, 10 -> 3),
/// more bins than elements (3 -> 5), 1 -> 1 and bins that tile.
const ADAPTIVE: [(&[usize], [usize; 2]); 5] = [
    (&[2, 2, 5, 7], [3, 4]),
    (&[3, 10, 3], [3, 5]),
    (&[1, 2, 7, 6], [4, 4]),
    (&[2, 1, 8], [1, 3]),
    (&[1, 3, 6, 4], [3, 2]),
];

#[test]
fn adaptive_pooling_and_its_backward_on_emulated_ptx_equal_the_interpreter_and_eager() {
    for dtype in [DType::F32, DType::F64] {
        for (shape, output_size) in ADAPTIVE {
            let x = tied(shape, dtype);
            let nd = shape.len();
            let inputs = if nd == 4 {
                vec![x.clone(), x.transpose(2, 3).unwrap()]
            } else {
                vec![x.clone()]
            };
            for x in inputs {
                let avg = Op::Pool(PoolOp::AdaptiveAvgPool2d { output_size });
                agrees(avg, std::slice::from_ref(&x), 1);
                let max = Op::Pool(PoolOp::AdaptiveMaxPool2d { output_size });
                agrees(max, std::slice::from_ref(&x), 2);
            }
            let mut out = shape[..nd - 2].to_vec();
            out.extend(output_size);
            let input_size = [shape[nd - 2], shape[nd - 1]];
            let g = tied(&out, dtype);
            let backward = Op::Pool(PoolOp::AdaptiveAvgPool2dBackward { input_size });
            agrees(backward, &[g], 1);
        }
    }
}

#[test]
fn overlapping_average_pool_backward_on_emulated_ptx_equals_the_interpreter_and_eager() {
    // `(kernel, stride, padding, count_include_pad, ceil_mode)` over a 7 x 9 plane:
    // overlapping, skipping and counted-padding windows (the residue grid, and its packing
    // copy), then windows of different divisors (padding not counted, ceil mode); half
    // gradients summed in f32.
    for dtype in [DType::F32, DType::F64, DType::F16, DType::BF16] {
        for (kernel, stride, padding, count_include_pad, ceil_mode) in [
            ([3, 3], [2, 2], [0, 0], false, false),
            ([2, 2], [3, 3], [0, 0], false, false),
            ([3, 2], [1, 1], [1, 0], true, false),
            ([3, 3], [2, 2], [1, 1], false, false),
            ([3, 2], [2, 2], [1, 0], false, true),
            ([3, 3], [2, 2], [1, 1], true, true),
        ] {
            let params = tessera_tensor::op::Pool2dParams {
                kernel,
                stride,
                padding,
                dilation: [1, 1],
                ceil_mode,
            };
            let forward = Op::Pool(PoolOp::AvgPool2d {
                params,
                count_include_pad,
            });
            let out = forward
                .meta(&[TensorMeta::new(vec![2, 2, 7, 9], dtype)])
                .unwrap()[0]
                .shape
                .clone();
            let backward = Op::Pool(PoolOp::AvgPool2dBackward {
                params,
                count_include_pad,
                input_size: [7, 9],
            });
            agrees(backward, &[tied(&out, dtype)], 1);
        }
    }
}

#[test]
fn average_pools_of_border_divisors_on_emulated_ptx_equal_the_interpreter_and_eager() {
    // `(kernel, stride, padding, count_include_pad, shape)`: ceil-mode windows past the
    // padding divide by their extent inside the padded input (a 2-D pool, a 1-D one); 7 taps
    // with padding 3 over 8 rows have more border divisors than selects and count them.
    for dtype in [DType::F32, DType::F64] {
        for (kernel, stride, padding, count_include_pad, shape) in [
            ([3, 3], [2, 2], [1, 1], true, &[2, 2, 8, 8][..]),
            ([1, 4], [1, 3], [0, 2], true, &[3, 1, 8]),
            ([7, 3], [1, 2], [3, 1], false, &[1, 2, 8, 6]),
        ] {
            let pool = PoolOp::avg_pool2d(kernel, stride, padding, true, count_include_pad);
            agrees(Op::Pool(pool), &[tied(shape, dtype)], 1);
        }
    }
}

#[test]
fn training_through_adaptive_max_pooling_runs_on_emulated_ptx() {
    // The gradient reads the indices adaptive max pooling saved (the sum over the plane).
    for dtype in [DType::F32, DType::F64] {
        for (shape, output_size) in ADAPTIVE {
            let x = tied(shape, dtype);
            let op = Op::Pool(PoolOp::AdaptiveMaxPool2d { output_size });
            let (graph, out) = pool_and_backward(&op, &x);
            let g = Tensor::from_vec(
                (0..out.iter().product::<usize>())
                    .map(|i| i as f64 * 0.5)
                    .collect(),
                &out,
            )
            .unwrap()
            .to_dtype(dtype)
            .unwrap();
            let inputs = [x.clone(), g.clone()];
            let layouts: Vec<_> = inputs.iter().map(|t| t.layout()).collect();
            let program = tessera_kernel::lower(&graph, &layouts).unwrap();
            assert!(program.fallbacks.is_empty(), "{program}");
            if let Some(ptxas) = common::ptxas() {
                for k in program.kernels() {
                    let r = tessera_cuda::render(k, &tessera_cuda::PtxTarget::SM80).unwrap();
                    common::assemble(&ptxas, &r.name, &r.ptx, &[80, 90]);
                }
            }
            let got =
                run_program(&program, &NoEnvironment, &EmulatedPtx::default(), &inputs).unwrap();
            let pooled = op.apply(&[&x]).unwrap();
            let nd = shape.len();
            let backward = Op::Pool(PoolOp::MaxPool2dBackward {
                input_size: [shape[nd - 2], shape[nd - 1]],
                window: None,
            });
            let eager = backward.apply(&[&g, &pooled[1]]).unwrap();
            assert_eq!(
                bits(&got[0]),
                bits(&eager[0]),
                "emulated PTX vs eager\n{program}"
            );
        }
    }
}

#[test]
fn reductions_and_softmax_of_a_0d_tensor_on_emulated_ptx_equal_eager() {
    for dtype in [DType::F32, DType::F64] {
        for v in [1.5, -0.0, f64::INFINITY, f64::NAN] {
            let x = Tensor::from_vec(vec![v], &[])
                .unwrap()
                .to_dtype(dtype)
                .unwrap();
            for kind in [
                ReduceKind::Sum,
                ReduceKind::Mean,
                ReduceKind::Amax,
                ReduceKind::Amin,
                ReduceKind::Var { correction: 0 },
                ReduceKind::Std { correction: 0 },
                ReduceKind::LogSumExp,
            ] {
                // Eager logsumexp ignores NaN in its maximum, the kernels do not (see
                // runtime/cpu/tests/scalar_reductions.rs).
                if kind == ReduceKind::LogSumExp && v.is_nan() {
                    continue;
                }
                let op = Op::Reduce(ReduceOp {
                    kind,
                    dims: vec![],
                    keepdim: false,
                });
                agrees(op, std::slice::from_ref(&x), 1);
            }
            for log in [false, true] {
                agrees(Op::Softmax { dim: 0, log }, std::slice::from_ref(&x), 1);
            }
        }
    }
}

#[test]
fn max_pool_with_indices_adaptive_pooling_and_0d_softmax_run_as_eager_cuda_ops() {
    crate::eager_common::backend();
    let x = tied(&[2, 3, 6, 6], DType::F32);
    let op = Op::Pool(PoolOp::max_pool2d([3, 3], [2, 2], [1, 1], [1, 1], false));
    let on_device = x.to_device(Device::Cuda(0)).unwrap();
    let got = op.apply(&[&on_device]).unwrap();
    let want = op.apply(&[&x]).unwrap();
    for (g, w) in got.iter().zip(&want) {
        assert_eq!(g.device(), Device::Cuda(0));
        let back = g.to_device(Device::Cpu).unwrap();
        assert_eq!(bits(&back), bits(w));
        assert_eq!(back.dtype(), w.dtype());
    }
    // Max pooling's backward from the indices the device saved (an input of its one-op
    // graph): without windows the sum over the plane, with the windows autograd gives it the
    // residue grid; in f32 and f64.
    let params = tessera_tensor::op::Pool2dParams {
        kernel: [3, 3],
        stride: [2, 2],
        padding: [1, 1],
        dilation: [1, 1],
        ceil_mode: false,
    };
    for (dtype, window) in [
        (DType::F32, None),
        (DType::F64, None),
        (DType::F32, Some(params)),
        (DType::F64, Some(params)),
    ] {
        let x = tied(&[2, 3, 6, 6], dtype);
        let pooled = op.apply(&[&x.to_device(Device::Cuda(0)).unwrap()]).unwrap();
        let grad = tied(&pooled[0].shape(), dtype);
        let backward = Op::Pool(PoolOp::MaxPool2dBackward {
            input_size: [6, 6],
            window,
        });
        let got = backward
            .apply(&[&grad.to_device(Device::Cuda(0)).unwrap(), &pooled[1]])
            .unwrap();
        let indices = pooled[1].to_device(Device::Cpu).unwrap();
        let want = backward.apply(&[&grad, &indices]).unwrap();
        assert_eq!(got[0].device(), Device::Cuda(0));
        assert_eq!(
            bits(&got[0].to_device(Device::Cpu).unwrap()),
            bits(&want[0])
        );
    }
    // Adaptive pooling with uneven bins and its average's backward.
    let x = tied(&[2, 3, 7, 5], DType::F64);
    let on_device = x.to_device(Device::Cuda(0)).unwrap();
    let grad = tied(&[2, 3, 4, 3], DType::F64);
    for (op, inputs, device_inputs) in [
        (
            Op::Pool(PoolOp::AdaptiveAvgPool2d {
                output_size: [4, 3],
            }),
            vec![x.clone()],
            vec![on_device.clone()],
        ),
        (
            Op::Pool(PoolOp::AdaptiveMaxPool2d {
                output_size: [4, 3],
            }),
            vec![x.clone()],
            vec![on_device],
        ),
        (
            Op::Pool(PoolOp::AdaptiveAvgPool2dBackward { input_size: [7, 5] }),
            vec![grad.clone()],
            vec![grad.to_device(Device::Cuda(0)).unwrap()],
        ),
    ] {
        let got = op.apply(&device_inputs.iter().collect::<Vec<_>>()).unwrap();
        let want = op.apply(&inputs.iter().collect::<Vec<_>>()).unwrap();
        assert_eq!(got.len(), want.len());
        for (g, w) in got.iter().zip(&want) {
            assert_eq!(g.device(), Device::Cuda(0));
            let back = g.to_device(Device::Cpu).unwrap();
            assert_eq!((bits(&back), back.dtype()), (bits(w), w.dtype()), "{op:?}");
        }
    }
    let s = Tensor::from_vec(vec![0.75f32], &[]).unwrap();
    let op = Op::Softmax { dim: 0, log: true };
    let got = op.apply(&[&s.to_device(Device::Cuda(0)).unwrap()]).unwrap();
    let want = op.apply(&[&s]).unwrap();
    assert_eq!(
        bits(&got[0].to_device(Device::Cpu).unwrap()),
        bits(&want[0])
    );
}
