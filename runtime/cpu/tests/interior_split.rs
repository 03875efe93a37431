//! The innermost loop of a kernel of guarded loads split around each row's interior
//! ([`tessera_kernel::interior`]): padded pools whose interiors start and end at every
//! alignment modulo 4 and 16 (strides 1 to 3, empty interiors, interiors of a whole row),
//! max (NaN and infinities included) and average pools both ways of counting, in f32 (vector
//! code) and f64 (scalar code), run eagerly, by the kernel-IR interpreter and by the JIT, bit
//! for bit; and 1-D, 2-D and 3-D dilated windows written in kernel IR, interpreter against JIT,
//! their outputs written between sentinels no point may overwrite.

use crate::common::{Builder, check_backends, eager, lowered};
use crate::padded_pooling::{eager_refuses, generated_with_guards, pool_alone};
use tessera_cpu::JitProgram;
use tessera_kernel::{
    BinaryFn, Bound, BufferPtr, BufferRole, CompareFn, Expr, IndexExpr, Interpreter, Kernel,
    KernelBuilder, KernelExecutor, Program, ScalarType, Slot, SlotId, SlotSource, SlotView, Step,
};
use tessera_tensor::op::PoolOp;
use tessera_tensor::{DType, Layout, Tensor, TensorMeta};

/// Every `seventh` element of `t` NaN and every `eleventh` +inf (when given), the rest as is.
fn with_specials(t: &Tensor, seventh: usize, eleventh: usize) -> Tensor {
    let mut values = t.to_dtype(DType::F64).unwrap().to_vec::<f64>().unwrap();
    for (i, v) in values.iter_mut().enumerate() {
        if i % seventh == 3 {
            *v = f64::NAN;
        } else if i % eleventh == 5 {
            *v = f64::INFINITY;
        }
    }
    Tensor::from_vec(values, &t.shape())
        .unwrap()
        .to_dtype(t.dtype())
        .unwrap()
}

/// Pools `pool` alone over `shape` in `dtype`, their results equal to eager's bit for bit on
/// every backend, with NaN and infinities in the input of a max pool.
fn pool_agrees(dtype: DType, shape: &[usize], pool: PoolOp) {
    let max = matches!(pool, PoolOp::MaxPool2dValues(_));
    let mut b: Builder = pool_alone(dtype, shape, pool, false);
    if max {
        b.inputs[0] = with_specials(&b.inputs[0], 29, 31);
    }
    generated_with_guards(&b, 0.0);
}

#[test]
fn one_row_pools_whose_interiors_start_and_end_at_every_alignment_equal_eager() {
    // Windows of `2p + 1` taps with padding `p` along a row: the interior starts at
    // `ceil(p / stride)` (0 to 16) and ends at `ceil((width - p) / stride)`, the widths
    // chosen so that the interior's length runs through every residue modulo 16 and 4, down
    // to empty.
    for dtype in [DType::F32, DType::F64] {
        for stride in 1..=3 {
            for p in 0..=16usize {
                for width in [
                    (p + 1).max(2),
                    2 * p + 5 + (3 * p) % 16,
                    2 * p + 22 + (5 * p) % 16,
                ] {
                    let k = 2 * p + 1;
                    let max = PoolOp::max_pool2d_values([1, k], [1, stride], [0, p], [1, 1], false);
                    let count_include_pad = p % 2 == 0;
                    let avg =
                        PoolOp::avg_pool2d([1, k], [1, stride], [0, p], false, count_include_pad);
                    if p == 0 {
                        // Unpadded windows have no guards, but ceil mode's cut short ones.
                        let ceil = PoolOp::max_pool2d_values([1, 2], [1, 2], [0, 0], [1, 1], true);
                        if width % 2 == 1 {
                            pool_agrees(dtype, &[1, 3, 2, width], ceil);
                        }
                        continue;
                    }
                    pool_agrees(dtype, &[1, 3, 2, width], max);
                    pool_agrees(dtype, &[1, 3, 2, width], avg);
                }
            }
        }
    }
}

#[test]
fn two_d_pools_with_row_padding_only_split_whole_rows_or_none() {
    // Padding along rows alone: the column is not guarded, so a row's interior is all of it
    // (rows inside the input) or empty (the first and last rows, in the padding).
    for dtype in [DType::F32, DType::F64] {
        for width in [4, 7, 16, 21, 35] {
            let pool = PoolOp::max_pool2d_values([3, 2], [2, 1], [1, 0], [1, 1], false);
            pool_agrees(dtype, &[2, 2, 9, width], pool);
            let avg = PoolOp::avg_pool2d([3, 3], [1, 2], [1, 0], true, false);
            pool_agrees(dtype, &[1, 2, 6, width], avg);
        }
    }
}

#[test]
fn strided_dilated_and_stem_pools_split_equal_eager() {
    // ResNet's stem pool on a few shapes (interior `1..n`), dilated windows, stride 3, ceil
    // mode, a window wider than the row (every interior empty), and transposed inputs.
    let pools = [
        PoolOp::max_pool2d_values([3, 3], [2, 2], [1, 1], [1, 1], false),
        PoolOp::max_pool2d_values([3, 3], [2, 2], [2, 2], [2, 2], false),
        PoolOp::max_pool2d_values([3, 5], [3, 3], [1, 2], [1, 1], true),
        PoolOp::max_pool2d_values([3, 3], [1, 1], [1, 1], [1, 1], false),
        PoolOp::avg_pool2d([3, 3], [2, 2], [1, 1], true, true),
        PoolOp::avg_pool2d([3, 5], [1, 3], [1, 2], false, false),
    ];
    for dtype in [DType::F32, DType::F64] {
        for pool in &pools {
            for shape in [
                &[1, 4, 14, 14][..],
                &[2, 3, 9, 37],
                &[1, 2, 5, 64],
                &[1, 1, 3, 3],
            ] {
                if eager_refuses(shape, pool) {
                    continue;
                }
                pool_agrees(dtype, shape, pool.clone());
                let mut b = pool_alone(dtype, shape, pool.clone(), true);
                b.inputs[0] = with_specials(&b.inputs[0], 13, 17);
                let program = lowered(&b.graph, &b.inputs);
                let expected = eager(&b.graph, &b.inputs);
                check_backends(&program, &b.inputs, &expected, 0.0);
            }
        }
    }
}

/// One axis of a window written in kernel IR: `input` elements, `kernel` taps `dilation`
/// apart, windows `stride` apart, `pad` elements of padding on each side.
#[derive(Clone, Copy)]
struct Axis {
    input: usize,
    kernel: usize,
    stride: usize,
    pad: usize,
    dilation: usize,
}

impl Axis {
    fn output(&self) -> usize {
        (self.input + 2 * self.pad - self.dilation * (self.kernel - 1) - 1) / self.stride + 1
    }
}

/// A kernel over `[2, out...]` pooling 2 channels of `[in...]` along `axes` (every tap a
/// guarded load): the NaN-propagating maximum of its taps (`max`, padding -inf) or their sum
/// (padding -0.0), scheduled; with its input and output lengths.
fn window_kernel(axes: &[Axis], ty: ScalarType, max: bool) -> (Kernel, usize, usize) {
    let d = axes.len();
    let ins: Vec<usize> = axes.iter().map(|a| a.input).collect();
    let outs: Vec<usize> = axes.iter().map(Axis::output).collect();
    let in_strides = tessera_tensor::layout::contiguous_strides(&ins);
    let plane: usize = ins.iter().product();
    let out_plane: usize = outs.iter().product();
    let mut domain = vec![2];
    domain.extend(&outs);
    let mut b = KernelBuilder::new("window", domain);
    let x = b.buffer(BufferRole::Input, ty, 2 * plane);
    let y = b.buffer(BufferRole::Output, ty, 2 * out_plane);
    let taps: usize = axes.iter().map(|a| a.kernel).product();
    let mut acc = None;
    for t in 0..taps {
        let mut rest = t;
        let mut bounds = Vec::new();
        for (a, axis) in axes.iter().enumerate().rev() {
            let k = rest % axis.kernel;
            rest /= axis.kernel;
            let mut strides = vec![0; d + 1];
            strides[a + 1] = axis.stride;
            bounds.insert(
                0,
                Bound {
                    coord: IndexExpr {
                        offset: k * axis.dilation,
                        strides,
                    },
                    pad: axis.pad,
                    len: axis.input,
                    stride: in_strides[a],
                },
            );
        }
        let mut index_strides = vec![0; d + 1];
        index_strides[0] = plane;
        let fill = if max { f64::NEG_INFINITY } else { -0.0 };
        let v = b.push(
            ty,
            Expr::LoadIf {
                buffer: x,
                index: IndexExpr {
                    offset: 0,
                    strides: index_strides,
                },
                bounds,
                fill,
            },
        );
        acc = Some(match acc {
            None => v,
            Some(best) if max => {
                let gt = b.push(ScalarType::Bool, Expr::Compare(CompareFn::Gt, v, best));
                let bigger = b.push(
                    ty,
                    Expr::Select {
                        cond: gt,
                        a: v,
                        b: best,
                    },
                );
                let nan = b.push(ScalarType::Bool, Expr::Compare(CompareFn::Ne, v, v));
                b.push(
                    ty,
                    Expr::Select {
                        cond: nan,
                        a: v,
                        b: bigger,
                    },
                )
            }
            Some(sum) => b.push(ty, Expr::Binary(BinaryFn::Add, sum, v)),
        });
    }
    let mut out_strides = vec![out_plane];
    out_strides.extend(tessera_tensor::layout::contiguous_strides(&outs));
    b.store(
        y,
        IndexExpr {
            offset: 0,
            strides: out_strides,
        },
        acc.expect("a window has taps"),
    );
    let mut kernel = b.finish();
    tessera_kernel::schedule(&mut kernel);
    kernel.verify().unwrap();
    (kernel, 2 * plane, 2 * out_plane)
}

/// A program of the one kernel `kernel`, reading one input of `inputs` elements and writing
/// one output of `outputs`, both of `dtype`.
fn one_kernel_program(kernel: Kernel, dtype: DType, inputs: usize, outputs: usize) -> Program {
    let slot = |name: &str, len: usize, source| Slot {
        name: name.into(),
        meta: TensorMeta::new(vec![len], dtype),
        source,
        layout: Layout::contiguous(&[len]),
    };
    Program {
        slots: vec![
            slot("x", inputs, SlotSource::Input(0)),
            slot("y", outputs, SlotSource::Step),
        ],
        steps: vec![Step::Kernel {
            kernel,
            inputs: vec![SlotId::from_index(0)],
            outputs: vec![SlotId::from_index(1)],
            nodes: vec![],
        }],
        outputs: vec![SlotView {
            slot: SlotId::from_index(1),
            views: vec![],
        }],
        fallbacks: vec![],
        convolutions: vec![],
        launch_groups: vec![],
    }
}

/// Elements of sentinel written on each side of an output.
const GUARD: usize = 16;

/// Runs `kernel` on input `xs` and the `outputs` elements of `ys` after its first [`GUARD`]
/// (both of the kernel's element type).
fn execute_into<T>(
    executor: &dyn KernelExecutor,
    kernel: &tessera_kernel::Kernel,
    xs: &mut [T],
    ys: &mut [T],
    outputs: usize,
) {
    let ty = kernel.buffers[0].ty;
    assert!(ys.len() >= GUARD + outputs);
    let buffers = [
        BufferPtr {
            ptr: xs.as_mut_ptr().cast(),
            len: xs.len(),
            ty,
        },
        BufferPtr {
            // SAFETY: `GUARD` elements into `ys`, which has `outputs` more after them.
            ptr: unsafe { ys.as_mut_ptr().add(GUARD) }.cast(),
            len: outputs,
            ty,
        },
    ];
    // SAFETY: the buffers are live, of the kernel's types and lengths, and disjoint.
    unsafe { executor.execute(0, kernel, &buffers) }.unwrap();
}

/// Runs step 0 of `program` (its one kernel) with `executor` on the elements `x` (as f64s,
/// stored as the kernel's type), its output written between sentinels, which must be left as
/// they were; the output's bits, as f64.
fn run_between_sentinels(
    executor: &dyn KernelExecutor,
    program: &Program,
    x: &[f64],
    outputs: usize,
) -> Vec<u64> {
    let Step::Kernel { kernel, .. } = &program.steps[0] else {
        unreachable!("the program is one kernel");
    };
    let ty = kernel.buffers[0].ty;
    let sentinel = 12345.0;
    let mut out = vec![sentinel; outputs + 2 * GUARD];
    if ty == ScalarType::F32 {
        let mut xs: Vec<f32> = x.iter().map(|&v| v as f32).collect();
        let mut ys: Vec<f32> = out.iter().map(|&v| v as f32).collect();
        execute_into(executor, kernel, &mut xs, &mut ys, outputs);
        out = ys.iter().map(|&v| f64::from(v)).collect();
    } else {
        execute_into(executor, kernel, &mut x.to_vec(), &mut out, outputs);
    }
    let (before, rest) = out.split_at(GUARD);
    let (values, after) = rest.split_at(outputs);
    assert!(
        before.iter().chain(after).all(|&v| v == sentinel),
        "a kernel wrote outside its output:\n{program}"
    );
    values.iter().map(|v| v.to_bits()).collect()
}

#[test]
fn one_two_and_three_d_windows_in_kernel_ir_jit_equal_interpreter() {
    let axis = |input, kernel, stride, pad, dilation| Axis {
        input,
        kernel,
        stride,
        pad,
        dilation,
    };
    let cases: Vec<Vec<Axis>> = vec![
        vec![axis(37, 5, 1, 2, 1)],
        vec![axis(41, 3, 3, 1, 2)],
        vec![axis(8, 7, 1, 6, 2)],
        // Interiors that end where their rows do, the last one where the output does.
        vec![axis(23, 2, 2, 1, 1)],
        vec![axis(9, 3, 2, 1, 1), axis(30, 3, 2, 1, 1)],
        vec![axis(5, 2, 1, 1, 3), axis(23, 4, 1, 3, 2)],
        vec![
            axis(4, 3, 1, 1, 1),
            axis(5, 3, 2, 2, 2),
            axis(19, 3, 1, 1, 1),
        ],
        vec![
            axis(3, 2, 2, 1, 1),
            axis(4, 3, 1, 1, 1),
            axis(34, 5, 3, 2, 1),
        ],
    ];
    for axes in cases {
        for (ty, dtype) in [(ScalarType::F32, DType::F32), (ScalarType::F64, DType::F64)] {
            for max in [true, false] {
                let (kernel, inputs, outputs) = window_kernel(&axes, ty, max);
                let vector = kernel.schedule.vector_width;
                let program = one_kernel_program(kernel, dtype, inputs, outputs);
                let x: Vec<f64> = (0..inputs)
                    .map(|i| match i % 23 {
                        3 => f64::NAN,
                        5 => f64::INFINITY,
                        _ => ((i * 37 % 101) as f64 - 50.0) / 8.0,
                    })
                    .collect();
                let jit = JitProgram::compile(&program).unwrap();
                assert_eq!(
                    run_between_sentinels(&Interpreter, &program, &x, outputs),
                    run_between_sentinels(&jit, &program, &x, outputs),
                    "{} axes, {dtype:?}, vector {vector}, max {max}:\n{program}",
                    axes.len()
                );
            }
        }
    }
}
