//! The transcendental functions of the kernel IR as plain Rust functions with the C ABI: the
//! interpreter calls them and the CPU backend imports them by name, so both compute exactly
//! what the eager kernels compute (Rust's `f32::sin`, `libm::erf` in f64 for f32 ...), except
//! f32 `exp`: that is [`crate::exp_poly::exp_f32`], which backends emit inline and vectorised
//! (within 2 ulp of the eager `f32::exp`).

use crate::UnaryFn;

macro_rules! math_fns {
    ($($name32:ident, $name64:ident: |$x:ident| $f32:expr, $f64:expr;)*) => {
        $(
            pub extern "C" fn $name32($x: f32) -> f32 {
                $f32
            }
            pub extern "C" fn $name64($x: f64) -> f64 {
                $f64
            }
        )*
    };
}

math_fns! {
    tessera_exp_f32, tessera_exp_f64: |x| crate::exp_poly::exp_f32(x), x.exp();
    tessera_log_f32, tessera_log_f64: |x| x.ln(), x.ln();
    tessera_sin_f32, tessera_sin_f64: |x| x.sin(), x.sin();
    tessera_cos_f32, tessera_cos_f64: |x| x.cos(), x.cos();
    tessera_tanh_f32, tessera_tanh_f64: |x| x.tanh(), x.tanh();
    tessera_erf_f32, tessera_erf_f64: |x| libm::erf(f64::from(x)) as f32, libm::erf(x);
}

pub extern "C" fn tessera_pow_f32(a: f32, b: f32) -> f32 {
    a.powf(b)
}

pub extern "C" fn tessera_pow_f64(a: f64, b: f64) -> f64 {
    a.powf(b)
}

/// A transcendental function of one float: its symbol name and its f32 and f64 versions.
pub struct MathFn {
    pub name: &'static str,
    pub f32: extern "C" fn(f32) -> f32,
    pub f64: extern "C" fn(f64) -> f64,
}

/// The Rust functions behind a transcendental [`UnaryFn`] (`None` for the others).
pub fn unary_fn(op: UnaryFn) -> Option<MathFn> {
    let (name, f32, f64): (_, extern "C" fn(f32) -> f32, extern "C" fn(f64) -> f64) = match op {
        UnaryFn::Exp => ("exp", tessera_exp_f32, tessera_exp_f64),
        UnaryFn::Log => ("log", tessera_log_f32, tessera_log_f64),
        UnaryFn::Sin => ("sin", tessera_sin_f32, tessera_sin_f64),
        UnaryFn::Cos => ("cos", tessera_cos_f32, tessera_cos_f64),
        UnaryFn::Tanh => ("tanh", tessera_tanh_f32, tessera_tanh_f64),
        UnaryFn::Erf => ("erf", tessera_erf_f32, tessera_erf_f64),
        UnaryFn::Neg | UnaryFn::Abs | UnaryFn::Sqrt => return None,
    };
    Some(MathFn { name, f32, f64 })
}

/// The symbol a backend imports for `name` at a type (`tessera_exp_f32`).
pub fn symbol(name: &str, ty: crate::ScalarType) -> String {
    format!("tessera_{name}_{ty}")
}
