//! The external GEMM call a kernel may start with: `scratch[rows x n] = a[rows x k] @ b[k x n]`
//! by the eager path's `gemm` crate, for the rows of the output loops' current block, so the
//! kernel's elementwise epilogue (bias, activation, residual add) reads each block of the
//! product right after it is computed, while it is in cache. The product's rows are every
//! output loop but the last, flattened; its columns the last output loop. Both the
//! interpreter and the CPU backend call [`tessera_gemm_f32`] / [`tessera_gemm_f64`].

use crate::{BufferId, BufferPtr, Kernel, ScalarType};
use std::cell::Cell;

thread_local! {
    /// Set while this thread runs one share of a GEMM kernel split across the pool: its GEMM
    /// calls then stay on this thread instead of splitting again.
    static SERIAL: Cell<bool> = const { Cell::new(false) };
}

/// Runs `f` with the GEMM calls made on this thread kept on it (no nested split): a backend
/// that shares a GEMM kernel's rows out across the pool runs each share under this.
pub fn serial_gemm<R>(f: impl FnOnce() -> R) -> R {
    /// Restores the previous setting, also when `f` unwinds.
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            SERIAL.with(|s| s.set(self.0));
        }
    }
    let _restore = Restore(SERIAL.with(|s| s.replace(true)));
    f()
}

/// A strided matrix in a buffer: element `(r, c)` is at `offset + r * row_stride + c *
/// col_stride`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MatrixIndex {
    pub offset: usize,
    pub row_stride: usize,
    pub col_stride: usize,
}

impl MatrixIndex {
    /// One past the largest index a `rows x cols` matrix reaches (0 when it is empty).
    pub fn reach(&self, rows: usize, cols: usize) -> usize {
        if rows == 0 || cols == 0 {
            return 0;
        }
        self.offset + (rows - 1) * self.row_stride + (cols - 1) * self.col_stride + 1
    }
}

/// `out = a @ b`, the product packed row-major in the scratch buffer `out`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct GemmCall {
    pub a: BufferId,
    pub a_index: MatrixIndex,
    pub b: BufferId,
    pub b_index: MatrixIndex,
    pub out: BufferId,
    /// The reduced dimension.
    pub k: usize,
}

/// Multiply-adds from which a GEMM is worth splitting across threads (the eager GEMM's
/// threshold).
pub const GEMM_PARALLEL_WORK: usize = 48 * 48 * 48;

/// Rows of the GEMM micro-kernel's block (the `gemm` crate's f32 kernel on AVX2 computes 16
/// rows at once): a GEMM kernel split across threads gives each share a multiple of it.
pub const GEMM_MICRO_ROWS: usize = 16;

/// Whether a `rows x n` product over `k` shares its rows out across the thread pool, each
/// share calling the GEMM on one thread ([`serial_gemm`]) and running the epilogue on its
/// rows while they are in cache: at least two micro-kernel blocks of rows and
/// [`GEMM_PARALLEL_WORK`] multiply-adds. On two threads this beat the `gemm` crate's own
/// split by a third for the MLP's `256x784 @ 784x256` (one fork-join per call instead of one
/// per depth block, and no thread waits on another's packing; BENCHMARKS.md).
pub fn gemm_splits(rows: usize, n: usize, k: usize) -> bool {
    rows >= 2 * GEMM_MICRO_ROWS && rows.saturating_mul(n).saturating_mul(k) >= GEMM_PARALLEL_WORK
}

macro_rules! gemm_fn {
    ($name:ident, $t:ty) => {
        /// `c[m x n] = a[m x k] @ b[k x n]`, `c` packed row-major; strides in elements.
        ///
        /// # Safety
        /// Every pointer addresses its whole matrix under the strides given; `c` is writable
        /// and aliases neither operand.
        #[allow(clippy::too_many_arguments)]
        pub unsafe extern "C" fn $name(
            m: i64,
            n: i64,
            k: i64,
            a: *const $t,
            a_rs: i64,
            a_cs: i64,
            b: *const $t,
            b_rs: i64,
            b_cs: i64,
            c: *mut $t,
        ) {
            let (m, n, k) = (m.max(0) as usize, n.max(0) as usize, k.max(0) as usize);
            if m == 0 || n == 0 {
                return;
            }
            if k == 0 {
                // SAFETY: `c` holds `m * n` elements (the caller's contract).
                unsafe { std::ptr::write_bytes(c, 0, m * n) };
                return;
            }
            // Threads as the eager GEMM uses them: only for products worth splitting, and
            // never inside a share of a kernel already split across the pool.
            let threads = rayon::current_num_threads();
            let serial = SERIAL.with(Cell::get);
            let parallelism = if threads > 1 && !serial && m * n * k >= GEMM_PARALLEL_WORK {
                gemm::Parallelism::Rayon(threads)
            } else {
                gemm::Parallelism::None
            };
            // SAFETY: forwarded from the caller; the product is written without reading `c`.
            unsafe {
                gemm::gemm(
                    m,
                    n,
                    k,
                    c,
                    1,
                    n as isize,
                    false,
                    a,
                    a_cs as isize,
                    a_rs as isize,
                    b,
                    b_cs as isize,
                    b_rs as isize,
                    0.0,
                    1.0,
                    false,
                    false,
                    false,
                    parallelism,
                )
            }
        }
    };
}

gemm_fn!(tessera_gemm_f32, f32);
gemm_fn!(tessera_gemm_f64, f64);

/// Runs `kernel`'s GEMM call for the outermost loop's iterations `begin..end`.
///
/// # Safety
/// As [`crate::KernelExecutor::execute`]; the kernel must pass [`Kernel::verify`].
pub unsafe fn run_gemm(kernel: &Kernel, buffers: &[BufferPtr], begin: usize, end: usize) {
    let (Some(g), Some((_, n, per_step))) = (&kernel.gemm, kernel.gemm_shape()) else {
        return;
    };
    let rows = (end - begin) * per_step;
    let first = begin * per_step;
    let (a, b, c) = (
        buffers[g.a.index()],
        buffers[g.b.index()],
        buffers[g.out.index()],
    );
    let (m, n, k) = (rows as i64, n as i64, g.k as i64);
    // SAFETY: `verify` checked both operands and the scratch against their buffers, which the
    // caller guarantees are live, typed and long enough; the block lies inside them.
    unsafe {
        match c.ty {
            ScalarType::F64 => block::<f64>(tessera_gemm_f64, (a, b, c), g, (m, n, k), first),
            _ => block::<f32>(tessera_gemm_f32, (a, b, c), g, (m, n, k), first),
        }
    }
}

/// The GEMM entry point of element type `T`.
type GemmFn<T> =
    unsafe extern "C" fn(i64, i64, i64, *const T, i64, i64, *const T, i64, i64, *mut T);

/// Calls `gemm` for the `m` product rows from row `first` of `g`, at element type `T`.
///
/// # Safety
/// As [`run_gemm`]: the buffers hold `T`s and the block lies inside them.
unsafe fn block<T>(
    gemm: GemmFn<T>,
    (a, b, c): (BufferPtr, BufferPtr, BufferPtr),
    g: &GemmCall,
    (m, n, k): (i64, i64, i64),
    first: usize,
) {
    let a_at = g.a_index.offset + first * g.a_index.row_stride;
    let (ars, acs) = (g.a_index.row_stride as i64, g.a_index.col_stride as i64);
    let (brs, bcs) = (g.b_index.row_stride as i64, g.b_index.col_stride as i64);
    // SAFETY: forwarded from the caller.
    unsafe {
        gemm(
            m,
            n,
            k,
            (a.ptr as *const T).add(a_at),
            ars,
            acs,
            (b.ptr as *const T).add(g.b_index.offset),
            brs,
            bcs,
            (c.ptr as *mut T).add(first * n as usize),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::{SERIAL, serial_gemm};
    use std::cell::Cell;

    #[test]
    fn serial_gemm_holds_for_its_closure_only_and_nests() {
        assert!(!SERIAL.with(Cell::get));
        serial_gemm(|| {
            assert!(SERIAL.with(Cell::get));
            serial_gemm(|| assert!(SERIAL.with(Cell::get)));
            assert!(
                SERIAL.with(Cell::get),
                "an inner share restores the outer setting"
            );
        });
        assert!(!SERIAL.with(Cell::get));
    }

    #[test]
    fn serial_gemm_is_undone_when_its_closure_panics() {
        let unwound = std::panic::catch_unwind(|| serial_gemm(|| panic!("a failing share")));
        assert!(unwound.is_err());
        assert!(!SERIAL.with(Cell::get));
    }
}
