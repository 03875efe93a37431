//! A max pool whose windows tile a convolution's output, after the convolution or its ReLU,
//! is absorbed by the convolution call: one kernel over the pooled output whose call adds the
//! bias, applies the ReLU and pools ([`tessera_kernel::ConvCall::stage`]). Interpreted and
//! compiled results equal eager execution (no rounding differs) on the direct kernel's two
//! task layouts (many images, bands of rows of few images), on windows it pools with vectors
//! and without, on outputs whose last rows and columns no window covers, in f64 and on the
//! im2col path, and where the convolution reads NaN; a pooled value returned and read again is
//! stored once. Pools the call cannot apply (and a bias the call cannot read as packed) stay
//! kernels of their own.

use crate::common;

use common::{Builder, check_backends, eager, lowered};
use tessera_fx::NodeId;
use tessera_kernel::Program;
use tessera_tensor::op::{ConvOp, ConvParams, PoolOp, UnaryOp, ViewOp};
use tessera_tensor::{DType, Op, Tensor};

/// `max_pool2d(relu?(conv2d(x, w, b)))` for `x` `[n, c, h, w]`, `out` channels of `k x k`.
struct Case {
    dtype: DType,
    input: [usize; 4],
    out: usize,
    k: usize,
    params: ConvParams,
    relu: bool,
    pool: PoolOp,
}

impl Case {
    fn new(input: [usize; 4], out: usize, window: [usize; 2]) -> Case {
        Case {
            dtype: DType::F32,
            input,
            out,
            k: 3,
            params: ConvParams::conv2d([1, 1], [1, 1], [1, 1], 1),
            relu: true,
            pool: PoolOp::max_pool2d_values(window, window, [0, 0], [1, 1], false),
        }
    }

    fn build(&self) -> Builder {
        let mut b = Builder::new(self.dtype, false);
        let x = b.input(&self.input, false);
        let w = b.input(&[self.out, self.input[1], self.k, self.k], false);
        let bias = b.input(&[self.out], false);
        let forward = ConvOp::Forward {
            params: self.params,
            bias: true,
        };
        let mut y = b.call(Op::Conv(forward), &[&x, &w, &bias]);
        if self.relu {
            y = b.call(Op::Unary(UnaryOp::Relu), &[&y]);
        }
        let p = b.call(Op::Pool(self.pool.clone()), &[&y]);
        b.graph.output(&[&p]).unwrap();
        b
    }
}

/// The one kernel of `b`'s program applies `stage` in its call, and both backends equal
/// eager execution.
fn absorbed_agrees(b: &Builder, stage: &str) -> Program {
    let program = lowered(&b.graph, &b.inputs);
    assert_eq!(program.kernels().count(), 1, "{program}");
    assert!(program.fallbacks.is_empty(), "{program}");
    let text = program.to_string();
    assert!(text.contains(stage), "no `{stage}` in\n{program}");
    // The call computes what eager's kernels do, in the same order: no rounding differs.
    check_backends(&program, &b.inputs, &eager(&b.graph, &b.inputs), 0.0);
    program
}

#[test]
fn pool_after_relu_is_applied_by_the_call_for_many_and_few_images() {
    // 64 images: a task per image; 1 and 3 images: bands of whole windows' rows.
    for n in [64, 1, 3] {
        let case = Case::new([n, 3, 32, 32], 16, [2, 2]);
        absorbed_agrees(&case.build(), "+ buf3 then relu then max_pool 2x2");
    }
}

#[test]
fn rows_and_columns_no_window_covers_are_dropped() {
    // 9 x 11 outputs: 4 x 5 windows of 2 x 2, 3 x 3 of 3 x 3; 2 x 3 windows, a 1 x 2 one
    // (every row kept); 20 channels (a padded channel block).
    for (window, stage) in [
        ([2, 2], "max_pool 2x2"),
        ([3, 3], "max_pool 3x3"),
        ([2, 3], "max_pool 2x3"),
        ([1, 2], "max_pool 1x2"),
    ] {
        for n in [2, 5] {
            absorbed_agrees(&Case::new([n, 4, 9, 11], 20, window).build(), stage);
        }
    }
    // Vector pooling of 16 and 8 outputs at a time, with tails: 40 and 70 columns.
    for width in [40, 70] {
        absorbed_agrees(
            &Case::new([2, 2, 6, width], 8, [2, 2]).build(),
            "max_pool 2x2",
        );
    }
}

#[test]
fn strided_convolution_without_relu_in_f32_and_f64() {
    for dtype in [DType::F32, DType::F64] {
        let case = Case {
            dtype,
            relu: false,
            params: ConvParams::conv2d([2, 2], [1, 1], [1, 1], 1),
            ..Case::new([4, 16, 16, 16], 32, [2, 2])
        };
        let program = absorbed_agrees(&case.build(), "+ buf3 then max_pool 2x2");
        assert!(!program.to_string().contains("relu"), "{program}");
    }
}

#[test]
fn pointwise_convolution_pools_on_the_gemm_path() {
    let case = Case {
        k: 1,
        params: ConvParams::conv2d([1, 1], [0, 0], [1, 1], 1),
        ..Case::new([3, 8, 10, 12], 12, [2, 2])
    };
    absorbed_agrees(&case.build(), "then relu then max_pool 2x2");
}

/// `case` with input element `at` set to NaN, for every dtype.
fn with_nan(case: &Case, at: usize) -> Builder {
    let mut b = case.build();
    let mut values = b.inputs[0].to_vec_f64().unwrap();
    values[at] = f64::NAN;
    b.inputs[0] = Tensor::from_vec(values, &case.input)
        .unwrap()
        .to_dtype(case.dtype)
        .unwrap();
    b
}

#[test]
fn nan_is_zeroed_by_the_relu_and_wins_the_pool_without_it() {
    for relu in [true, false] {
        for dtype in [DType::F32, DType::F64] {
            let case = Case {
                dtype,
                relu,
                ..Case::new([2, 3, 12, 40], 8, [2, 2])
            };
            // The NaN reaches the outputs of a 3 x 3 neighbourhood in every channel: rows 5-7,
            // columns 17-19, so that some windows have it in a later tap, not the first.
            let b = with_nan(&case, 12 * 40 + 6 * 40 + 18);
            let program = absorbed_agrees(&b, "max_pool 2x2");
            let out = common::jit_run(&program, &b.inputs)[0]
                .to_vec_f64()
                .unwrap();
            assert_eq!(
                out.iter().any(|v| v.is_nan()),
                !relu,
                "relu {relu} {dtype:?}"
            );
        }
    }
}

#[test]
fn pools_the_call_cannot_apply_stay_their_own_kernel() {
    let pools = [
        // Overlapping windows, padding, and ceil mode keeping a last partial window.
        PoolOp::max_pool2d_values([3, 3], [2, 2], [0, 0], [1, 1], false),
        PoolOp::max_pool2d_values([2, 2], [2, 2], [1, 1], [1, 1], false),
        PoolOp::max_pool2d_values([2, 2], [2, 2], [0, 0], [1, 1], true),
    ];
    for pool in pools {
        let case = Case {
            pool,
            ..Case::new([2, 3, 9, 9], 8, [2, 2])
        };
        let b = case.build();
        let program = lowered(&b.graph, &b.inputs);
        assert_eq!(program.kernels().count(), 2, "{program}");
        assert!(!program.to_string().contains("max_pool 2x2"), "{program}");
        check_backends(&program, &b.inputs, &eager(&b.graph, &b.inputs), 1e-5);
    }
}

/// `relu(conv2d(x, w, bias))` (3x3, padding 1) and its 2x2 max pool, added to `b`.
fn conv_relu_pool(b: &mut Builder, [x, w, bias]: [&NodeId; 3]) -> (NodeId, NodeId) {
    let params = ConvParams::conv2d([1, 1], [1, 1], [1, 1], 1);
    let y = b.call(
        Op::Conv(ConvOp::Forward { params, bias: true }),
        &[x, w, bias],
    );
    let r = b.call(Op::Unary(UnaryOp::Relu), &[&y]);
    let pool = PoolOp::max_pool2d_values([2, 2], [2, 2], [0, 0], [1, 1], false);
    let p = b.call(Op::Pool(pool), &[&r]);
    (r, p)
}

#[test]
fn relu_read_by_another_node_is_not_pooled_by_the_call() {
    let mut b = Builder::new(DType::F32, false);
    let x = b.input(&[2, 3, 8, 8], false);
    let w = b.input(&[8, 3, 3, 3], false);
    let bias = b.input(&[8], false);
    let (r, p) = conv_relu_pool(&mut b, [&x, &w, &bias]);
    b.graph.output(&[&p, &r]).unwrap();
    let program = lowered(&b.graph, &b.inputs);
    assert!(!program.to_string().contains("then relu"), "{program}");
    check_backends(&program, &b.inputs, &eager(&b.graph, &b.inputs), 1e-5);
}

#[test]
fn pool_returned_and_read_again_is_stored_once_by_the_call() {
    let mut b = Builder::new(DType::F32, false);
    let x = b.input(&[3, 3, 10, 12], false);
    let w = b.input(&[8, 3, 3, 3], false);
    let bias = b.input(&[8], false);
    let (_, p) = conv_relu_pool(&mut b, [&x, &w, &bias]);
    let again = b.call(Op::Unary(UnaryOp::Tanh), &[&p]);
    b.graph.output(&[&p, &again]).unwrap();
    let program = lowered(&b.graph, &b.inputs);
    assert!(
        program.to_string().contains("then relu then max_pool 2x2"),
        "{program}"
    );
    check_backends(&program, &b.inputs, &eager(&b.graph, &b.inputs), 1e-6);
}

#[test]
fn strided_bias_is_added_by_the_epilogue_not_the_call() {
    // The bias is column 1 of an `[8, 2]` input: a `[8]` view of stride 2, offset 1.
    let mut b = Builder::new(DType::F32, false);
    let x = b.input(&[2, 3, 8, 8], false);
    let w = b.input(&[8, 3, 3, 3], false);
    let pairs = b.input(&[8, 2], false);
    let columns = b.call(Op::View(ViewOp::Permute(vec![1, 0])), &[&pairs]);
    let narrow = ViewOp::Narrow {
        dim: 0,
        start: 1,
        len: 1,
    };
    let column = b.call(Op::View(narrow), &[&columns]);
    let bias = b.call(Op::View(ViewOp::Reshape(vec![8])), &[&column]);
    let (_, p) = conv_relu_pool(&mut b, [&x, &w, &bias]);
    b.graph.output(&[&p]).unwrap();
    let program = lowered(&b.graph, &b.inputs);
    assert!(!program.to_string().contains("max_pool 2x2"), "{program}");
    check_backends(&program, &b.inputs, &eager(&b.graph, &b.inputs), 1e-5);
}
