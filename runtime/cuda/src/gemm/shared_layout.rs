//! The shared memory of a GEMM block: the A and B tiles of one step, then (reusing the same
//! bytes once the last step is done) the block's accumulator tile, staged so the epilogue
//! visits output points in row-major order with neighbouring threads on neighbouring columns.
//! Rows are padded by [`ROW_PAD_BYTES`] against bank conflicts.

use super::config::{MathPath, ROW_PAD_BYTES, Tiles};
use super::element::Element;

/// The name of the one shared array.
pub const TILES_ARRAY: &str = "gemm_tiles";

/// Byte offsets and row pitches of the tiles in shared memory.
#[derive(Debug, Clone, Copy)]
pub struct SharedLayout {
    /// Bytes between consecutive rows of the A tile: rows are k on the FMA path (each row
    /// `bm` elements), outer indices on the tensor-core path (each row `bk` elements).
    pub a_row: usize,
    pub b_offset: usize,
    pub b_row: usize,
    /// Bytes of one element as staged (f32 tf32 values stay 4 bytes).
    pub element: usize,
    /// Bytes between rows (output rows) of the staged accumulator tile.
    pub c_row: usize,
    pub acc: usize,
    pub total: usize,
}

impl SharedLayout {
    pub fn new(path: MathPath, tiles: Tiles, element: Element) -> SharedLayout {
        let staged = match path {
            MathPath::MmaTf32 => 4,
            _ => element.bytes(),
        };
        let acc = if element == Element::F64 { 8 } else { 4 };
        let (a_rows, a_row, b_rows, b_row) = if path.is_mma() {
            (
                tiles.bm,
                tiles.bk * staged + ROW_PAD_BYTES,
                tiles.bn,
                tiles.bk * staged + ROW_PAD_BYTES,
            )
        } else {
            (
                tiles.bk,
                tiles.bm * staged + ROW_PAD_BYTES,
                tiles.bk,
                tiles.bn * staged + ROW_PAD_BYTES,
            )
        };
        let b_offset = a_rows * a_row;
        let operands = b_offset + b_rows * b_row;
        let c_row = tiles.bn * acc + ROW_PAD_BYTES;
        let total = operands.max(tiles.bm * c_row).div_ceil(16) * 16;
        SharedLayout {
            a_row,
            b_offset,
            b_row,
            element: staged,
            c_row,
            acc,
            total,
        }
    }
}
