//! The tile sizes of the generated GEMM and convolution kernels, in one place, and the math
//! path a product runs on (FMA on CUDA cores, or tensor cores through `mma.sync`).

use tessera_tensor::DType;

/// A block's share of the product: a `bm x bn` tile of the output, `bk` values of the reduced
/// dimension staged in shared memory per step, `threads` threads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tiles {
    pub bm: usize,
    pub bn: usize,
    pub bk: usize,
    pub threads: usize,
}

/// The FMA path: 256 threads in a 16 x 16 grid, each accumulating a 4 x 4 micro-tile of the
/// 64 x 64 block tile in registers; 8 values of k per step.
pub const FMA_TILES: Tiles = Tiles {
    bm: 64,
    bn: 64,
    bk: 8,
    threads: 256,
};

/// Rows and columns of the FMA path's per-thread micro-tile.
pub const FMA_MICRO: usize = 4;

/// The tensor-core path: 4 warps in a 2 x 2 grid, each computing a 32 x 32 warp tile as
/// 2 x 4 `mma.sync` tiles of 16 x 8; 16 values of k per step (one `m16n8k16` for f16/bf16,
/// two `m16n8k8` for tf32).
pub const MMA_TILES: Tiles = Tiles {
    bm: 64,
    bn: 64,
    bk: 16,
    threads: 128,
};

/// Rows and columns of one warp's tile on the tensor-core path.
pub const MMA_WARP_TILE: usize = 32;

/// Bytes of padding at the end of each shared-memory row, so the threads of a warp reading a
/// column (or a fragment) hit distinct banks; 16 keeps rows 16-byte aligned for vector access.
pub const ROW_PAD_BYTES: usize = 16;

/// What the caller allows beyond exact arithmetic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct GemmOptions {
    /// f32 products on tensor cores with their inputs rounded to tf32 (10-bit mantissa,
    /// `cvt.rna.tf32.f32`), accumulated in f32: about 1e-3 relative error, as PyTorch's
    /// `allow_tf32`. Off by default: f32 products then accumulate in f32 FMA.
    pub allow_tf32: bool,
}

/// How a kernel's products are computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MathPath {
    /// `fma.rn.f32`, f32 accumulation.
    FmaF32,
    /// `fma.rn.f64`, f64 accumulation.
    FmaF64,
    /// `mma.sync.aligned.m16n8k8` on tf32-rounded f32 inputs, f32 accumulation.
    MmaTf32,
    /// `mma.sync.aligned.m16n8k16` on f16 inputs, f32 accumulation.
    MmaF16,
    /// `mma.sync.aligned.m16n8k16` on bf16 inputs, f32 accumulation.
    MmaBf16,
}

impl MathPath {
    /// The path for elements of `dtype` under `options`, or `None` for a non-float dtype.
    pub fn choose(dtype: DType, options: GemmOptions) -> Option<MathPath> {
        Some(match dtype {
            DType::F64 => MathPath::FmaF64,
            DType::F32 if options.allow_tf32 => MathPath::MmaTf32,
            DType::F32 => MathPath::FmaF32,
            DType::F16 => MathPath::MmaF16,
            DType::BF16 => MathPath::MmaBf16,
            _ => return None,
        })
    }

    /// Whether the path runs on tensor cores.
    pub fn is_mma(self) -> bool {
        matches!(
            self,
            MathPath::MmaTf32 | MathPath::MmaF16 | MathPath::MmaBf16
        )
    }

    /// The block's tiles.
    pub fn tiles(self) -> Tiles {
        if self.is_mma() { MMA_TILES } else { FMA_TILES }
    }
}
