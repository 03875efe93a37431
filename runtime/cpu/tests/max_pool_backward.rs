//! Max pooling's gradient lowered from its saved i64 indices: windows that overlap, pad,
//! dilate, skip input or end in a ceil-mode partial window, 3-D and 4-D, f32 and f64,
//! transposed inputs and strided gradients, inputs full of ties (one element the argmax of
//! many windows, so the order of its additions shows) and NaN; through the kernel-IR
//! interpreter and the JIT, bit for bit against the eager kernels. Indices given as an input
//! (no forward in the graph) lower to the sum over the plane; indices outside the plane
//! match no element and write nothing.

use crate::common;

use common::{assert_bit_identical, eager, jit_run, lowered, op_graph, try_eager};
use tessera_fx::Graph;
use tessera_kernel::{Interpreter, NoEnvironment, run_program};
use tessera_tensor::op::{Pool2dParams, PoolOp};
use tessera_tensor::{DType, Op, Tensor, TensorMeta};
use tessera_testkit::exact_bits as bits;

fn window(kernel: [usize; 2], stride: [usize; 2], padding: [usize; 2]) -> Pool2dParams {
    Pool2dParams {
        kernel,
        stride,
        padding,
        dilation: [1; 2],
        ceil_mode: false,
    }
}

/// The windows checked: overlapping (ResNet's 3x3 stride 2 pad 1, stride 1), dilated,
/// ceil mode, a stride larger than the window, unequal strides and paddings.
fn windows() -> Vec<Pool2dParams> {
    vec![
        window([3, 3], [2, 2], [1, 1]),
        window([3, 3], [1, 1], [1, 1]),
        window([2, 2], [1, 1], [0, 0]),
        Pool2dParams {
            dilation: [2, 2],
            ..window([2, 3], [1, 2], [1, 1])
        },
        Pool2dParams {
            ceil_mode: true,
            ..window([3, 2], [2, 2], [1, 0])
        },
        window([2, 2], [3, 3], [0, 0]),
        window([3, 1], [2, 1], [0, 0]),
        Pool2dParams {
            dilation: [1, 3],
            ceil_mode: true,
            ..window([2, 2], [3, 2], [1, 1])
        },
    ]
}

/// Input values: mostly few distinct ones (ties), NaN and infinities at a few places, or one
/// value everywhere (`flat`: every window's first tap wins).
fn input_values(n: usize, flat: bool) -> Vec<f64> {
    (0..n)
        .map(|i| match (flat, i % 13) {
            (true, _) => 1.5,
            (false, 4) if i % 2 == 0 => f64::NAN,
            (false, 9) => f64::INFINITY,
            (false, 11) => f64::NEG_INFINITY,
            _ => (i * 5 % 3) as f64,
        })
        .collect()
}

/// Gradient values of many magnitudes, whose sums round differently in another order.
fn grad_values(n: usize) -> Vec<f64> {
    (0..n)
        .map(|i| ((i as f64 * 0.731).sin() + 0.1) * 10f64.powi((i % 7) as i32 - 3))
        .collect()
}

/// `values` as `shape` of `dtype`, stored transposed in its last two dims when `strided`.
fn tensor(values: Vec<f64>, shape: &[usize], dtype: DType, strided: bool) -> Tensor {
    let nd = shape.len();
    let t = if strided {
        let mut swapped = shape.to_vec();
        swapped.swap(nd - 2, nd - 1);
        let mut dims: Vec<usize> = (0..nd).collect();
        dims.swap(nd - 2, nd - 1);
        Tensor::from_vec(values, &swapped)
            .unwrap()
            .permute(&dims)
            .unwrap()
    } else {
        Tensor::from_vec(values, shape).unwrap()
    };
    t.to_dtype(dtype).unwrap()
}

/// `max_pool2d_with_indices(x)` with windows `p` and its backward from `grad`, returning the
/// pooled values and the input gradient.
fn max_pool_graph(x: &Tensor, p: Pool2dParams) -> (Graph, Vec<usize>) {
    let x_shape = x.shape().to_vec();
    let out = Op::Pool(PoolOp::MaxPool2d(p))
        .meta(&[TensorMeta::new(x_shape.clone(), x.dtype())])
        .unwrap()[0]
        .shape
        .clone();
    (common::max_pool_graph(&x_shape, &out, p, x.dtype()), out)
}

#[test]
fn saved_indices_give_the_eager_gradient_bit_for_bit() {
    let shapes: [&[usize]; 3] = [&[2, 3, 9, 10], &[3, 7, 8], &[1, 2, 6, 6]];
    for dtype in [DType::F32, DType::F64, DType::F16, DType::BF16] {
        for p in windows() {
            for (case, shape) in shapes.iter().enumerate() {
                let n: usize = shape.iter().product();
                let (flat, strided) = (case == 2, case == 0);
                let x = tensor(input_values(n, flat), shape, dtype, strided);
                let (graph, out) = max_pool_graph(&x, p);
                let m: usize = out.iter().product();
                let g = tensor(grad_values(m), &out, dtype, case == 1);
                let program = assert_bit_identical(&graph, &[x, g]);
                // The forward storing the indices, the backward (and its packing copy).
                assert!(program.kernels().count() <= 3, "{p:?}\n{program}");
            }
        }
    }
}

#[test]
fn grids_that_overhang_the_input_are_packed_by_a_copy() {
    let p = window([3, 3], [2, 2], [1, 1]);
    let x = tensor(
        input_values(2 * 7 * 9, false),
        &[2, 7, 9],
        DType::F32,
        false,
    );
    let (graph, out) = max_pool_graph(&x, p);
    let g = tensor(grad_values(out.iter().product()), &out, DType::F32, false);
    let program = assert_bit_identical(&graph, &[x, g]);
    let names: Vec<String> = program.kernels().map(|k| k.name.clone()).collect();
    assert_eq!(names.len(), 3, "{program}");
    assert!(names[2].ends_with("_copy"), "{names:?}");
    // An input whose sizes are multiples of the strides needs no copy.
    let x = tensor(
        input_values(2 * 8 * 10, false),
        &[2, 8, 10],
        DType::F32,
        false,
    );
    let (graph, out) = max_pool_graph(&x, p);
    let g = tensor(grad_values(out.iter().product()), &out, DType::F32, false);
    let program = assert_bit_identical(&graph, &[x, g]);
    assert_eq!(program.kernels().count(), 2, "{program}");
}

/// `max_pool2d_backward` of `grad` at `indices` (both inputs of the graph) into `size`.
fn backward_op(size: [usize; 2]) -> Op {
    Op::Pool(PoolOp::MaxPool2dBackward {
        input_size: size,
        window: None,
    })
}

#[test]
fn indices_given_as_inputs_sum_over_the_plane_bit_for_bit() {
    for dtype in [DType::F32, DType::F64, DType::F16, DType::BF16] {
        for p in windows().into_iter().take(4) {
            let x = tensor(
                input_values(2 * 3 * 7 * 6, false),
                &[2, 3, 7, 6],
                dtype,
                false,
            );
            let pooled = Op::Pool(PoolOp::MaxPool2d(p)).apply(&[&x]).unwrap();
            let indices = pooled[1].clone();
            let out = indices.shape().to_vec();
            let g = tensor(grad_values(out.iter().product()), &out, dtype, true);
            let graph = op_graph(backward_op([7, 6]), &[g.clone(), indices.clone()]);
            let program = assert_bit_identical(&graph, &[g, indices]);
            assert_eq!(program.kernels().count(), 1, "{program}");
            assert!(!program.kernels().next().unwrap().reduce.is_empty());
        }
    }
    // Many positions naming one element, in no window order.
    let indices = Tensor::from_vec(vec![5i64, 0, 5, 5, 11, 5, 0, 5, 5], &[1, 3, 3]).unwrap();
    let g = tensor(grad_values(9), &[1, 3, 3], DType::F32, false);
    let graph = op_graph(backward_op([3, 4]), &[g.clone(), indices.clone()]);
    assert_bit_identical(&graph, &[g, indices]);
}

#[test]
fn indices_given_as_inputs_with_the_windows_the_op_carries_take_the_grid_bit_for_bit() {
    // Autograd's backward op carries the forward's windows: an eager op on a device (its
    // indices an input of the one-op graph) then gathers over the covering windows, no
    // reduction over the plane.
    for dtype in [DType::F32, DType::F64] {
        for p in windows() {
            let x = tensor(
                input_values(2 * 3 * 9 * 10, false),
                &[2, 3, 9, 10],
                dtype,
                true,
            );
            let pooled = Op::Pool(PoolOp::MaxPool2d(p)).apply(&[&x]).unwrap();
            let indices = pooled[1].clone();
            let out = indices.shape().to_vec();
            let g = tensor(grad_values(out.iter().product()), &out, dtype, false);
            let op = Op::Pool(PoolOp::MaxPool2dBackward {
                input_size: [9, 10],
                window: Some(p),
            });
            let graph = op_graph(op, &[g.clone(), indices.clone()]);
            let program = assert_bit_identical(&graph, &[g, indices]);
            assert!(program.fallbacks.is_empty(), "{p:?}\n{program}");
            assert!(
                program.kernels().all(|k| k.reduce.is_empty()),
                "{p:?}: a reduction over the plane\n{program}"
            );
        }
    }
}

#[test]
fn indices_outside_the_plane_write_nothing() {
    // -1, 12 and a huge index lie outside the 3x4 plane; eager fails the op.
    let saved = vec![5i64, -1, 12, 3, i64::MAX, 5, 0, 11, 5];
    let indices = Tensor::from_vec(saved.clone(), &[1, 3, 3]).unwrap();
    let grads = grad_values(9);
    let g = tensor(grads.clone(), &[1, 3, 3], DType::F64, false);
    let graph = op_graph(backward_op([3, 4]), &[g.clone(), indices.clone()]);
    assert!(try_eager(&graph, &[g.clone(), indices.clone()]).is_err());
    let mut expected = [0.0f64; 12];
    for (&i, &v) in saved.iter().zip(&grads) {
        if (0..12).contains(&i) {
            expected[i as usize] += v;
        }
    }
    let expected: Vec<u64> = expected.iter().map(|x| x.to_bits()).collect();
    let program = lowered(&graph, &[g.clone(), indices.clone()]);
    assert!(program.fallbacks.is_empty(), "{program}");
    let inputs = [g, indices];
    let interpreted = run_program(&program, &NoEnvironment, &Interpreter, &inputs).unwrap();
    assert_eq!(bits(&interpreted[0]), expected, "interpreter\n{program}");
    assert_eq!(bits(&jit_run(&program, &inputs)[0]), expected, "JIT");
}

#[test]
fn gradients_add_in_the_eager_order_of_output_positions() {
    // One value everywhere: each window's first tap wins, so with padding 1 the corner
    // element is the argmax of four windows. f32 gradients 1, 1e8, 1, -1e8 at those four
    // positions sum to 0 in row-major order ((1 + 1e8) rounds to 1e8) and to 1 reversed.
    let p = window([3, 3], [1, 1], [1, 1]);
    let x = tensor(input_values(25, true), &[1, 5, 5], DType::F32, false);
    let (graph, out) = max_pool_graph(&x, p);
    let pattern = [[1.0, 1e8], [1.0, -1e8]];
    let grads: Vec<f64> = (0..25).map(|i| pattern[i / 5 % 2][i % 5 % 2]).collect();
    let g = tensor(grads, &out, DType::F32, false);
    let inputs = [x.clone(), g.clone()];
    assert_bit_identical(&graph, &inputs);
    let dx = &eager(&graph, &inputs)[1];
    assert_eq!(dx.to_vec_f64().unwrap()[0], 0.0, "the eager sum rounds");
    // The same through indices given as an input.
    let indices = Op::Pool(PoolOp::MaxPool2d(p)).apply(&[&x]).unwrap()[1].clone();
    let graph = op_graph(backward_op([5, 5]), &[g.clone(), indices.clone()]);
    assert_bit_identical(&graph, &[g, indices]);
}

#[test]
fn a_backward_into_another_plane_than_the_forward_pooled_sums_over_the_plane() {
    // Indices of a 6x6 plane scattered into a 7x7 one: the forward's windows do not describe
    // the result, so the lowering does not use them.
    let p = window([3, 3], [2, 2], [1, 1]);
    let x = tensor(input_values(2 * 36, false), &[2, 6, 6], DType::F64, false);
    let mut graph = Graph::new();
    let xn = graph.placeholder("x", x.meta());
    let gn = graph.placeholder("grad", TensorMeta::new(vec![2, 3, 3], DType::F64));
    let pool = graph
        .call_function(Op::Pool(PoolOp::MaxPool2d(p)), &[&xn])
        .unwrap();
    let indices = graph.getitem(&pool, 1).unwrap();
    let dx = graph
        .call_function(backward_op([7, 7]), &[&gn, &indices])
        .unwrap();
    graph.output(&[&dx]).unwrap();
    let g = tensor(grad_values(18), &[2, 3, 3], DType::F64, false);
    let program = assert_bit_identical(&graph, &[x, g]);
    let backward = program.kernels().last().unwrap();
    assert_eq!(backward.reduce, [3, 3], "{program}");
}
