//! Running a compiled kernel's outermost loop in chunks on the thread pool (rayon's, sized by
//! `tessera::tensor::set_num_threads`) when its schedule marks that loop parallel. Chunks are
//! taken by work stealing, several per thread, so a thread slowed by a busy core takes fewer
//! of them instead of holding every other thread at a barrier; idle workers sleep. A
//! convolution kernel's chunks each run the call and then the epilogue for their own images on
//! one thread, so the epilogue reads the convolution's output from that core's cache.

use rayon::prelude::*;

/// Chunks per thread: enough that a thread on a loaded core can hand work to the others.
const CHUNKS_PER_THREAD: usize = 4;

/// The buffer pointer table shared by the chunks.
struct Buffers(*const *mut u8);

// SAFETY: the pointers are only read; each chunk writes the outputs of its own iterations of
// the outermost loop, which the schedule marks parallel only when those writes are disjoint.
unsafe impl Sync for Buffers {}

/// Runs `entry(buffers, begin, end)` over `start..end` in chunks of whole multiples of `align`
/// iterations (the vector step of a loop that is also the innermost), in parallel.
///
/// # Safety
/// `entry` is a kernel whose iterations of the outermost loop write disjoint outputs, and
/// `buffers` satisfies its contract for every range of `start..end`.
pub(crate) unsafe fn run_split(
    entry: unsafe extern "C" fn(*const *mut u8, i64, i64),
    buffers: *const *mut u8,
    range: (i64, i64),
    align: i64,
) {
    // SAFETY: the caller's contract.
    unsafe { split(entry, buffers, range, align, CHUNKS_PER_THREAD, false) }
}

/// [`run_split`] for a GEMM kernel: each chunk calls the GEMM on its own rows on one thread
/// (no nested split, [`tessera_kernel::gemm::serial_gemm`]) and applies the epilogue to them
/// while they are in cache; `align` iterations make whole micro-kernel row blocks.
///
/// # Safety
/// As [`run_split`].
pub(crate) unsafe fn run_gemm_split(
    entry: unsafe extern "C" fn(*const *mut u8, i64, i64),
    buffers: *const *mut u8,
    range: (i64, i64),
    align: i64,
) {
    // SAFETY: the caller's contract.
    unsafe { split(entry, buffers, range, align, GEMM_CHUNKS_PER_THREAD, true) }
}

/// Chunks per thread of a GEMM kernel's rows: one. Each share reads the whole right operand
/// (the `gemm` crate packs it per call, or reads a transposed weight in place), so more
/// chunks multiply that traffic: on two threads the MLP's inference took 1.1 ms with one
/// chunk per thread, 1.2 ms with two and 1.4 ms with four (BENCHMARKS.md).
const GEMM_CHUNKS_PER_THREAD: usize = 1;

/// Runs `entry` over `start..end` in about `per_thread` chunks per thread of whole multiples
/// of `align` iterations, each under [`tessera_kernel::gemm::serial_gemm`] when `serial`.
///
/// # Safety
/// As [`run_split`].
unsafe fn split(
    entry: unsafe extern "C" fn(*const *mut u8, i64, i64),
    buffers: *const *mut u8,
    (start, end): (i64, i64),
    align: i64,
    per_thread: usize,
    serial: bool,
) {
    let threads = rayon::current_num_threads().max(1) as i64;
    let count = (end - start).max(1);
    let chunks = (threads * per_thread.max(1) as i64).min(count);
    let chunk = (count + chunks - 1) / chunks;
    let chunk = (chunk + align - 1) / align * align;
    let buffers = Buffers(buffers);
    let chunk = chunk.max(1);
    let count = (end - start + chunk - 1) / chunk;
    (0..count).into_par_iter().for_each(|c| {
        let buffers = &buffers;
        let begin = start + c * chunk;
        let stop = (begin + chunk).min(end);
        // SAFETY: the caller's contract, for the range `begin..stop` of `start..end`.
        let run = || unsafe { entry(buffers.0, begin, stop) };
        if serial {
            tessera_kernel::gemm::serial_gemm(run);
        } else {
            run();
        }
    });
}

/// True when splitting a loop of `end` iterations can use more than one thread.
pub(crate) fn worth_splitting(end: i64) -> bool {
    end >= 2 && rayon::current_num_threads() > 1
}

/// What a chunk of a convolution kernel runs: the call for images `begin..end`, then the
/// kernel's code for the same images.
pub(crate) type ChunkStep<'a> = dyn Fn(i64, i64) -> tessera_kernel::Result<()> + 'a;

/// A chunk step the pool's threads share.
struct SharedStep<'a>(&'a ChunkStep<'a>);

// SAFETY: a step only reads the pointer table and writes the outputs of its own images (the
// convolution's scratch and the kernel's outputs at those images), which the schedule marks
// parallel only when those writes are disjoint.
unsafe impl Sync for SharedStep<'_> {}

/// Runs `step(begin, end)` over `0..end` in chunks of `images` iterations, in parallel,
/// stopping at the first error.
///
/// # Safety
/// `step` writes only the outputs of its own iterations, and is valid for every range of
/// `0..end`.
pub(crate) unsafe fn run_conv_chunks(
    step: &ChunkStep<'_>,
    end: i64,
    images: i64,
) -> tessera_kernel::Result<()> {
    let images = images.max(1);
    let count = (end + images - 1) / images;
    let shared = SharedStep(step);
    (0..count).into_par_iter().try_for_each(|c| {
        let shared = &shared;
        let begin = c * images;
        (shared.0)(begin, (begin + images).min(end))
    })
}

/// One kernel of a launch group as the pool runs it: its entry point and pointer table, the
/// range `0..end` of its outermost loop, the points of its nest per iteration of that loop,
/// and the multiple of iterations a share of it starts at.
pub(crate) struct GroupPiece {
    pub entry: unsafe extern "C" fn(*const *mut u8, i64, i64),
    pub buffers: *const *mut u8,
    pub end: i64,
    pub points_per_iteration: i64,
    pub align: i64,
}

/// The pieces of a launch group the pool's threads share.
struct SharedPieces<'a>(&'a [GroupPiece]);

// SAFETY: the pointer tables are only read; each share writes the outputs of its own
// iterations of each kernel, and a launch group's kernels write disjoint buffers.
unsafe impl Sync for SharedPieces<'_> {}

/// Runs the kernels `pieces` of one launch group in one parallel region: their points laid
/// end to end, cut into about [`CHUNKS_PER_THREAD`] chunks per thread, each chunk calling
/// every kernel it spans on its own iterations (a cut inside a kernel moves up to a multiple
/// of the kernel's `align`, so each kernel's vector loop and tail are the same as in one
/// call).
///
/// # Safety
/// Each piece is a kernel whose iterations of the outermost loop write disjoint outputs, its
/// `buffers` satisfy its contract for every range of `0..end`, and no piece writes what
/// another reads or writes.
pub(crate) unsafe fn run_group_split(pieces: &[GroupPiece]) {
    let points: Vec<i64> = pieces
        .iter()
        .map(|p| p.end * p.points_per_iteration.max(1))
        .collect();
    let total: i64 = points.iter().sum();
    if total == 0 {
        return;
    }
    let threads = rayon::current_num_threads().max(1) as i64;
    let chunks = (threads * CHUNKS_PER_THREAD as i64).min(total).max(1);
    let chunk = (total + chunks - 1) / chunks;
    let count = (total + chunk - 1) / chunk;
    let shared = SharedPieces(pieces);
    (0..count).into_par_iter().for_each(|c| {
        let shared = &shared;
        let (from, to) = (c * chunk, ((c + 1) * chunk).min(total));
        let mut offset = 0;
        for (piece, &len) in shared.0.iter().zip(&points) {
            let begin = piece_cut(piece, from - offset);
            let stop = piece_cut(piece, to - offset);
            offset += len;
            if begin < stop {
                // SAFETY: the caller's contract, for the iterations `begin..stop` of the
                // piece, which no other chunk runs (neighbouring chunks cut at the same place).
                unsafe { (piece.entry)(piece.buffers, begin, stop) };
            }
        }
    });
}

/// The iteration of `piece` at which a cut `at` points into it falls: the first iteration
/// not before it, moved up to a multiple of the piece's alignment, within `0..=end`.
fn piece_cut(piece: &GroupPiece, at: i64) -> i64 {
    if at <= 0 {
        return 0;
    }
    let per = piece.points_per_iteration.max(1);
    let iteration = (at + per - 1) / per;
    let align = piece.align.max(1);
    (((iteration + align - 1) / align) * align).min(piece.end)
}
