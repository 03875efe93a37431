//! The kernel-IR interpreter, the executable specification of kernels: it visits the output
//! loops' points in row-major order, sweeps the reduction loops as [`Stages`] says, and
//! evaluates each value in its own type, accumulating reductions in order, with the same
//! transcendental functions ([`crate::math`]) backends call. Every backend must agree (up to
//! the order of a vectorised accumulation).

use crate::math::{tessera_pow_f32, tessera_pow_f64, unary_fn};
use crate::{
    BinaryFn, BufferPtr, Expr, Kernel, KernelExecutor, ReduceFn, Result, ScalarType, Stages,
    UnaryFn, ValueId,
};
use half::{bf16, f16};

/// Runs kernels by interpretation.
#[derive(Debug, Clone, Copy, Default)]
pub struct Interpreter;

impl KernelExecutor for Interpreter {
    unsafe fn execute(&self, _step: usize, kernel: &Kernel, buffers: &[BufferPtr]) -> Result<()> {
        kernel.verify()?;
        // SAFETY: forwarded from the caller; the whole domain is one block.
        unsafe {
            crate::conv::run_conv(
                kernel,
                buffers,
                0,
                kernel.domain.first().copied().unwrap_or(0),
            )?;
            interpret(kernel, buffers);
        }
        Ok(())
    }
}

/// A scalar of the kernel IR.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Scalar {
    F32(f32),
    F64(f64),
    F16(f16),
    BF16(bf16),
    Bool(bool),
    I64(i64),
    U8(u8),
    I8(i8),
    I32(i32),
}

impl Scalar {
    /// `v` converted to `ty` as the eager cast does (to nearest even, a half type through f32;
    /// bool is `v != 0`; an integer type truncates towards zero, saturating, NaN giving 0, as
    /// Rust's `as`).
    fn of(ty: ScalarType, v: f64) -> Scalar {
        match ty {
            ScalarType::F32 => Scalar::F32(v as f32),
            ScalarType::F64 => Scalar::F64(v),
            ScalarType::F16 => Scalar::F16(f16::from_f32(v as f32)),
            ScalarType::BF16 => Scalar::BF16(bf16::from_f32(v as f32)),
            ScalarType::Bool => Scalar::Bool(v != 0.0),
            ScalarType::I64 => Scalar::I64(v as i64),
            ScalarType::U8 => Scalar::U8(v as u8),
            ScalarType::I8 => Scalar::I8(v as i8),
            ScalarType::I32 => Scalar::I32(v as i32),
        }
    }

    fn as_f64(self) -> f64 {
        match self {
            Scalar::F32(x) => f64::from(x),
            Scalar::F64(x) => x,
            Scalar::F16(x) => x.to_f64(),
            Scalar::BF16(x) => x.to_f64(),
            Scalar::Bool(b) => f64::from(u8::from(b)),
            Scalar::I64(i) => i as f64,
            Scalar::U8(i) => f64::from(i),
            Scalar::I8(i) => f64::from(i),
            Scalar::I32(i) => f64::from(i),
        }
    }
}

/// The element at `at` of the buffer `b`.
///
/// # Safety
/// `b` points to at least `at + 1` elements of its type.
unsafe fn read(b: BufferPtr, at: usize) -> Scalar {
    // SAFETY: forwarded from the caller.
    unsafe {
        match b.ty {
            ScalarType::F32 => Scalar::F32(*(b.ptr as *const f32).add(at)),
            ScalarType::F64 => Scalar::F64(*(b.ptr as *const f64).add(at)),
            ScalarType::F16 => Scalar::F16(*(b.ptr as *const f16).add(at)),
            ScalarType::BF16 => Scalar::BF16(*(b.ptr as *const bf16).add(at)),
            ScalarType::Bool => Scalar::Bool(*b.ptr.add(at) != 0),
            ScalarType::I64 => Scalar::I64(*(b.ptr as *const i64).add(at)),
            ScalarType::U8 => Scalar::U8(*b.ptr.add(at)),
            ScalarType::I8 => Scalar::I8(*(b.ptr as *const i8).add(at)),
            ScalarType::I32 => Scalar::I32(*(b.ptr as *const i32).add(at)),
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

/// Moves `point` to the next point of the row-major nest `extents`.
fn advance(point: &mut [usize], extents: &[usize]) {
    for l in (0..point.len()).rev() {
        point[l] += 1;
        if point[l] < extents[l] {
            return;
        }
        point[l] = 0;
    }
}

/// Interprets `kernel` on `buffers`, following its [`Stages`]: per output point, the outer
/// values of pass 0, one sweep of the reduction loops per pass, then the outer stores.
///
/// # Safety
/// As [`KernelExecutor::execute`]; the kernel must pass [`Kernel::verify`].
pub unsafe fn interpret(kernel: &Kernel, buffers: &[BufferPtr]) {
    if let Some(&rows) = kernel.domain.first() {
        // SAFETY: forwarded from the caller.
        unsafe { crate::gemm::run_gemm(kernel, buffers, 0, rows) };
    }
    let stages = Stages::of(kernel);
    let outer = kernel.domain.len();
    let mut point = vec![0usize; outer + kernel.reduce.len()];
    let mut values = vec![Scalar::Bool(false); kernel.values.len()];
    let mut acc = values.clone();
    // An arg reduction's best value; its position is in `acc`.
    let mut best = values.clone();
    for _ in 0..kernel.points() {
        for &v in &stages.outer_values[0] {
            // SAFETY: forwarded from the caller.
            values[v.index()] = unsafe { eval(kernel, buffers, v, &point, &values, &acc) };
        }
        for k in 0..stages.sweeps {
            for &r in &stages.sweep_reduces[k] {
                acc[r.index()] = match kernel.value(r).expr {
                    Expr::Reduce(f, a) if f.is_arg() => {
                        best[r.index()] = Scalar::of(kernel.value(a).ty, f.identity());
                        Scalar::I64(crate::ARG_NONE)
                    }
                    Expr::Reduce(f, _) => Scalar::of(kernel.value(r).ty, f.identity()),
                    _ => Scalar::of(kernel.value(r).ty, 0.0),
                };
            }
            for flat in 0..kernel.reduce_points() {
                for &v in &stages.sweep_values[k] {
                    // SAFETY: forwarded from the caller.
                    values[v.index()] = unsafe { eval(kernel, buffers, v, &point, &values, &acc) };
                }
                for &r in &stages.sweep_reduces[k] {
                    if let Expr::Reduce(f, a) = kernel.value(r).expr
                        && f.is_arg()
                    {
                        let (b, x) = (best[r.index()], values[a.index()]);
                        let Scalar::I64(at) = acc[r.index()] else {
                            continue;
                        };
                        let replaces = match (b, x) {
                            (Scalar::F32(b), Scalar::F32(x)) => f.replaces(b, at, x, flat as i64),
                            (Scalar::I64(b), Scalar::I64(x)) => f.replaces(b, at, x, flat as i64),
                            (b, x) => f.replaces(b.as_f64(), at, x.as_f64(), flat as i64),
                        };
                        if replaces {
                            best[r.index()] = x;
                            acc[r.index()] = Scalar::I64(flat as i64);
                        }
                    } else if let Expr::Reduce(f, a) = kernel.value(r).expr {
                        acc[r.index()] = match (acc[r.index()], values[a.index()]) {
                            (Scalar::F32(x), Scalar::F32(y)) => Scalar::F32(f.combine(x, y)),
                            // Integer sums wrap, as the eager kernel's.
                            (Scalar::I64(x), Scalar::I64(y)) if f == ReduceFn::Sum => {
                                Scalar::I64(x.wrapping_add(y))
                            }
                            (Scalar::I64(x), Scalar::I64(y)) => Scalar::I64(f.combine(x, y)),
                            (x, y) => Scalar::F64(f.combine(x.as_f64(), y.as_f64())),
                        };
                    }
                }
                for &s in &stages.sweep_stores[k] {
                    // SAFETY: forwarded from the caller.
                    unsafe { store(kernel, buffers, s, &point, &values) };
                }
                advance(&mut point[outer..], &kernel.reduce);
            }
            for &v in &stages.outer_values[k + 1] {
                // SAFETY: forwarded from the caller.
                values[v.index()] = unsafe { eval(kernel, buffers, v, &point, &values, &acc) };
            }
        }
        for &s in &stages.outer_stores {
            // SAFETY: forwarded from the caller.
            unsafe { store(kernel, buffers, s, &point, &values) };
        }
        advance(&mut point[..outer], &kernel.domain);
    }
}

/// Stores `kernel.stores[s]` at `point`.
///
/// # Safety
/// As [`interpret`].
unsafe fn store(
    kernel: &Kernel,
    buffers: &[BufferPtr],
    s: usize,
    point: &[usize],
    values: &[Scalar],
) {
    let s = &kernel.stores[s];
    let b = buffers[s.buffer.index()];
    let at = s.index.at(point);
    // SAFETY: `verify` bounds every index by the parameter's length, and the caller's
    // buffer is at least that long, of this type, writable and not aliased.
    unsafe {
        match values[s.value.index()] {
            Scalar::F32(x) => *(b.ptr as *mut f32).add(at) = x,
            Scalar::F64(x) => *(b.ptr as *mut f64).add(at) = x,
            Scalar::F16(x) => *(b.ptr as *mut f16).add(at) = x,
            Scalar::BF16(x) => *(b.ptr as *mut bf16).add(at) = x,
            Scalar::Bool(x) => *b.ptr.add(at) = u8::from(x),
            Scalar::I64(x) => *(b.ptr as *mut i64).add(at) = x,
            Scalar::U8(x) => *b.ptr.add(at) = x,
            Scalar::I8(x) => *(b.ptr as *mut i8).add(at) = x,
            Scalar::I32(x) => *(b.ptr as *mut i32).add(at) = x,
        }
    }
}

/// The value `id` at `point`, its operands already in `values` and finished reductions in
/// `acc`.
///
/// # Safety
/// As [`interpret`].
unsafe fn eval(
    kernel: &Kernel,
    buffers: &[BufferPtr],
    id: ValueId,
    point: &[usize],
    values: &[Scalar],
    acc: &[Scalar],
) -> Scalar {
    let v = kernel.value(id);
    let get = |id: ValueId| values[id.index()];
    match &v.expr {
        Expr::Load { buffer, index } => {
            let b = buffers[buffer.index()];
            let at = index.at(point);
            // SAFETY: `verify` bounds every index by the parameter's length, and the caller's
            // buffer is at least that long and of this type.
            unsafe { read(b, at) }
        }
        Expr::LoadIf {
            buffer,
            index,
            bounds,
            fill,
        } => match crate::guard::guarded_index(index, bounds, point) {
            // SAFETY: `verify` bounds the guarded index by the parameter's length, and the
            // caller's buffer is at least that long and of this type.
            Some(at) => unsafe { read(buffers[buffer.index()], at) },
            None => Scalar::of(v.ty, *fill),
        },
        Expr::Gather {
            buffer,
            index,
            by,
            stride,
            len,
            status,
        } => {
            let by = match get(*by) {
                Scalar::I64(i) => i,
                other => other.as_f64() as i64,
            };
            match crate::gather::gathered_index(index, by, *stride, *len, point) {
                // SAFETY: `verify` bounds every in-range gathered index by the parameter's
                // length, and the caller's buffer is at least that long and of this type.
                Some(at) => unsafe { read(buffers[buffer.index()], at) },
                None => {
                    let s = buffers[status.index()].ptr as *mut i64;
                    // SAFETY: `verify` checks the status is an i64 scratch of `STATUS_LEN`
                    // elements, writable and not aliased.
                    unsafe {
                        *s.add(crate::gather::STATUS_FLAG) = 1;
                        *s.add(crate::gather::STATUS_INDEX) = by;
                        *s.add(crate::gather::STATUS_SIZE) = *len as i64;
                    }
                    Scalar::of(v.ty, 0.0)
                }
            }
        }
        Expr::LoopIndex(l) => Scalar::I64(point[l.index()] as i64),
        Expr::Const(c) => Scalar::of(v.ty, *c),
        Expr::Unary(f, a) => match get(*a) {
            Scalar::F32(x) => Scalar::F32(unary(*f, x, |x| unary_fn(*f).map_or(x, |m| (m.f32)(x)))),
            Scalar::F64(x) => Scalar::F64(unary(*f, x, |x| unary_fn(*f).map_or(x, |m| (m.f64)(x)))),
            // `verify` admits unary functions of f32 and f64 only.
            other => other,
        },
        Expr::Binary(f, a, b) => match (get(*a), get(*b)) {
            (Scalar::F32(x), Scalar::F32(y)) => {
                Scalar::F32(binary(*f, x, y, |a, b| tessera_pow_f32(a, b)))
            }
            // `verify` admits add, sub and mul of i64.
            (Scalar::I64(x), Scalar::I64(y)) => Scalar::I64(match f {
                BinaryFn::Sub => x.wrapping_sub(y),
                BinaryFn::Mul => x.wrapping_mul(y),
                _ => x.wrapping_add(y),
            }),
            (x, y) => Scalar::F64(binary(*f, x.as_f64(), y.as_f64(), |a, b| {
                tessera_pow_f64(a, b)
            })),
        },
        Expr::Compare(f, a, b) => Scalar::Bool(match (get(*a), get(*b)) {
            (Scalar::F32(x), Scalar::F32(y)) => f.eval(x, y),
            (Scalar::I64(x), Scalar::I64(y)) => f.eval(x, y),
            (x, y) => f.eval(x.as_f64(), y.as_f64()),
        }),
        Expr::Select { cond, a, b } => match get(*cond) {
            Scalar::Bool(true) => get(*a),
            _ => get(*b),
        },
        Expr::Cast(a) => Scalar::of(v.ty, get(*a).as_f64()),
        Expr::Reduce(..) => acc[id.index()],
    }
}
