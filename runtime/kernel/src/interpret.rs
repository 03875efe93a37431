//! The kernel-IR interpreter, the executable specification of kernels: it visits the nest's
//! points in row-major order and evaluates the DAG at each in the values' own types, with the
//! same transcendental functions ([`crate::math`]) backends call. Every backend must agree.

use crate::math::{tessera_pow_f32, tessera_pow_f64, unary_fn};
use crate::{BinaryFn, BufferPtr, Expr, Kernel, KernelExecutor, Result, ScalarType, UnaryFn};

/// Runs kernels by interpretation.
#[derive(Debug, Clone, Copy, Default)]
pub struct Interpreter;

impl KernelExecutor for Interpreter {
    unsafe fn execute(&self, _step: usize, kernel: &Kernel, buffers: &[BufferPtr]) -> Result<()> {
        kernel.verify()?;
        // SAFETY: forwarded from the caller.
        unsafe { interpret(kernel, buffers) };
        Ok(())
    }
}

/// A scalar of the kernel IR.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Scalar {
    F32(f32),
    F64(f64),
    Bool(bool),
}

impl Scalar {
    fn of(ty: ScalarType, v: f64) -> Scalar {
        match ty {
            ScalarType::F32 => Scalar::F32(v as f32),
            ScalarType::F64 => Scalar::F64(v),
            ScalarType::Bool => Scalar::Bool(v != 0.0),
        }
    }

    fn as_f64(self) -> f64 {
        match self {
            Scalar::F32(x) => f64::from(x),
            Scalar::F64(x) => x,
            Scalar::Bool(b) => f64::from(u8::from(b)),
        }
    }
}

fn unary<T: num_like::Float>(f: UnaryFn, x: T, math32: impl Fn(T) -> T) -> T {
    match f {
        UnaryFn::Neg => -x,
        UnaryFn::Abs => x.abs(),
        UnaryFn::Sqrt => x.sqrt(),
        _ => math32(x),
    }
}

fn binary<T: num_like::Float>(f: BinaryFn, a: T, b: T, pow: impl Fn(T, T) -> T) -> T {
    match f {
        BinaryFn::Add => a + b,
        BinaryFn::Sub => a - b,
        BinaryFn::Mul => a * b,
        BinaryFn::Div => a / b,
        BinaryFn::Pow => pow(a, b),
    }
}

/// The float arithmetic the interpreter needs, for f32 and f64.
mod num_like {
    pub trait Float:
        Copy
        + std::ops::Neg<Output = Self>
        + std::ops::Add<Output = Self>
        + std::ops::Sub<Output = Self>
        + std::ops::Mul<Output = Self>
        + std::ops::Div<Output = Self>
    {
        fn abs(self) -> Self;
        fn sqrt(self) -> Self;
    }
    impl Float for f32 {
        fn abs(self) -> Self {
            f32::abs(self)
        }
        fn sqrt(self) -> Self {
            f32::sqrt(self)
        }
    }
    impl Float for f64 {
        fn abs(self) -> Self {
            f64::abs(self)
        }
        fn sqrt(self) -> Self {
            f64::sqrt(self)
        }
    }
}

/// Interprets `kernel` on `buffers`.
///
/// # Safety
/// As [`KernelExecutor::execute`]; the kernel must pass [`Kernel::verify`].
pub unsafe fn interpret(kernel: &Kernel, buffers: &[BufferPtr]) {
    let points = kernel.points();
    let mut point = vec![0usize; kernel.domain.len()];
    let mut values: Vec<Scalar> = Vec::with_capacity(kernel.values.len());
    for _ in 0..points {
        values.clear();
        for v in &kernel.values {
            let get = |id: crate::ValueId| values[id.index()];
            let result = match &v.expr {
                Expr::Load { buffer, index } => {
                    let b = buffers[buffer.index()];
                    let at = index.at(&point);
                    // SAFETY: `verify` bounds every index by the parameter's length, and the
                    // caller's buffer is at least that long and of this type.
                    unsafe {
                        match b.ty {
                            ScalarType::F32 => Scalar::F32(*(b.ptr as *const f32).add(at)),
                            ScalarType::F64 => Scalar::F64(*(b.ptr as *const f64).add(at)),
                            ScalarType::Bool => Scalar::Bool(*b.ptr.add(at) != 0),
                        }
                    }
                }
                Expr::Const(c) => Scalar::of(v.ty, *c),
                Expr::Unary(f, a) => match get(*a) {
                    Scalar::F32(x) => {
                        Scalar::F32(unary(*f, x, |x| unary_fn(*f).map_or(x, |m| (m.f32)(x))))
                    }
                    Scalar::F64(x) => {
                        Scalar::F64(unary(*f, x, |x| unary_fn(*f).map_or(x, |m| (m.f64)(x))))
                    }
                    b @ Scalar::Bool(_) => b,
                },
                Expr::Binary(f, a, b) => match (get(*a), get(*b)) {
                    (Scalar::F32(x), Scalar::F32(y)) => {
                        Scalar::F32(binary(*f, x, y, |a, b| tessera_pow_f32(a, b)))
                    }
                    (x, y) => Scalar::F64(binary(*f, x.as_f64(), y.as_f64(), |a, b| {
                        tessera_pow_f64(a, b)
                    })),
                },
                Expr::Compare(f, a, b) => Scalar::Bool(match (get(*a), get(*b)) {
                    (Scalar::F32(x), Scalar::F32(y)) => f.eval(x, y),
                    (x, y) => f.eval(x.as_f64(), y.as_f64()),
                }),
                Expr::Select { cond, a, b } => match get(*cond) {
                    Scalar::Bool(true) => get(*a),
                    _ => get(*b),
                },
                Expr::Cast(a) => Scalar::of(v.ty, get(*a).as_f64()),
            };
            values.push(result);
        }
        for s in &kernel.stores {
            let b = buffers[s.buffer.index()];
            let at = s.index.at(&point);
            // SAFETY: as for loads; outputs are writable and not aliased.
            unsafe {
                match values[s.value.index()] {
                    Scalar::F32(x) => *(b.ptr as *mut f32).add(at) = x,
                    Scalar::F64(x) => *(b.ptr as *mut f64).add(at) = x,
                    Scalar::Bool(x) => *b.ptr.add(at) = u8::from(x),
                }
            }
        }
        for l in (0..point.len()).rev() {
            point[l] += 1;
            if point[l] < kernel.domain[l] {
                break;
            }
            point[l] = 0;
        }
    }
}
