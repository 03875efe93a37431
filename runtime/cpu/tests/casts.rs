//! `to_dtype` between every pair of dtypes as one generated kernel: the interpreter's and the
//! JIT's results equal the eager cast bit for bit, on the values where conversions differ
//! (NaN, infinities, negative zero, floats past an integer type's range, halfway cases, and
//! values that round differently once than twice through f64 or f32).

use crate::common;

use common::{eager, jit_run, op_graph};
use tessera_kernel::{Interpreter, NoEnvironment, Program, run_program};
use tessera_tensor::{DType, Op, Tensor};
use tessera_testkit::{cast_input, exact_bits};

/// `to_dtype(to)` of `x` lowered to one kernel, its interpreted and compiled results equal to
/// the eager cast's bits.
fn cast_agrees(x: &Tensor, to: DType) -> Program {
    let inputs = [x.clone()];
    let g = op_graph(Op::ToDType(to), &inputs);
    let program = common::lowered(&g, &inputs);
    let what = format!("{:?} -> {to:?}", x.dtype());
    assert!(program.fallbacks.is_empty(), "{what}: fell back\n{program}");
    assert_eq!(program.kernels().count(), 1, "{what}\n{program}");
    let want = eager(&g, &inputs).remove(0);
    let interpreted = run_program(&program, &NoEnvironment, &Interpreter, &inputs)
        .unwrap()
        .remove(0);
    let jitted = jit_run(&program, &inputs).remove(0);
    for (runner, got) in [("interpreter", &interpreted), ("jit", &jitted)] {
        assert_eq!(got.dtype(), to, "{what}: {runner}");
        let (g, w) = (exact_bits(got), exact_bits(&want));
        for (i, (a, b)) in g.iter().zip(&w).enumerate() {
            assert_eq!(
                a,
                b,
                "{what}: {runner} element {i} of {:?}: got {}, eager {}\n{program}",
                x.to_vec_f64().unwrap()[i],
                got.to_vec_f64().unwrap()[i],
                want.to_vec_f64().unwrap()[i]
            );
        }
    }
    program
}

#[test]
fn every_dtype_pair_converts_in_one_kernel_as_the_eager_cast() {
    for from in DType::ALL {
        let x = cast_input(from);
        for to in DType::ALL {
            if to != from {
                cast_agrees(&x, to);
            }
        }
    }
}

#[test]
fn strided_narrow_inputs_convert_in_place() {
    let x = Tensor::from_vec((0..=255u8).collect(), &[16, 16])
        .unwrap()
        .t()
        .unwrap();
    for to in [DType::I8, DType::F16, DType::I64, DType::F32] {
        cast_agrees(&x, to);
    }
}

#[test]
fn narrow_integers_are_stored_in_their_own_width() {
    let program = cast_agrees(&cast_input(DType::F64), DType::I8);
    let kernel = program.kernels().next().unwrap();
    let out = kernel.buffers.last().unwrap();
    assert_eq!(out.ty, tessera_kernel::ScalarType::I8);
}

#[test]
fn f64_to_a_half_type_rounds_through_f32() {
    // 1 + 2^-10 + 2^-11 - 2^-30 is below halfway between two f16s, but rounds to f32's
    // halfway point first; PyTorch's cast, and the eager one, give the even neighbour above.
    let x = Tensor::from_vec(
        vec![1.0 + 2f64.powi(-10) + 2f64.powi(-11) - 2f64.powi(-30)],
        &[1],
    )
    .unwrap();
    cast_agrees(&x, DType::F16);
    let y = x.to_dtype(DType::F16).unwrap().to_vec_f64().unwrap();
    assert_eq!(y, [1.0 + 2f64.powi(-9)]);
}
