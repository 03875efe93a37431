//! f16 and bf16 kernels compiled by cranelift: the integer conversions of `render_half`
//! against the `half` crate (every f16 and bf16 bit pattern widened, f32 patterns across the
//! whole range narrowed), and random elementwise chains and reductions in both half types,
//! where the JIT must equal the kernel-IR interpreter bit for bit and both follow eager
//! execution.

use crate::common;

use common::{Builder, eager, jit_run, link, lowered};
use proptest::prelude::*;
use tessera_fx::Graph;
use tessera_kernel::{Interpreter, NoEnvironment, Program, run_program};
use tessera_tensor::op::{NormOp, ReduceKind, ReduceOp};
use tessera_tensor::{DType, Op, Tensor, TensorMeta};

/// `x` converted to `to` by one compiled kernel, with the interpreter's result.
fn convert(x: Tensor, to: DType) -> (Tensor, Tensor) {
    let mut g = Graph::new();
    let p = g.placeholder("x", TensorMeta::new(x.shape().to_vec(), x.dtype()));
    let y = g.call_function(Op::ToDType(to), &[&p]).unwrap();
    g.output(&[&y]).unwrap();
    let program = lowered(&g, std::slice::from_ref(&x));
    assert!(program.fallbacks.is_empty(), "{program}");
    let jit = jit_run(&program, std::slice::from_ref(&x)).remove(0);
    let interpreted = run_program(&program, &NoEnvironment, &Interpreter, &[x])
        .unwrap()
        .remove(0);
    (jit, interpreted)
}

fn same_bits_or_nan(a: f32, b: f32) -> bool {
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
}

#[test]
fn every_half_bit_pattern_widens_exactly() {
    let f16s: Vec<half::f16> = (0..=u16::MAX).map(half::f16::from_bits).collect();
    let (jit, interpreted) = convert(
        Tensor::from_vec(f16s.clone(), &[65536]).unwrap(),
        DType::F32,
    );
    let (jit, interpreted) = (
        jit.to_vec::<f32>().unwrap(),
        interpreted.to_vec::<f32>().unwrap(),
    );
    for (i, h) in f16s.iter().enumerate() {
        assert!(
            same_bits_or_nan(jit[i], h.to_f32()),
            "f16 {:#06x}: {}",
            h.to_bits(),
            jit[i]
        );
        assert!(same_bits_or_nan(interpreted[i], h.to_f32()));
    }
    let bf16s: Vec<half::bf16> = (0..=u16::MAX).map(half::bf16::from_bits).collect();
    let (jit, _) = convert(
        Tensor::from_vec(bf16s.clone(), &[65536]).unwrap(),
        DType::F32,
    );
    let jit = jit.to_vec::<f32>().unwrap();
    for (i, h) in bf16s.iter().enumerate() {
        assert!(
            same_bits_or_nan(jit[i], h.to_f32()),
            "bf16 {:#06x}: {}",
            h.to_bits(),
            jit[i]
        );
    }
}

/// f32 bit patterns: every 257th (all exponents, both signs), and the values next to each
/// rounding boundary of both formats (ties, overflow to infinity, subnormal results).
fn f32_patterns() -> Vec<f32> {
    let mut v: Vec<f32> = (0..=u32::MAX).step_by(257).map(f32::from_bits).collect();
    for h in 0..=u16::MAX {
        for x in [
            half::f16::from_bits(h).to_f32(),
            half::bf16::from_bits(h).to_f32(),
        ] {
            if x.is_finite() {
                let b = x.to_bits();
                for d in [0x0fff, 0x1000, 0x1001, 0x7fff, 0x8000, 0x8001] {
                    v.push(f32::from_bits(b.wrapping_add(d)));
                }
            }
        }
    }
    v.extend([
        65519.0,
        65520.0,
        65504.0,
        2.980_232_2e-8,
        5.960_464_5e-8,
        3.4e38,
    ]);
    v
}

#[test]
fn f32_narrows_to_half_types_rounding_to_nearest_even() {
    let xs = f32_patterns();
    let n = xs.len();
    let input = Tensor::from_vec(xs.clone(), &[n]).unwrap();
    let (jit, interpreted) = convert(input.clone(), DType::F16);
    let (jit, interpreted) = (
        jit.to_vec::<half::f16>().unwrap(),
        interpreted.to_vec::<half::f16>().unwrap(),
    );
    for (i, x) in xs.iter().enumerate() {
        let want = half::f16::from_f32(*x);
        let same = |h: half::f16| h.to_bits() == want.to_bits() || (h.is_nan() && want.is_nan());
        assert!(
            same(jit[i]),
            "f16 of {x:e} ({:#010x}): {:#06x}, want {:#06x}",
            x.to_bits(),
            jit[i].to_bits(),
            want.to_bits()
        );
        assert!(same(interpreted[i]), "interpreter: f16 of {x:e}");
    }
    let (jit, _) = convert(input, DType::BF16);
    let jit = jit.to_vec::<half::bf16>().unwrap();
    for (i, x) in xs.iter().enumerate() {
        let want = half::bf16::from_f32(*x);
        let ok = jit[i].to_bits() == want.to_bits() || (jit[i].is_nan() && want.is_nan());
        assert!(
            ok,
            "bf16 of {x:e} ({:#010x}): {:#06x}, want {:#06x}",
            x.to_bits(),
            jit[i].to_bits(),
            want.to_bits()
        );
    }
}

/// The JIT equals the interpreter bit for bit; both are within 8 ulp (relative to max(1, |x|))
/// of eager execution: f32 `exp` is 2 f32 ulp from eager's, so a result may round to a
/// neighbouring half value, and a chain carries that difference on.
fn check_three_ways(program: &Program, graph: &Graph, inputs: &[Tensor], dtype: DType) {
    assert!(program.fallbacks.is_empty(), "fell back:\n{program}");
    let expected = eager(graph, inputs);
    let interpreted = run_program(program, &NoEnvironment, &Interpreter, inputs).unwrap();
    let jitted = jit_run(program, inputs);
    let tol = 8.0 * dtype.epsilon().unwrap();
    for ((e, i), j) in expected.iter().zip(&interpreted).zip(&jitted) {
        assert_eq!(e.dtype(), i.dtype());
        let (e, i, j) = (
            e.to_vec_f64().unwrap(),
            i.to_vec_f64().unwrap(),
            j.to_vec_f64().unwrap(),
        );
        for k in 0..e.len() {
            assert!(
                i[k].to_bits() == j[k].to_bits() || (i[k].is_nan() && j[k].is_nan()),
                "element {k}: interpreter {}, jit {}\n{program}",
                i[k],
                j[k]
            );
            let close = (e[k].is_nan() && i[k].is_nan())
                || e[k] == i[k]
                || (e[k] - i[k]).abs() <= tol * e[k].abs().max(1.0);
            assert!(
                close,
                "element {k}: eager {}, interpreter {}\n{program}",
                e[k], i[k]
            );
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn random_half_chains_agree_across_eager_interpreter_and_jit(
        bf16 in any::<bool>(),
        shape in common::dims(),
        strided in any::<bool>(),
        links in proptest::collection::vec(link(), 1..7),
    ) {
        let dtype = if bf16 { DType::BF16 } else { DType::F16 };
        let mut b = Builder::new(dtype, strided);
        let mut x = b.input(&shape, strided);
        for l in &links {
            x = b.apply(x, l);
        }
        b.graph.output(&[&x]).unwrap();
        let program = lowered(&b.graph, &b.inputs);
        check_three_ways(&program, &b.graph, &b.inputs, dtype);
    }
}

#[test]
fn half_reductions_and_layer_norm_agree_across_eager_interpreter_and_jit() {
    for dtype in [DType::F16, DType::BF16] {
        for kind in [
            ReduceKind::Sum,
            ReduceKind::Mean,
            ReduceKind::Amax,
            ReduceKind::Var { correction: 1 },
        ] {
            let mut b = Builder::new(dtype, false);
            let x = b.input(&[6, 50], false);
            let r = b.call(
                Op::Reduce(ReduceOp {
                    kind,
                    dims: vec![1],
                    keepdim: false,
                }),
                &[&x],
            );
            b.graph.output(&[&r]).unwrap();
            let program = lowered(&b.graph, &b.inputs);
            check_three_ways(&program, &b.graph, &b.inputs, dtype);
        }
        let mut b = Builder::new(dtype, false);
        let x = b.input(&[6, 50], false);
        let s = b.call(Op::Softmax { dim: 1, log: false }, &[&x]);
        b.graph.output(&[&s]).unwrap();
        let program = lowered(&b.graph, &b.inputs);
        check_three_ways(&program, &b.graph, &b.inputs, dtype);
        let mut b = Builder::new(dtype, false);
        let x = b.input(&[6, 50], false);
        let w = b.input(&[50], false);
        let bias = b.input(&[50], false);
        let ln = Op::Norm(NormOp::LayerNorm {
            normalized_ndim: 1,
            eps: 1e-5,
            weight: true,
            bias: true,
        });
        let n = b.call(ln, &[&x, &w, &bias]);
        let y = b.graph.getitem(&n, 0).unwrap();
        b.graph.output(&[&y]).unwrap();
        let program = lowered(&b.graph, &b.inputs);
        assert_eq!(program.kernels().count(), 1, "{program}");
        check_three_ways(&program, &b.graph, &b.inputs, dtype);
    }
}
