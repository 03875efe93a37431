//! The int8 GEMM behind the quantized ops: `c[m, n] = sum_k a[m, k] * b[n, k]` with `a` u8
//! activations and `b` i8 weights, both row-major along `k`, accumulated exactly in i32.
//! Blocked for cache (a 64-row panel of `b` against 4-row strips of `a`), parallel over row
//! blocks with rayon, and vectorised with AVX-512 VNNI, AVX-512BW or AVX2, chosen at run time,
//! with a portable scalar fallback. Every path computes the same integers: the SIMD paths widen
//! to i16 or use `vpdpbusd`, which never saturate, unlike `vpmaddubsw`.

use crate::{Result, TensorError};
use rayon::prelude::*;
use std::sync::OnceLock;

/// Below this many multiply-adds the GEMM runs on the calling thread.
const PARALLEL_WORK: usize = 1 << 18;
/// Rows of `b` (output columns) kept hot in cache while strips of `a` stream past.
const PANEL: usize = 64;

/// One implementation of the int8 micro-kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Int8Kernel {
    /// Portable Rust, the reference for the others.
    Scalar,
    /// 256-bit: u8 and i8 widened to i16, `vpmaddwd`.
    Avx2,
    /// 512-bit: u8 and i8 widened to i16, `vpmaddwd`.
    Avx512Bw,
    /// 512-bit `vpdpbusd` (u8 x i8 dot products of 4 into i32).
    Avx512Vnni,
}

impl Int8Kernel {
    /// The kernels this CPU can run, scalar first.
    pub fn available() -> Vec<Int8Kernel> {
        let mut kernels = vec![Int8Kernel::Scalar];
        #[cfg(target_arch = "x86_64")]
        {
            if is_x86_feature_detected!("avx2") {
                kernels.push(Int8Kernel::Avx2);
            }
            if is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx512bw") {
                kernels.push(Int8Kernel::Avx512Bw);
                if is_x86_feature_detected!("avx512vnni") {
                    kernels.push(Int8Kernel::Avx512Vnni);
                }
            }
        }
        kernels
    }

    /// The fastest kernel this CPU can run (detected once).
    pub fn best() -> Int8Kernel {
        static BEST: OnceLock<Int8Kernel> = OnceLock::new();
        *BEST.get_or_init(|| {
            Int8Kernel::available()
                .last()
                .copied()
                .unwrap_or(Int8Kernel::Scalar)
        })
    }

    /// Whether this CPU can run the kernel.
    pub fn is_available(self) -> bool {
        Int8Kernel::available().contains(&self)
    }
}

/// `c[m x n] = a[m x k] * b[n x k]^T` with the best kernel, parallel over rows when large.
pub fn gemm_u8i8(
    a: &[u8],
    b: &[i8],
    c: &mut [i32],
    (m, n, k): (usize, usize, usize),
) -> Result<()> {
    gemm_u8i8_with(Int8Kernel::best(), a, b, c, (m, n, k), true)
}

/// [`gemm_u8i8`] with a chosen kernel; `parallel` allows splitting rows over the thread pool.
/// A kernel the CPU cannot run falls back to the scalar one; a slice shorter than its matrix
/// (`a`: `m*k`, `b`: `n*k`, `c`: `m*n`) is an error.
pub fn gemm_u8i8_with(
    kernel: Int8Kernel,
    a: &[u8],
    b: &[i8],
    c: &mut [i32],
    (m, n, k): (usize, usize, usize),
    parallel: bool,
) -> Result<()> {
    gemm_u8i8_packed(a, &PackedInt8::new(kernel, b, n, k)?, c, m, parallel)
}

/// The i8 operand `b [n, k]` of the int8 GEMM laid out for one kernel (packed into 16-column
/// blocks for VNNI, as given for the others), so that constant weights are packed once.
#[derive(Debug, Clone)]
pub struct PackedInt8 {
    kernel: Int8Kernel,
    n: usize,
    k: usize,
    data: Vec<i8>,
}

impl PackedInt8 {
    /// `b [n, k]` for `kernel`, or for the scalar kernel when the CPU cannot run `kernel`;
    /// an error when `b` holds fewer than `n * k` values.
    pub fn new(kernel: Int8Kernel, b: &[i8], n: usize, k: usize) -> Result<PackedInt8> {
        if n.checked_mul(k).is_none_or(|e| b.len() < e) {
            return Err(TensorError::invalid(
                "gemm_u8i8",
                format!(
                    "a weight of {} elements is too short for n={n}, k={k}",
                    b.len()
                ),
            ));
        }
        let kernel = if kernel == Int8Kernel::Scalar || kernel.is_available_cached() {
            kernel
        } else {
            Int8Kernel::Scalar
        };
        let data = if kernel == Int8Kernel::Avx512Vnni && n > 0 && k > 0 {
            pack(b, n, k)
        } else {
            b[..n * k].to_vec()
        };
        Ok(PackedInt8 { kernel, n, k, data })
    }

    /// The output columns `n` and the depth `k`.
    pub fn dims(&self) -> (usize, usize) {
        (self.n, self.k)
    }
}

/// `c[m x n] = a[m x k] * b^T` on packed `b`, rows split over the thread pool when `parallel`
/// and large; an error when `a` or `c` is shorter than its matrix.
pub fn gemm_u8i8_packed(
    a: &[u8],
    b: &PackedInt8,
    c: &mut [i32],
    m: usize,
    parallel: bool,
) -> Result<()> {
    let (n, k, kernel) = (b.n, b.k, b.kernel);
    let fits =
        |len: usize, rows: usize, cols: usize| rows.checked_mul(cols).is_some_and(|e| len >= e);
    if !fits(a.len(), m, k) || !fits(c.len(), m, n) {
        return Err(TensorError::invalid(
            "gemm_u8i8",
            format!(
                "operands of {} and {} elements are too short for m={m}, n={n}, k={k}",
                a.len(),
                c.len()
            ),
        ));
    }
    let c = &mut c[..m * n];
    if m == 0 || n == 0 {
        return Ok(());
    }
    if k == 0 {
        c.fill(0);
        return Ok(());
    }
    let strip = |a: &[u8], c: &mut [i32]| {
        if kernel == Int8Kernel::Avx512Vnni {
            gemm_rows_packed(a, &b.data, c, n, k)
        } else {
            gemm_rows(kernel, a, &b.data, c, n, k)
        }
    };
    let threads = rayon::current_num_threads();
    if !parallel || threads == 1 || m * n * k < PARALLEL_WORK || m < 8 {
        strip(&a[..m * k], c);
        return Ok(());
    }
    // About four tasks per thread, in strips of whole 4-row groups.
    let rows = m.div_ceil(threads * 4).div_ceil(4).max(1) * 4;
    c.par_chunks_mut(rows * n)
        .zip(a[..m * k].par_chunks(rows * k))
        .for_each(|(c, a)| strip(a, c));
    Ok(())
}

/// Columns per packed block: one 512-bit register of i32 sums.
const BLOCK: usize = 16;

/// `b [n, k]` as `ceil(n/16)` blocks, each `ceil(k/4)` groups of 64 bytes: column `j`'s
/// bytes `4q..4q+4` at `(block * quads + q) * 64 + (j % 16) * 4`, zero-padded past `n` and `k`.
/// One `vpdpbusd` of a group with four broadcast bytes of a row of `a` then adds 16 columns'
/// partial dot products at once, so no horizontal sums are needed.
fn pack(b: &[i8], n: usize, k: usize) -> Vec<i8> {
    let quads = k.div_ceil(4);
    let blocks = n.div_ceil(BLOCK);
    let mut packed = vec![0i8; blocks * quads * 64];
    let fill = |block: usize, dst: &mut [i8]| {
        for lane in 0..BLOCK.min(n - block * BLOCK) {
            let column = &b[(block * BLOCK + lane) * k..][..k];
            for (q, bytes) in column.chunks(4).enumerate() {
                let at = q * 64 + lane * 4;
                dst[at..at + bytes.len()].copy_from_slice(bytes);
            }
        }
    };
    if n * k >= PARALLEL_WORK / 4 {
        packed
            .par_chunks_mut((quads * 64).max(1))
            .enumerate()
            .for_each(|(block, dst)| fill(block, dst));
    } else {
        packed
            .chunks_mut((quads * 64).max(1))
            .enumerate()
            .for_each(|(block, dst)| fill(block, dst));
    }
    packed
}

/// [`gemm_rows`] on packed `b`: 4 rows by up to 4 blocks (64 columns) per micro-kernel call.
fn gemm_rows_packed(a: &[u8], packed: &[i8], c: &mut [i32], n: usize, k: usize) {
    let m = c.len() / n;
    let quads = k.div_ceil(4);
    let blocks = n.div_ceil(BLOCK);
    // The micro-kernel's preconditions, checked once per strip: the CPU runs VNNI, and `a`
    // and `packed` hold every row and block the loops below slice.
    assert!(
        Int8Kernel::Avx512Vnni.is_available_cached()
            && a.len() >= m * k
            && packed.len() >= blocks * quads * 64,
        "gemm_u8i8: packed VNNI strip of {m}x{n}x{k} without VNNI or with short operands"
    );
    for b0 in (0..blocks).step_by(4) {
        let nr = (blocks - b0).min(4);
        let panel = &packed[b0 * quads * 64..(b0 + nr) * quads * 64];
        for i in (0..m).step_by(4) {
            let rows = (m - i).min(4);
            let ri: [usize; 4] = std::array::from_fn(|r| (i + r).min(m - 1));
            let a_rows: [&[u8]; 4] = ri.map(|r| &a[r * k..(r + 1) * k]);
            let dst = &mut c[i * n..(i + rows) * n];
            #[cfg(target_arch = "x86_64")]
            // SAFETY: only reached with the VNNI kernel, which `gemm_u8i8_with` checked the
            // CPU runs; `panel` holds `nr` blocks of `quads` groups, rows hold `k` bytes and
            // `dst` holds `rows` rows of `n`.
            unsafe {
                match nr {
                    1 => x86::packed_vnni::<1>(&a_rows, panel, quads, k, dst, n, rows, b0 * BLOCK),
                    2 => x86::packed_vnni::<2>(&a_rows, panel, quads, k, dst, n, rows, b0 * BLOCK),
                    3 => x86::packed_vnni::<3>(&a_rows, panel, quads, k, dst, n, rows, b0 * BLOCK),
                    _ => x86::packed_vnni::<4>(&a_rows, panel, quads, k, dst, n, rows, b0 * BLOCK),
                }
            }
            #[cfg(not(target_arch = "x86_64"))]
            let _ = (a_rows, panel, dst, quads);
        }
    }
}

impl Int8Kernel {
    fn is_available_cached(self) -> bool {
        static AVAILABLE: OnceLock<Vec<Int8Kernel>> = OnceLock::new();
        AVAILABLE.get_or_init(Int8Kernel::available).contains(&self)
    }
}

/// One thread's share: every row of `a` (`c.len() / n` of them) against all of `b`.
fn gemm_rows(kernel: Int8Kernel, a: &[u8], b: &[i8], c: &mut [i32], n: usize, k: usize) {
    let m = c.len() / n;
    // `tile` runs the kernel's instructions: checked once per strip that the CPU has them.
    assert!(
        kernel == Int8Kernel::Scalar || kernel.is_available_cached(),
        "gemm_u8i8: {kernel:?} is not supported by this CPU"
    );
    for j0 in (0..n).step_by(PANEL) {
        let j1 = (j0 + PANEL).min(n);
        for i in (0..m).step_by(4) {
            // Rows past the end repeat the last row; their results are dropped.
            let ri: [usize; 4] = std::array::from_fn(|r| (i + r).min(m - 1));
            let a_rows: [&[u8]; 4] = ri.map(|r| &a[r * k..(r + 1) * k]);
            for j in (j0..j1).step_by(4) {
                let cj: [usize; 4] = std::array::from_fn(|s| (j + s).min(j1 - 1));
                let b_rows: [&[i8]; 4] = cj.map(|s| &b[s * k..(s + 1) * k]);
                let tile = tile(kernel, &a_rows, &b_rows, k);
                for (r, row) in tile.iter().enumerate().take(m - i) {
                    let dst = &mut c[(i + r) * n..];
                    for (s, v) in row.iter().enumerate().take(j1 - j) {
                        dst[j + s] = *v;
                    }
                }
            }
        }
    }
}

/// The 4x4 block of dot products of `a` rows with `b` rows (each `k` long).
fn tile(kernel: Int8Kernel, a: &[&[u8]; 4], b: &[&[i8]; 4], k: usize) -> [[i32; 4]; 4] {
    // The SIMD tiles read `k` bytes of every row: checked here, for every call.
    assert!(
        a.iter().all(|r| r.len() >= k) && b.iter().all(|r| r.len() >= k),
        "gemm_u8i8: a tile's rows are shorter than k={k}"
    );
    match kernel {
        // SAFETY: rows hold `k` bytes (checked above) and `gemm_rows` checked that the CPU
        // supports the kernel.
        #[cfg(target_arch = "x86_64")]
        Int8Kernel::Avx512Vnni => unsafe { x86::tile_vnni(a, b, k) },
        #[cfg(target_arch = "x86_64")]
        Int8Kernel::Avx512Bw => unsafe { x86::tile_avx512bw(a, b, k) },
        #[cfg(target_arch = "x86_64")]
        Int8Kernel::Avx2 => unsafe { x86::tile_avx2(a, b, k) },
        _ => tile_scalar(a, b, 0, k, [[0; 4]; 4]),
    }
}

/// Adds the dot products over `k` in `from..to` to `acc` (the reference, and the SIMD tails).
fn tile_scalar(
    a: &[&[u8]; 4],
    b: &[&[i8]; 4],
    from: usize,
    to: usize,
    mut acc: [[i32; 4]; 4],
) -> [[i32; 4]; 4] {
    for (r, a) in a.iter().enumerate() {
        for (s, b) in b.iter().enumerate() {
            let mut sum = 0i32;
            for p in from..to {
                sum += i32::from(a[p]) * i32::from(b[p]);
            }
            acc[r][s] += sum;
        }
    }
    acc
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{BLOCK, tile_scalar};
    use std::arch::x86_64::*;

    /// `dst[r, col0 + j] = a[r] . b[col0 + j]` for `rows` rows and `NR` packed blocks: per
    /// 4-byte group, each row's bytes are broadcast and `vpdpbusd` adds them times the
    /// group of 16 columns; the last group of a row shorter than a multiple of 4 is read
    /// into a zero-padded word. Columns past `n` are masked off on the store.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    #[allow(clippy::too_many_arguments)] // one micro-kernel call: operands, sizes, destination
    pub(super) unsafe fn packed_vnni<const NR: usize>(
        a: &[&[u8]; 4],
        panel: &[i8],
        quads: usize,
        k: usize,
        dst: &mut [i32],
        n: usize,
        rows: usize,
        col0: usize,
    ) {
        // Checked, not trusted: every byte the loads below reach lies inside its slice.
        assert!(
            panel.len() >= NR * quads * 64
                && quads * 4 >= k
                && a.iter().all(|r| r.len() >= k)
                && dst.len() >= rows * n
                && rows <= 4,
            "packed_vnni: operands too short for {rows} rows, {NR} blocks, k={k}"
        );
        let mut acc = [[_mm512_setzero_si512(); NR]; 4];
        let full = k / 4;
        // SAFETY: group q of block s lies at (s * quads + q) * 64 inside `panel` (NR blocks);
        // full groups read bytes 4q..4q+4 < k of each row.
        unsafe {
            let group = |s: usize, q: usize| {
                _mm512_loadu_si512(panel.as_ptr().add((s * quads + q) * 64) as *const __m512i)
            };
            for q in 0..full {
                let bv: [__m512i; NR] = std::array::from_fn(|s| group(s, q));
                for r in 0..4 {
                    let word = (a[r].as_ptr().add(4 * q) as *const i32).read_unaligned();
                    let av = _mm512_set1_epi32(word);
                    for s in 0..NR {
                        acc[r][s] = _mm512_dpbusd_epi32(acc[r][s], av, bv[s]);
                    }
                }
            }
            if full < quads {
                let bv: [__m512i; NR] = std::array::from_fn(|s| group(s, full));
                for r in 0..4 {
                    let mut bytes = [0u8; 4];
                    bytes[..k - 4 * full].copy_from_slice(&a[r][4 * full..k]);
                    let av = _mm512_set1_epi32(i32::from_le_bytes(bytes));
                    for s in 0..NR {
                        acc[r][s] = _mm512_dpbusd_epi32(acc[r][s], av, bv[s]);
                    }
                }
            }
            for (r, acc) in acc.iter().enumerate().take(rows) {
                let row = &mut dst[r * n..(r + 1) * n];
                for (s, v) in acc.iter().enumerate() {
                    let j = col0 + s * BLOCK;
                    let count = (n - j).min(BLOCK);
                    let ptr = row.as_mut_ptr().add(j);
                    if count == BLOCK {
                        _mm512_storeu_si512(ptr as *mut __m512i, *v);
                    } else {
                        _mm512_mask_storeu_epi32(ptr, ((1u32 << count) - 1) as __mmask16, *v);
                    }
                }
            }
        }
    }

    /// `vpdpbusd` on 64 bytes at a time; the tail is read with a byte mask.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    pub(super) unsafe fn tile_vnni(a: &[&[u8]; 4], b: &[&[i8]; 4], k: usize) -> [[i32; 4]; 4] {
        let mut acc = [[_mm512_setzero_si512(); 4]; 4];
        let mut p = 0;
        // SAFETY: every load reads bytes p..p+64 (or fewer, masked) of rows `k` long.
        unsafe {
            while p + 64 <= k {
                let av: [__m512i; 4] = std::array::from_fn(|r| {
                    _mm512_loadu_si512(a[r].as_ptr().add(p) as *const __m512i)
                });
                let bv: [__m512i; 4] = std::array::from_fn(|s| {
                    _mm512_loadu_si512(b[s].as_ptr().add(p) as *const __m512i)
                });
                for r in 0..4 {
                    for s in 0..4 {
                        acc[r][s] = _mm512_dpbusd_epi32(acc[r][s], av[r], bv[s]);
                    }
                }
                p += 64;
            }
            if p < k {
                let mask: __mmask64 = (1u64 << (k - p)) - 1;
                let av: [__m512i; 4] = std::array::from_fn(|r| {
                    _mm512_maskz_loadu_epi8(mask, a[r].as_ptr().add(p) as *const i8)
                });
                let bv: [__m512i; 4] =
                    std::array::from_fn(|s| _mm512_maskz_loadu_epi8(mask, b[s].as_ptr().add(p)));
                for r in 0..4 {
                    for s in 0..4 {
                        acc[r][s] = _mm512_dpbusd_epi32(acc[r][s], av[r], bv[s]);
                    }
                }
            }
        }
        acc.map(|row| row.map(|v| _mm512_reduce_add_epi32(v)))
    }

    /// 32 bytes at a time widened to i16, multiplied and summed in pairs by `vpmaddwd`.
    #[target_feature(enable = "avx512f,avx512bw")]
    pub(super) unsafe fn tile_avx512bw(a: &[&[u8]; 4], b: &[&[i8]; 4], k: usize) -> [[i32; 4]; 4] {
        let mut acc = [[_mm512_setzero_si512(); 4]; 4];
        let mut p = 0;
        // SAFETY: every load reads bytes p..p+32 of rows `k` long.
        unsafe {
            while p + 32 <= k {
                let av: [__m512i; 4] = std::array::from_fn(|r| {
                    _mm512_cvtepu8_epi16(_mm256_loadu_si256(a[r].as_ptr().add(p) as *const __m256i))
                });
                let bv: [__m512i; 4] = std::array::from_fn(|s| {
                    _mm512_cvtepi8_epi16(_mm256_loadu_si256(b[s].as_ptr().add(p) as *const __m256i))
                });
                for r in 0..4 {
                    for s in 0..4 {
                        acc[r][s] = _mm512_add_epi32(acc[r][s], _mm512_madd_epi16(av[r], bv[s]));
                    }
                }
                p += 32;
            }
        }
        let acc = acc.map(|row| row.map(|v| _mm512_reduce_add_epi32(v)));
        tile_scalar(a, b, p, k, acc)
    }

    /// 16 bytes at a time widened to i16, multiplied and summed in pairs by `vpmaddwd`.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn tile_avx2(a: &[&[u8]; 4], b: &[&[i8]; 4], k: usize) -> [[i32; 4]; 4] {
        let mut acc = [[_mm256_setzero_si256(); 4]; 4];
        let mut p = 0;
        // SAFETY: every load reads bytes p..p+16 of rows `k` long.
        unsafe {
            while p + 16 <= k {
                let av: [__m256i; 4] = std::array::from_fn(|r| {
                    _mm256_cvtepu8_epi16(_mm_loadu_si128(a[r].as_ptr().add(p) as *const __m128i))
                });
                let bv: [__m256i; 4] = std::array::from_fn(|s| {
                    _mm256_cvtepi8_epi16(_mm_loadu_si128(b[s].as_ptr().add(p) as *const __m128i))
                });
                for r in 0..4 {
                    for s in 0..4 {
                        acc[r][s] = _mm256_add_epi32(acc[r][s], _mm256_madd_epi16(av[r], bv[s]));
                    }
                }
                p += 16;
            }
        }
        let acc = acc.map(|row| row.map(|v| hsum_avx2(v)));
        tile_scalar(a, b, p, k, acc)
    }

    #[target_feature(enable = "avx2")]
    fn hsum_avx2(v: __m256i) -> i32 {
        let s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v));
        let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b01_00_11_10>(s));
        let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b10_11_00_01>(s));
        _mm_cvtsi128_si32(s)
    }
}
