//! Tests of the math programs' accuracy against the kernel-IR interpreter's functions, run by
//! evaluating the programs on the CPU with PTX semantics ([`crate::math_ir`]): the bounds here
//! are the ones the crate documentation states.

use crate::math_fns;
use tessera_kernel::math::{tessera_pow_f32, tessera_pow_f64, unary_fn};
use tessera_kernel::{ScalarType, UnaryFn};

/// The distance in units in the last place between two f64s (0 when equal or both NaN).
fn ulps64(a: f64, b: f64) -> u64 {
    if a == b || (a.is_nan() && b.is_nan()) {
        return 0;
    }
    if a.is_nan() || b.is_nan() || a.signum() != b.signum() && a != 0.0 && b != 0.0 {
        return u64::MAX;
    }
    let key = |x: f64| {
        let b = x.to_bits() as i64;
        if b < 0 { i64::MIN - b } else { b }
    };
    (key(a) as i128 - key(b) as i128).unsigned_abs() as u64
}

fn ulps32(a: f32, b: f32) -> u64 {
    if a == b || (a.is_nan() && b.is_nan()) {
        return 0;
    }
    if a.is_nan() || b.is_nan() {
        return u64::MAX;
    }
    let key = |x: f32| {
        let b = x.to_bits() as i32 as i64;
        if b < 0 { i32::MIN as i64 - b } else { b }
    };
    (key(a) - key(b)).unsigned_abs()
}

/// f64 inputs: a dense sweep of `[lo, hi]` plus every 2^k scale of a few mantissas in range,
/// and the special values.
fn inputs64(lo: f64, hi: f64) -> Vec<f64> {
    let n = 200_000;
    let mut v: Vec<f64> = (0..=n)
        .map(|i| lo + (hi - lo) * (i as f64 / n as f64))
        .collect();
    for e in -1074..1024 {
        for m in [1.0, 1.1, 1.5, 1.9] {
            let x = m * 2f64.powi(e);
            for s in [x, -x] {
                if s >= lo && s <= hi {
                    v.push(s);
                }
            }
        }
    }
    v.extend([0.0, -0.0, f64::INFINITY, f64::NEG_INFINITY, f64::NAN]);
    v
}

/// Every 4099th f32 bit pattern within `[lo, hi]`, and the special values.
fn inputs32(lo: f32, hi: f32) -> Vec<f32> {
    let mut v: Vec<f32> = (0..=u32::MAX)
        .step_by(4099)
        .map(f32::from_bits)
        .filter(|x| *x >= lo && *x <= hi)
        .collect();
    v.extend([
        0.0,
        -0.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        lo,
        hi,
    ]);
    v
}

fn worst64(f: UnaryFn, lo: f64, hi: f64) -> (u64, f64) {
    let p = math_fns::unary(f, ScalarType::F64).unwrap();
    let reference = unary_fn(f).unwrap().f64;
    let mut worst = (0, 0.0);
    for x in inputs64(lo, hi) {
        let e = ulps64(p.eval(&[x]), reference(x));
        if e > worst.0 {
            worst = (e, x);
        }
    }
    worst
}

fn worst32(f: UnaryFn, lo: f32, hi: f32) -> (u64, f32) {
    let p = math_fns::unary(f, ScalarType::F32).unwrap();
    let reference = unary_fn(f).unwrap().f32;
    let mut worst = (0, 0.0);
    for x in inputs32(lo, hi) {
        let e = ulps32(p.eval(&[x as f64]) as f32, reference(x));
        if e > worst.0 {
            worst = (e, x);
        }
    }
    worst
}

#[test]
fn f32_exp_equals_the_interpreter_bit_for_bit() {
    let p = math_fns::unary(UnaryFn::Exp, ScalarType::F32).unwrap();
    for bits in (0..=u32::MAX).step_by(997) {
        let x = f32::from_bits(bits);
        let got = p.eval(&[x as f64]) as f32;
        let want = tessera_kernel::exp_poly::exp_f32(x);
        assert!(
            got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()),
            "exp({x:e}) = {got:e}, the interpreter gives {want:e}"
        );
    }
}

/// (function, f64 range, f64 bound in ulp, f32 range, f32 bound in ulp).
const BOUNDS: [(UnaryFn, f64, f64, u64, f32, f32, u64); 8] = [
    (UnaryFn::Exp, -800.0, 800.0, 2, 0.0, 0.0, 0),
    (UnaryFn::Log, 0.0, f64::MAX, 2, 0.0, f32::MAX, 1),
    (UnaryFn::Sin, -1.6e6, 1.6e6, 2, -1.6e6, 1.6e6, 1),
    (UnaryFn::Cos, -1.6e6, 1.6e6, 2, -1.6e6, 1.6e6, 1),
    // The whole range: Payne-Hanek reduction from |x| = 2^20 on.
    (UnaryFn::Sin, -f64::MAX, f64::MAX, 2, -f32::MAX, f32::MAX, 1),
    (UnaryFn::Cos, -f64::MAX, f64::MAX, 2, -f32::MAX, f32::MAX, 1),
    (UnaryFn::Tanh, -30.0, 30.0, 3, -30.0, 30.0, 2),
    (UnaryFn::Erf, -10.0, 10.0, 6, -10.0, 10.0, 1),
];

#[test]
fn transcendentals_are_within_their_stated_ulp_of_the_interpreter() {
    let mut report = Vec::new();
    for (f, lo, hi, bound, lo32, hi32, bound32) in BOUNDS {
        let (e, x) = worst64(f, lo, hi);
        report.push(format!("{} f64: {e} ulp at {x:e}", f.name()));
        assert!(e <= bound, "{}", report.join("\n"));
        if bound32 > 0 {
            let (e, x) = worst32(f, lo32, hi32);
            report.push(format!("{} f32: {e} ulp at {x:e}", f.name()));
            assert!(e <= bound32, "{}", report.join("\n"));
        }
    }
    println!("{}", report.join("\n"));
}

#[test]
fn pow_is_close_to_the_interpreter_and_exact_on_special_cases() {
    let p64 = math_fns::pow(ScalarType::F64);
    let p32 = math_fns::pow(ScalarType::F32);
    let specials = [
        0.0,
        -0.0,
        1.0,
        -1.0,
        2.0,
        -2.0,
        0.5,
        -0.5,
        3.0,
        -3.0,
        2.5,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NAN,
    ];
    for &a in &specials {
        for &b in &specials {
            let (got, want) = (p64.eval(&[a, b]), tessera_pow_f64(a, b));
            assert!(ulps64(got, want) <= 1, "pow({a}, {b}) = {got}, want {want}");
        }
    }
    let mut worst = (0, 0.0, 0.0);
    let mut worst32 = (0, 0.0f32, 0.0f32);
    for i in 0..400 {
        for j in 0..100 {
            let a = 0.01 + i as f64 * 0.37;
            let b = -8.0 + j as f64 * 0.16;
            let e = ulps64(p64.eval(&[a, b]), tessera_pow_f64(a, b));
            if e > worst.0 {
                worst = (e, a, b);
            }
            let (a32, b32) = (a as f32, b as f32);
            let e = ulps32(
                p32.eval(&[a32 as f64, b32 as f64]) as f32,
                tessera_pow_f32(a32, b32),
            );
            if e > worst32.0 {
                worst32 = (e, a32, b32);
            }
        }
    }
    println!("pow: f64 {worst:?}, f32 {worst32:?}");
    assert!(worst.0 <= 64, "pow f64: {worst:?}");
    assert!(worst32.0 <= 1, "pow f32: {worst32:?}");
}

/// Random finite f64 bit patterns (every exponent equally likely) and large round values,
/// against the interpreter (Rust's `std`, glibc's `sin`/`cos` here).
#[test]
fn sin_and_cos_of_huge_arguments_are_within_2_ulp_of_the_interpreter() {
    let mut xs: Vec<f64> = vec![
        1048576.0,
        1048575.999_999_999_9,
        f64::MAX,
        -f64::MAX,
        f32::MAX as f64,
        1e22,
        1e300,
    ];
    let mut state = 0x2545_f491_4f6c_dd1du64;
    for _ in 0..100_000 {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let x = f64::from_bits(state);
        if x.is_finite() {
            xs.push(x);
        }
    }
    for f in [UnaryFn::Sin, UnaryFn::Cos] {
        let p64 = math_fns::unary(f, ScalarType::F64).unwrap();
        let p32 = math_fns::unary(f, ScalarType::F32).unwrap();
        let m = unary_fn(f).unwrap();
        let mut worst = (0, 0.0);
        let mut worst32 = (0, 0.0f32);
        for &x in &xs {
            let e = ulps64(p64.eval(&[x]), (m.f64)(x));
            if e > worst.0 {
                worst = (e, x);
            }
            let x32 = x as f32;
            if x32.is_finite() {
                let e = ulps32(p32.eval(&[x32 as f64]) as f32, (m.f32)(x32));
                if e > worst32.0 {
                    worst32 = (e, x32);
                }
            }
        }
        println!("{}: f64 {worst:?}, f32 {worst32:?}", f.name());
        assert!(worst.0 <= 2, "{} f64: {worst:?}", f.name());
        assert!(worst32.0 <= 1, "{} f32: {worst32:?}", f.name());
    }
}

/// The arguments closest to a multiple of pi/2, in f64 (6381956970095103 2^797, 2^-60.9
/// away) and f32 (16367173 2^72; Muller, "Elementary Functions", table 11.1), and two more,
/// against their correctly rounded sines and cosines (mpmath at 600 bits). glibc's `cos` is
/// 8 ulp off at the first; the reduction here keeps 2^-117 and is within 1 ulp.
#[test]
fn sin_and_cos_of_the_hardest_arguments_are_within_1_ulp_of_the_correct_value() {
    let cases: [(f64, f64, f64); 4] = [
        (
            6381956970095103.0 * 2f64.powi(797),
            1.0,
            -4.687165924254628e-19,
        ),
        (16367173.0 * 2f64.powi(72), 1.0, -1.6147697982476211e-09),
        (1e22, -0.8522008497671888, 0.523214785395139),
        (f64::MAX, 0.004961954789184062, -0.9999876894265599),
    ];
    let sin = math_fns::unary(UnaryFn::Sin, ScalarType::F64).unwrap();
    let cos = math_fns::unary(UnaryFn::Cos, ScalarType::F64).unwrap();
    for (x, s, c) in cases {
        for (name, p, want) in [("sin", &sin, s), ("cos", &cos, c)] {
            for (x, want) in [(x, want), (-x, if name == "sin" { -want } else { want })] {
                let got = p.eval(&[x]);
                assert!(
                    ulps64(got, want) <= 1,
                    "{name}({x:e}) = {got:e}, want {want:e}"
                );
            }
        }
    }
}
