//! The Winograd input and output transforms of bands of tiles (consecutive whole tile rows,
//! or chunks of one wide row), eight tiles at a time: each step reads its values for eight
//! consecutive tiles as plain arrays ([`Lanes`]), which the compiler turns into vector
//! instructions, and applies the same arithmetic as one tile alone (the same operations in
//! the same order, so every lane rounds as a scalar would). A band's last tiles past a
//! multiple of eight run as one more step whose missing lanes are zeros, read and written
//! element by element.

use super::{Plan, Shared};
use crate::Float;
use std::mem::MaybeUninit;
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
/// is `src[from[r] + e * step]` and result `k` goes to `dst[to[k] + e]`.
///
/// # Safety
/// Every `from[r] + e * step` (`r < A`, `e < len`) is inside the allocation `src` points
/// into and every `to[k] + e` inside the one `dst` points into, and no written element is
/// read.
#[inline(always)]
unsafe fn lanewise<F: Transform, T: Float>(
    direction: Direction,
    (src, from, step): (*const T, &[usize; 6], usize),
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
            *value = if step == 1 {
                // SAFETY: `from[r] + e + LANES <= from[r] + len`, inside `src` (the caller).
                Lanes(unsafe { src.add(from[r] + e).cast::<[T; LANES]>().read_unaligned() })
            } else {
                // SAFETY: `e + lane < len`, inside `src` (the caller).
                Lanes(std::array::from_fn(|lane| unsafe {
                    *src.add(from[r] + (e + lane) * step)
                }))
            };
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
            *v = unsafe { *src.add(from[r] + (e + lane) * step) };
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

/// Tiles of one row transformed together when a row holds more than [`ROW_CHUNK`] tiles.
const ROW_CHUNK: usize = 16;
/// Tiles a band of whole tile rows holds at most: every image of ResNet-18 (up to 14 x 14
/// tiles) is one band. A band buffer holds up to 36 values per tile (144 KiB for the input
/// transform's two in f64), well inside a thread's stack.
const BAND: usize = 256;

/// Consecutive tiles transformed together, whose columns of `v` and `mm` are consecutive:
/// `rows` whole tile rows from row `ty` (`tx0 == 0`, `n == tiles_x`), or, when a row holds
/// more than [`ROW_CHUNK`] tiles, the `n` tiles of row `ty` from `tx0` on (`rows == 1`).
#[derive(Debug, Clone, Copy)]
struct Band {
    ty: usize,
    rows: usize,
    tx0: usize,
    n: usize,
}

impl Band {
    fn tiles(&self) -> usize {
        self.rows * self.n
    }
}

/// The bands covering an image's tiles, in order.
fn bands(p: &Plan) -> impl Iterator<Item = Band> {
    let (tiles_y, tiles_x) = (p.tiles_y, p.tiles_x);
    let wide = tiles_x > ROW_CHUNK;
    let rows = if wide { 1 } else { BAND / tiles_x.max(1) };
    let chunks = if wide { tiles_x.div_ceil(ROW_CHUNK) } else { 1 };
    (0..tiles_y).step_by(rows).flat_map(move |ty| {
        (0..chunks).map(move |chunk| {
            let tx0 = chunk * ROW_CHUNK;
            Band {
                ty,
                rows: rows.min(tiles_y - ty),
                tx0,
                n: if wide {
                    ROW_CHUNK.min(tiles_x - tx0)
                } else {
                    tiles_x
                },
            }
        })
    })
}

/// A band buffer of up to 36 values per tile. The band buffers are left uninitialised:
/// zeroing them would cost as much as a small channel's transform, and every pass reads only
/// what the step before it wrote.
type Scratch<T> = [MaybeUninit<T>; 6 * 6 * BAND];

/// Transforms channel `c` of one image (`x` is that channel's `H x W` plane) into
/// `v[points][C_in][columns]` at the columns `first..first + tiles`, a band of tiles at a
/// time: the band's input tiles are gathered into `d[r][j][tile]` (row r, column j of each
/// tile; the columns neighbouring tiles share are copied into both), then both passes run
/// over all the band's tiles: `B^T d` down the columns, then `(B^T d) B` along the rows.
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
    // line: one input row's columns from the band's first tile on (zero outside the input).
    let mut line = [T::zero(); 4 * ROW_CHUNK + 2];
    // d[r][j][tile], then t[i][j][tile] = sum_r B^T[i][r] d[r][j]: rows of `len` tiles.
    let mut d: Scratch<T> = [const { MaybeUninit::uninit() }; 6 * 6 * BAND];
    let mut t: Scratch<T> = [const { MaybeUninit::uninit() }; 6 * 6 * BAND];
    let (d, t) = (d.as_mut_ptr().cast::<T>(), t.as_mut_ptr().cast::<T>());
    for b in bands(p) {
        let (n, len) = (b.n, b.tiles());
        // The columns the band's tiles read: tile tx reads tx * m .. tx * m + a.
        let line_len = (n - 1) * m + a;
        let x0 = (b.tx0 * m) as isize - pad[1];
        // The line's columns inside the input: lo..hi.
        let lo = (-x0).clamp(0, line_len as isize) as usize;
        let hi = (g.w as isize - x0).clamp(lo as isize, line_len as isize) as usize;
        for band_row in 0..b.rows {
            let ty = b.ty + band_row;
            for r in 0..a {
                let iy = (ty * m + r) as isize - pad[0];
                let line = &mut line[..line_len];
                if iy < 0 || iy >= g.h as isize {
                    line.fill(T::zero());
                } else {
                    line[..lo].fill(T::zero());
                    if lo < hi {
                        let start = iy as usize * g.w + (x0 + lo as isize) as usize;
                        line[lo..hi].copy_from_slice(&x[start..][..hi - lo]);
                    }
                    line[hi..].fill(T::zero());
                }
                for j in 0..a {
                    let row = (r * a + j) * len + band_row * n;
                    for tx in 0..n {
                        // SAFETY: row + tx < (r * a + j + 1) * len <= 36 * BAND, inside `d`.
                        unsafe { d.add(row + tx).write(line[tx * m + j]) };
                    }
                }
            }
        }
        // Down the columns: t[i] = sum_r B^T[i][r] d[r], elementwise over a * len values.
        let at: [usize; 6] = std::array::from_fn(|r| r * a * len);
        // SAFETY: rows r < A of a * len values, inside both buffers (a * a * len <= 36 *
        // BAND), all of `d`'s written above; `d` and `t` are distinct.
        unsafe { lanewise::<F, T>(Direction::Input, (d, &at, 1), (t, &at), a * len) };
        // Along the rows: tile e of the band reads t[i][j][e] and writes point i * a + k of
        // its column.
        let column = first + b.ty * p.tiles_x + b.tx0;
        for i in 0..a {
            let from: [usize; 6] = std::array::from_fn(|j| (i * a + j) * len);
            let to: [usize; 6] =
                std::array::from_fn(|k| ((i * a + k) * g.c_in + c) * p.columns + column);
            // SAFETY: reads inside `t`, written by the pass above; writes: point < points,
            // c < C_in, column + len <= columns, inside `v`, in this task's channel and
            // image (the caller).
            unsafe {
                lanewise::<F, T>(
                    Direction::Input,
                    (t.cast_const(), &from, 1),
                    (v.get(), &to),
                    len,
                )
            };
        }
    }
}

/// The output transform of output channel `o` of one image, whose tiles start at column
/// `first` of the products `mm` (laid out as [`Plan::product_at`] says), into that channel's
/// `oH x oW` plane, a band of tiles at a time: both passes run over all the band's tiles
/// (consecutive columns of `mm`, [`Plan::column_step`] apart), and the results are scattered
/// to the band's output rows.
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
    let (stride, step) = (p.point_len(), p.column_step(o));
    assert!(
        mm.len() >= a * a * stride && o < g.c_out && first + p.tiles() <= p.columns,
        "output_tiles: channel {o}, tiles from {first} outside products of {} elements",
        mm.len()
    );
    // rows[r][k][tile] = sum_i A^T[r][i] mm[i][k] for the band's tiles, then tiles[r][b][tile]
    // = sum_k A^T[b][k] rows[r][k]: output row r, column b of each tile; rows of `len` tiles,
    // uninitialised as [`Scratch`].
    let mut rows = [const { MaybeUninit::<T>::uninit() }; 4 * 6 * BAND];
    let mut tiles = [const { MaybeUninit::<T>::uninit() }; 4 * 4 * BAND];
    let (rows, tiles) = (
        rows.as_mut_ptr().cast::<T>(),
        tiles.as_mut_ptr().cast::<T>(),
    );
    for band in bands(p) {
        let (n, len) = (band.n, band.tiles());
        let column = p.product_at(o, first + band.ty * p.tiles_x + band.tx0);
        for k in 0..a {
            let from: [usize; 6] = std::array::from_fn(|i| (i * a + k) * stride + column);
            let to: [usize; 6] = std::array::from_fn(|r| (r * a + k) * len);
            // SAFETY: point i * a + k < points, channel o, columns `first..first + tiles` a
            // step apart: inside `mm` (asserted above); rows r < M of `rows`, len <= BAND.
            // The step-1 case is its own call, so that `lanewise` inlines with a constant
            // step and reads whole vectors.
            unsafe {
                if step == 1 {
                    lanewise::<F, T>(Direction::Output, (mm.as_ptr(), &from, 1), (rows, &to), len)
                } else {
                    lanewise::<F, T>(
                        Direction::Output,
                        (mm.as_ptr(), &from, step),
                        (rows, &to),
                        len,
                    )
                }
            };
        }
        for r in 0..m {
            let from: [usize; 6] = std::array::from_fn(|k| (r * a + k) * len);
            let to: [usize; 6] = std::array::from_fn(|b| (r * m + b) * len);
            // SAFETY: inside `rows` (all written by the pass above) and `tiles`, len <= BAND;
            // distinct buffers.
            unsafe {
                lanewise::<F, T>(
                    Direction::Output,
                    (rows.cast_const(), &from, 1),
                    (tiles, &to),
                    len,
                )
            };
        }
        for row in 0..band.rows {
            let ty = band.ty + row;
            for r in 0..m {
                let oy = ty * m + r;
                if oy >= g.oh {
                    break;
                }
                let out = &mut y[oy * g.ow..][..g.ow];
                for tx in 0..n {
                    let ox = (band.tx0 + tx) * m;
                    for b in 0..m.min(g.ow - ox) {
                        // SAFETY: tile row * n + tx < len of output row r * m + b < M * M,
                        // written by the second pass.
                        out[ox + b] = unsafe { *tiles.add((r * m + b) * len + row * n + tx) };
                    }
                }
            }
        }
    }
}
