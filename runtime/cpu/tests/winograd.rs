//! Winograd convolution calls in generated kernels: a 3x3 stride-1 convolution lowered with
//! [`WinogradPolicy::Always`] reads its weights transformed from a derived slot and fuses
//! bias, ReLU and residual add as the eager-kernel call does; interpreted and compiled runs
//! equal eager execution (f64 to rounding, f32 within the F(4x4) bound relative to the
//! outputs' scale) over random batches, channels, odd sizes and padding. Under `Auto` the
//! cost rule picks Winograd for wide layers only, and records why.

use crate::common;

use common::{Builder, eager};
use proptest::prelude::*;
use tessera_cpu::JitProgram;
use tessera_kernel::{
    ConvAlgorithm, Interpreter, LowerOptions, NoEnvironment, Program, SlotSource, WinogradPolicy,
    lower_with, run_program,
};
use tessera_tensor::op::{BinaryOp, ConvOp, ConvParams, UnaryOp, WinogradTile};
use tessera_tensor::{DType, Op, Tensor};

/// `[relu](conv2d(x, w [, b]) [+ residual])` for input `[n, c, h, w]`, `out` channels.
#[allow(clippy::too_many_arguments)] // one flag per epilogue part
fn conv_chain(
    dtype: DType,
    (n, c, h, w): (usize, usize, usize, usize),
    out: usize,
    pad: usize,
    bias: bool,
    residual: bool,
    relu: bool,
) -> Builder {
    let params = ConvParams::conv2d([1, 1], [pad, pad], [1, 1], 1);
    let mut b = Builder::new(dtype, false);
    let x = b.input(&[n, c, h, w], false);
    let k = b.input(&[out, c, 3, 3], false);
    let mut args = vec![x, k];
    if bias {
        args.push(b.input(&[out], false));
    }
    let refs: Vec<_> = args.iter().collect();
    let mut y = b.call(Op::Conv(ConvOp::Forward { params, bias }), &refs);
    if residual {
        let shape = b.shape(&y);
        let r = b.input(&shape, false);
        y = b.call(Op::Binary(BinaryOp::Add), &[&y, &r]);
    }
    if relu || !residual {
        // A convolution with no elementwise op after it runs its eager kernel.
        y = b.call(Op::Unary(UnaryOp::Relu), &[&y]);
    }
    b.graph.output(&[&y]).unwrap();
    b
}

fn lowered(b: &Builder, winograd: WinogradPolicy) -> Program {
    let layouts: Vec<_> = b.inputs.iter().map(|t| t.layout()).collect();
    let options = LowerOptions {
        winograd,
        ..LowerOptions::default()
    };
    lower_with(&b.graph, &layouts, options).unwrap()
}

/// The largest difference from `expected`, relative to `expected`'s largest magnitude.
fn relative_error(expected: &Tensor, got: &Tensor) -> f64 {
    let (e, g) = (expected.to_vec_f64().unwrap(), got.to_vec_f64().unwrap());
    assert_eq!(e.len(), g.len());
    let scale = e.iter().fold(1e-30f64, |m, v| m.max(v.abs()));
    e.iter()
        .zip(&g)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f64::max)
        / scale
}

/// Runs the chain lowered with `tile` through the interpreter and the JIT (twice, the second
/// call reusing the derived weights) against eager execution.
fn agrees(b: &Builder, tile: WinogradTile, tol: f64) -> Result<(), TestCaseError> {
    let program = lowered(b, WinogradPolicy::Always(tile));
    prop_assert_eq!(program.kernels().count(), 1, "{}", program);
    prop_assert!(
        program
            .kernels()
            .all(|k| k.conv.as_ref().map(|c| c.algorithm) == Some(ConvAlgorithm::Winograd(tile))),
        "{}",
        program
    );
    prop_assert!(
        program
            .slots
            .iter()
            .any(|s| matches!(s.source, SlotSource::Derived { .. })),
        "{}",
        program
    );
    let expected = eager(&b.graph, &b.inputs);
    let jit = JitProgram::compile(&program).unwrap();
    let runs = [
        run_program(&program, &NoEnvironment, &Interpreter, &b.inputs).unwrap(),
        run_program(&program, &NoEnvironment, &jit, &b.inputs).unwrap(),
    ];
    for got in &runs {
        let err = relative_error(&expected[0], &got[0]);
        prop_assert!(err <= tol, "{tile}: error {err:e} > {tol:e}\n{program}");
    }
    Ok(())
}

/// The f32 bound of F(4x4,3x3) (and F(2x2), which is tighter) relative to the outputs'
/// largest magnitude, as in the tensor crate's Winograd tests.
const F32_TOLERANCE: f64 = 1e-5;
const F64_TOLERANCE: f64 = 1e-13;

fn shapes() -> impl Strategy<Value = ((usize, usize, usize, usize), usize, usize)> {
    (
        1usize..4,
        1usize..9,
        1usize..14,
        1usize..14,
        1usize..9,
        0usize..2,
    )
        .prop_filter_map(
            "the padded input holds the kernel",
            |(n, c, h, w, out, pad)| {
                (h + 2 * pad >= 3 && w + 2 * pad >= 3).then_some(((n, c, h, w), out, pad))
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn winograd_kernels_equal_eager_in_f32_with_any_epilogue(
        (input, out, pad) in shapes(),
        (bias, residual, relu) in (any::<bool>(), any::<bool>(), any::<bool>()),
    ) {
        let b = conv_chain(DType::F32, input, out, pad, bias, residual, relu);
        for tile in [WinogradTile::F2x2, WinogradTile::F4x4] {
            agrees(&b, tile, F32_TOLERANCE)?;
        }
    }

    #[test]
    fn winograd_kernels_equal_eager_in_f64(
        (input, out, pad) in shapes(),
        (bias, residual) in (any::<bool>(), any::<bool>()),
    ) {
        let b = conv_chain(DType::F64, input, out, pad, bias, residual, true);
        for tile in [WinogradTile::F2x2, WinogradTile::F4x4] {
            agrees(&b, tile, F64_TOLERANCE)?;
        }
    }
}

#[test]
fn a_changed_weight_is_transformed_again_before_the_next_run() {
    let b = conv_chain(DType::F32, (2, 4, 9, 7), 5, 1, true, false, true);
    let program = lowered(&b, WinogradPolicy::Always(WinogradTile::F4x4));
    let jit = JitProgram::compile(&program).unwrap();
    let plan = tessera_kernel::MemoryPlan::new(&program);
    let mut ws = tessera_kernel::Workspace::new(&program, &plan);
    let run = |ws: &mut tessera_kernel::Workspace, inputs: &[Tensor]| {
        tessera_kernel::run_planned(&program, &plan, ws, &NoEnvironment, &jit, inputs, None)
            .unwrap()
    };
    let first = run(&mut ws, &b.inputs);
    assert!(relative_error(&eager(&b.graph, &b.inputs)[0], &first[0]) <= F32_TOLERANCE);
    // The same weight tensor written in place: the kept transform is stale and is redone.
    b.inputs[1].mul_scalar_(-2.0).unwrap();
    let second = run(&mut ws, &b.inputs);
    let expected = eager(&b.graph, &b.inputs);
    assert!(relative_error(&expected[0], &second[0]) <= F32_TOLERANCE);
    assert!(
        relative_error(&first[0], &second[0]) > 0.1,
        "the output did not change"
    );
}

#[test]
fn auto_picks_winograd_for_wide_layers_and_the_eager_kernel_for_narrow_ones() {
    let wide = conv_chain(DType::F32, (1, 64, 28, 28), 64, 1, true, false, true);
    let program = lowered(&wide, WinogradPolicy::Auto);
    let choice = &program.convolutions[0];
    assert_eq!(
        choice.algorithm,
        ConvAlgorithm::Winograd(WinogradTile::F4x4),
        "{program}"
    );
    assert!(choice.reason.contains("estimated"), "{choice}");
    assert!(
        program.to_string().contains("winograd F(4x4,3x3)"),
        "{program}"
    );
    let narrow = conv_chain(DType::F32, (1, 16, 32, 32), 16, 1, true, false, true);
    let program = lowered(&narrow, WinogradPolicy::Auto);
    let choice = &program.convolutions[0];
    assert_eq!(choice.algorithm, ConvAlgorithm::Gemm, "{program}");
    assert!(choice.reason.contains("channels"), "{choice}");
    assert!(
        program
            .slots
            .iter()
            .all(|s| !matches!(s.source, SlotSource::Derived { .. })),
        "{program}"
    );
    // Off (the lowering's default) never transforms.
    let program = lowered(&wide, WinogradPolicy::Off);
    assert_eq!(program.convolutions[0].algorithm, ConvAlgorithm::Gemm);
}

#[test]
fn strided_convolutions_never_run_winograd() {
    let params = ConvParams::conv2d([2, 2], [1, 1], [1, 1], 1);
    let mut b = Builder::new(DType::F32, false);
    let x = b.input(&[1, 64, 16, 16], false);
    let k = b.input(&[64, 64, 3, 3], false);
    let y = b.call(
        Op::Conv(ConvOp::Forward {
            params,
            bias: false,
        }),
        &[&x, &k],
    );
    let y = b.call(Op::Unary(UnaryOp::Relu), &[&y]);
    b.graph.output(&[&y]).unwrap();
    let program = lowered(&b, WinogradPolicy::Always(WinogradTile::F4x4));
    assert_eq!(program.convolutions[0].algorithm, ConvAlgorithm::Gemm);
    assert!(program.convolutions[0].reason.contains("stride 1"));
}
