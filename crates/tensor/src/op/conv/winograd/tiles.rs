//! The Winograd input and output transforms of whole rows of tiles, eight tiles at a time:
//! each step reads its values for eight consecutive tiles as plain arrays ([`Lanes`]), which
//! the compiler turns into vector instructions, and applies the same arithmetic as one tile
//! alone (the same operations in the same order, so every lane rounds as a scalar would). A
//! row's last tiles past a multiple of eight run as one more step whose missing lanes are
//! zeros, read and written element by element.

use super::{Plan, Shared};
use crate::Float;
use std::ops::{Add, Mul, Sub};

/// The arithmetic a transform needs, of one value or of [`Lanes`].
pub(super) trait Arith:
    Copy + Add<Output = Self> + Sub<Output = Self> + Mul<Output = Self>
{
    fn constant(c: f64) -> Self;
}

impl<T: Float> Arith for T {
    #[inline(always)]
    fn constant(c: f64) -> Self {
        T::from(c).unwrap_or_else(T::nan)
    }
}

/// Tiles transformed together by one step.
const LANES: usize = 8;

/// One value of [`LANES`] consecutive tiles.
#[derive(Clone, Copy)]
pub(super) struct Lanes<T>([T; LANES]);

impl<T: Float> Lanes<T> {
    #[inline(always)]
    fn zip(self, other: Self, f: impl Fn(T, T) -> T) -> Self {
        Lanes(std::array::from_fn(|i| f(self.0[i], other.0[i])))
    }
}

impl<T: Float> Add for Lanes<T> {
    type Output = Self;
    #[inline(always)]
    fn add(self, other: Self) -> Self {
        self.zip(other, |a, b| a + b)
    }
}

impl<T: Float> Sub for Lanes<T> {
    type Output = Self;
    #[inline(always)]
    fn sub(self, other: Self) -> Self {
        self.zip(other, |a, b| a - b)
    }
}

impl<T: Float> Mul for Lanes<T> {
    type Output = Self;
    #[inline(always)]
    fn mul(self, other: Self) -> Self {
        self.zip(other, |a, b| a * b)
    }
}

impl<T: Float> Arith for Lanes<T> {
    #[inline(always)]
    fn constant(c: f64) -> Self {
        Lanes([T::constant(c); LANES])
    }
}

/// The input transform `B^T d` of one column of `(m+2)` values (and, applied to rows, `d B`),
/// and the output transform `A^T s`.
pub(super) trait Transform: Copy + Send + Sync + 'static {
    const M: usize;
    const A: usize;
    /// `B^T` applied to `d[0..A]`, into `t[0..A]`.
    fn input<V: Arith>(d: &[V], t: &mut [V]);
    /// `A^T` applied to `s[0..A]`, into `y[0..M]`.
    fn output<V: Arith>(s: &[V], y: &mut [V]);
}

#[derive(Clone, Copy)]
pub(super) struct F2;
#[derive(Clone, Copy)]
pub(super) struct F4;

impl Transform for F2 {
    const M: usize = 2;
    const A: usize = 4;
    #[inline(always)]
    fn input<V: Arith>(d: &[V], t: &mut [V]) {
        let (d0, d1, d2, d3) = (d[0], d[1], d[2], d[3]);
        t[0] = d0 - d2;
        t[1] = d1 + d2;
        t[2] = d2 - d1;
        t[3] = d1 - d3;
    }
    #[inline(always)]
    fn output<V: Arith>(s: &[V], y: &mut [V]) {
        let (s0, s1, s2, s3) = (s[0], s[1], s[2], s[3]);
        y[0] = s0 + s1 + s2;
        y[1] = s1 - s2 - s3;
    }
}

impl Transform for F4 {
    const M: usize = 4;
    const A: usize = 6;
    #[inline(always)]
    fn input<V: Arith>(d: &[V], t: &mut [V]) {
        let (d0, d1, d2, d3, d4, d5) = (d[0], d[1], d[2], d[3], d[4], d[5]);
        let (two, four, five) = (V::constant(2.0), V::constant(4.0), V::constant(5.0));
        // Shared sums: rows 1-2 and 3-4 differ only in the sign of their odd terms.
        let a = d4 - four * d2;
        let b = d3 - four * d1;
        let c = d4 - d2;
        let e = two * (d3 - d1);
        t[0] = four * d0 - five * d2 + d4;
        t[1] = a + b;
        t[2] = a - b;
        t[3] = c + e;
        t[4] = c - e;
        t[5] = four * d1 - five * d3 + d5;
    }
    #[inline(always)]
    fn output<V: Arith>(s: &[V], y: &mut [V]) {
        let (s0, s1, s2, s3, s4, s5) = (s[0], s[1], s[2], s[3], s[4], s[5]);
        let (two, four, eight) = (V::constant(2.0), V::constant(4.0), V::constant(8.0));
        let (p12, m12, p34, m34) = (s1 + s2, s1 - s2, s3 + s4, s3 - s4);
        y[0] = s0 + p12 + p34;
        y[1] = m12 + two * m34;
        y[2] = p12 + four * p34;
        y[3] = m12 + eight * m34 + s5;
    }
}

/// Which transform a [`lanewise`] call applies.
#[derive(Clone, Copy)]
enum Direction {
    /// [`Transform::input`]: `A` values in, `A` out.
    Input,
    /// [`Transform::output`]: `A` values in, `M` out.
    Output,
}

/// Applies `F`'s transform in `direction` to `len` consecutive tiles: value `r` of tile `e`
/// is `src[from[r] + e]` and result `k` goes to `dst[to[k] + e]`.
///
/// # Safety
/// Every `from[r] + e` (`r < A`, `e < len`) is inside the allocation `src` points into and
/// every `to[k] + e` inside the one `dst` points into, and no written element is read.
#[inline(always)]
unsafe fn lanewise<F: Transform, T: Float>(
    direction: Direction,
    (src, from): (*const T, &[usize; 6]),
    (dst, to): (*mut T, &[usize; 6]),
    len: usize,
) {
    let outs = match direction {
        Direction::Input => F::A,
        Direction::Output => F::M,
    };
    let apply = |d: &[Lanes<T>], t: &mut [Lanes<T>]| match direction {
        Direction::Input => F::input(d, t),
        Direction::Output => F::output(d, t),
    };
    let zeros = Lanes([T::zero(); LANES]);
    let (mut d, mut t) = ([zeros; 6], [zeros; 6]);
    let mut e = 0;
    while e + LANES <= len {
        for (r, value) in d.iter_mut().enumerate().take(F::A) {
            // SAFETY: `from[r] + e + LANES <= from[r] + len`, inside `src` (the caller).
            *value = Lanes(unsafe { src.add(from[r] + e).cast::<[T; LANES]>().read_unaligned() });
        }
        apply(&d[..F::A], &mut t[..outs]);
        for (k, value) in t.iter().enumerate().take(outs) {
            // SAFETY: as the reads, inside `dst`.
            unsafe {
                dst.add(to[k] + e)
                    .cast::<[T; LANES]>()
                    .write_unaligned(value.0)
            };
        }
        e += LANES;
    }
    let rest = len - e;
    if rest == 0 {
        return;
    }
    for (r, value) in d.iter_mut().enumerate().take(F::A) {
        *value = zeros;
        for (lane, v) in value.0.iter_mut().enumerate().take(rest) {
            // SAFETY: `e + lane < len`.
            *v = unsafe { *src.add(from[r] + e + lane) };
        }
    }
    apply(&d[..F::A], &mut t[..outs]);
    for (k, value) in t.iter().enumerate().take(outs) {
        for (lane, &v) in value.0.iter().enumerate().take(rest) {
            // SAFETY: `e + lane < len`.
            unsafe { *dst.add(to[k] + e + lane) = v };
        }
    }
}

/// Tiles of one row transformed together.
const ROW_CHUNK: usize = 16;
/// Room for `A` rows of `M` phases of `ROW_CHUNK + 1` columns (the largest transform's).
const ROW_BUFFER: usize = 6 * 4 * (ROW_CHUNK + 1);

/// Transforms channel `c` of one image (`x` is that channel's `H x W` plane) into
/// `v[points][C_in][columns]` at the columns `first..first + tiles`.
///
/// # Safety
/// `v` holds `points * C_in * columns` elements; no other task writes this channel's columns
/// of this image.
#[inline(always)]
pub(super) unsafe fn input_tiles<F: Transform, T: Float>(
    p: &Plan,
    x: &[T],
    c: usize,
    first: usize,
    v: Shared<T>,
) {
    let (m, a) = (F::M, F::A);
    let g = &p.g;
    let pad = [g.params.padding[0] as isize, g.params.padding[1] as isize];
    // line: one input row's columns from the chunk's first tile on (zero outside the input).
    let mut line = [T::zero(); 4 * (ROW_CHUNK + 1)];
    // rows[r][phase][q]: input row r of the tile row, column q * m + phase.
    let mut rows = [T::zero(); ROW_BUFFER];
    // cols[i][phase][q]: (B^T d)[i] at the same columns.
    let mut cols = [T::zero(); ROW_BUFFER];
    for ty in 0..p.tiles_y {
        let mut tx0 = 0;
        while tx0 < p.tiles_x {
            let n = ROW_CHUNK.min(p.tiles_x - tx0);
            // Phases of n + 1 columns: tile tx reads q = tx and, for j >= m, q = tx + 1.
            let phase_len = n + 1;
            let row_len = m * phase_len;
            let x0 = (tx0 * m) as isize - pad[1];
            // The line's columns inside the input: lo..hi.
            let lo = (-x0).clamp(0, row_len as isize) as usize;
            let hi = (g.w as isize - x0).clamp(lo as isize, row_len as isize) as usize;
            for r in 0..a {
                let iy = (ty * m + r) as isize - pad[0];
                let row = &mut rows[r * row_len..][..row_len];
                if iy < 0 || iy >= g.h as isize {
                    row.fill(T::zero());
                    continue;
                }
                let line = &mut line[..row_len];
                line[..lo].fill(T::zero());
                if lo < hi {
                    let start = iy as usize * g.w + (x0 + lo as isize) as usize;
                    line[lo..hi].copy_from_slice(&x[start..][..hi - lo]);
                }
                line[hi..].fill(T::zero());
                for (ph, phase) in row.chunks_exact_mut(phase_len).enumerate() {
                    for (q, o) in phase.iter_mut().enumerate() {
                        *o = line[q * m + ph];
                    }
                }
            }
            // Down the columns: cols[i] = sum_r B^T[i][r] rows[r], elementwise.
            let at: [usize; 6] = std::array::from_fn(|r| r * row_len);
            // SAFETY: rows r < A of `row_len` elements, inside both buffers (A * row_len <=
            // ROW_BUFFER); `rows` and `cols` are distinct.
            unsafe {
                lanewise::<F, T>(
                    Direction::Input,
                    (rows.as_ptr(), &at),
                    (cols.as_mut_ptr(), &at),
                    row_len,
                )
            };
            // Along the rows: tile tx reads column tx * m + j, at phase j % m, q = tx + j / m,
            // and writes point i * a + k of its column.
            let column = first + ty * p.tiles_x + tx0;
            let from: [usize; 6] = std::array::from_fn(|j| (j % m) * phase_len + j / m);
            for i in 0..a {
                let to: [usize; 6] =
                    std::array::from_fn(|k| ((i * a + k) * g.c_in + c) * p.columns + column);
                // SAFETY: reads end at phase m - 1, q <= n, inside row i of `cols`; writes:
                // point < points, c < C_in, column + n <= columns, inside `v`, in this task's
                // channel and image (the caller).
                unsafe {
                    lanewise::<F, T>(
                        Direction::Input,
                        (cols[i * row_len..].as_ptr(), &from),
                        (v.get(), &to),
                        n,
                    )
                };
            }
            tx0 += n;
        }
    }
}

/// The output transform of output channel `o` of one image, whose tiles start at column
/// `first` of the products `mm[points][C_out][columns]`, into that channel's `oH x oW` plane.
#[inline(always)]
pub(super) fn output_tiles<F: Transform, T: Float>(
    p: &Plan,
    mm: &[T],
    o: usize,
    first: usize,
    y: &mut [T],
) {
    let (m, a) = (F::M, F::A);
    let g = &p.g;
    let stride = g.c_out * p.columns;
    assert!(
        mm.len() >= a * a * stride && o < g.c_out && first + p.tiles() <= p.columns,
        "output_tiles: channel {o}, tiles from {first} outside products of {} elements",
        mm.len()
    );
    // rows[r][k][tx] = sum_i A^T[r][i] mm[i][k] for the chunk's tiles.
    let mut rows = [T::zero(); 4 * 6 * ROW_CHUNK];
    // tiles[r][b][tx] = sum_k A^T[b][k] rows[r][k]: output row r, column b of each tile.
    let mut tiles = [T::zero(); 4 * 4 * ROW_CHUNK];
    for ty in 0..p.tiles_y {
        let mut tx0 = 0;
        while tx0 < p.tiles_x {
            let n = ROW_CHUNK.min(p.tiles_x - tx0);
            let column = o * p.columns + first + ty * p.tiles_x + tx0;
            for k in 0..a {
                let from: [usize; 6] = std::array::from_fn(|i| (i * a + k) * stride + column);
                let to: [usize; 6] = std::array::from_fn(|r| (r * a + k) * ROW_CHUNK);
                // SAFETY: point i * a + k < points, channel o, columns `column..column + n`:
                // inside `mm` (asserted above); rows r < M of `rows`, n <= ROW_CHUNK.
                unsafe {
                    lanewise::<F, T>(
                        Direction::Output,
                        (mm.as_ptr(), &from),
                        (rows.as_mut_ptr(), &to),
                        n,
                    )
                };
            }
            for r in 0..m {
                let from: [usize; 6] = std::array::from_fn(|k| (r * a + k) * ROW_CHUNK);
                let to: [usize; 6] = std::array::from_fn(|b| (r * m + b) * ROW_CHUNK);
                // SAFETY: inside `rows` and `tiles`, n <= ROW_CHUNK; distinct buffers.
                unsafe {
                    lanewise::<F, T>(
                        Direction::Output,
                        (rows.as_ptr(), &from),
                        (tiles.as_mut_ptr(), &to),
                        n,
                    )
                };
            }
            for r in 0..m {
                let oy = ty * m + r;
                if oy >= g.oh {
                    break;
                }
                let row = &mut y[oy * g.ow..][..g.ow];
                for tx in 0..n {
                    let ox = (tx0 + tx) * m;
                    for b in 0..m.min(g.ow - ox) {
                        row[ox + b] = tiles[(r * m + b) * ROW_CHUNK + tx];
                    }
                }
            }
            tx0 += n;
        }
    }
}
