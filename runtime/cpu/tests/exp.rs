//! f32 `exp` is inline code: the JIT's vector and scalar paths equal the kernel-IR
//! interpreter's `exp_f32` bit for bit on inputs across the whole f32 range (zeros, NaN,
//! infinities, subnormal and overflowing results included), and stay within the stated ulp
//! bound of eager `exp` (Rust's `f32::exp`).

use crate::common;

use common::{jit_run, lowered};
use tessera_fx::Graph;
use tessera_kernel::exp_poly::EXP_F32_MAX_ULP;
use tessera_kernel::{Interpreter, NoEnvironment, run_program};
use tessera_tensor::op::UnaryOp;
use tessera_tensor::{DType, Op, Tensor, TensorMeta};

/// Inputs spanning every exponent of both signs, and the special values; an odd count, so
/// the scalar tail runs too.
fn inputs() -> Vec<f32> {
    let mut xs: Vec<f32> = (0..=u32::MAX)
        .step_by(40_009)
        .map(f32::from_bits)
        .filter(|x| !x.is_nan())
        .collect();
    xs.extend([
        0.0,
        -0.0,
        1.0,
        -1.0,
        88.72,
        88.73,
        -87.3,
        -103.9,
        -104.5,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        f32::MIN_POSITIVE,
    ]);
    xs
}

#[test]
fn jit_exp_equals_the_interpreters_bit_for_bit_and_eager_within_the_bound() {
    let xs = inputs();
    let mut graph = Graph::new();
    let x = graph.placeholder("x", TensorMeta::new(vec![xs.len()], DType::F32));
    let e = graph.call_function(Op::Unary(UnaryOp::Exp), &[&x]).unwrap();
    graph.output(&[&e]).unwrap();
    let input = Tensor::from_vec(xs.clone(), &[xs.len()]).unwrap();
    let inputs = [input];
    let program = lowered(&graph, &inputs);
    assert!(program.kernels().count() == 1 && program.fallbacks.is_empty());
    let interpreted = run_program(&program, &NoEnvironment, &Interpreter, &inputs).unwrap()[0]
        .to_vec::<f32>()
        .unwrap();
    let jitted = jit_run(&program, &inputs)[0].to_vec::<f32>().unwrap();
    for ((x, i), j) in xs.iter().zip(&interpreted).zip(&jitted) {
        assert!(
            i.to_bits() == j.to_bits() || (i.is_nan() && j.is_nan()),
            "exp({x:e}): interpreter {i:e}, JIT {j:e}"
        );
        let eager = x.exp();
        let ulps = (eager.to_bits() as i64 - j.to_bits() as i64).unsigned_abs();
        assert!(
            eager == *j || (eager.is_nan() && j.is_nan()) || ulps <= EXP_F32_MAX_ULP as u64 + 1,
            "exp({x:e}): eager {eager:e}, JIT {j:e}"
        );
    }
}
