//! The direct int8 convolution for layers with few input channels (a network's first layer:
//! 3 channels), where gathering patches costs more than the products: in channels-last
//! order the taps of one kernel row are `kW * C` contiguous bytes of one input row, so each
//! output pixel is `kH` runs of 4-byte groups read from the input itself (padded once by the
//! zero point) and multiplied by weights packed per kernel row with AVX-512 VNNI.

use crate::op::conv::Geometry;
use crate::{Result, Tensor};

/// Input channels up to which the direct convolution runs.
const MAX_CHANNELS: usize = 4;
/// Output channels of one packed block: one 512-bit register of i32 sums.
const BLOCK: usize = 16;

/// Weights `[C_out, kH, kW, C]` packed as `[block][kernel row][group of 4 bytes][16 lanes]`,
/// each kernel row's `kW * C` bytes zero-padded to whole groups.
pub(super) struct DirectConv {
    groups: usize,
    blocks: usize,
    n: usize,
    packed: Vec<i8>,
}

/// The input of every image padded by the zero point to the rows and columns the windows
/// reach, each row followed by 4 spare bytes that a group read past a kernel row may touch.
pub(super) struct PaddedInput {
    data: Vec<u8>,
    row_bytes: usize,
    image_bytes: usize,
}

impl DirectConv {
    /// The packed weights (`weight` is the channels-last view `[C_out, kH, kW, C]`) when the
    /// direct convolution applies: few input channels, no dilation, kernel rows of at most 64
    /// bytes, symmetric weights (`zero_points` all 0) and a CPU with VNNI.
    pub(super) fn new(
        g: &Geometry,
        weight: &Tensor,
        zero_points: &[i64],
    ) -> Result<Option<DirectConv>> {
        let row = g.kw * g.c_in;
        let applies = g.c_in <= MAX_CHANNELS
            && g.params.dilation == [1, 1]
            && row <= 64
            && zero_points.iter().all(|&z| z == 0)
            && vnni_available();
        if !applies {
            return Ok(None);
        }
        let weight = weight.to_vec::<i8>()?;
        if weight.len() != g.c_out * g.kh * row {
            return Ok(None);
        }
        let groups = row.div_ceil(4);
        let blocks = g.c_out.div_ceil(BLOCK);
        let mut packed = vec![0i8; blocks * g.kh * groups * 64];
        for co in 0..g.c_out {
            let (block, lane) = (co / BLOCK, co % BLOCK);
            for i in 0..g.kh {
                let taps = &weight[(co * g.kh + i) * row..][..row];
                for (t, &v) in taps.iter().enumerate() {
                    let (q, byte) = (t / 4, t % 4);
                    packed[((block * g.kh + i) * groups + q) * 64 + lane * 4 + byte] = v;
                }
            }
        }
        Ok(Some(DirectConv {
            groups,
            blocks,
            n: g.c_out,
            packed,
        }))
    }

    /// `x [N, H, W, C]` padded by `pad` (the input's zero point, which stands for 0.0).
    pub(super) fn pad(&self, g: &Geometry, x: &[u8], pad: u8) -> PaddedInput {
        let p = &g.params;
        let c = g.c_in;
        let rows = (g.h + p.padding[0]).max((g.oh.max(1) - 1) * p.stride[0] + g.kh);
        let cols = (g.w + p.padding[1]).max((g.ow.max(1) - 1) * p.stride[1] + g.kw);
        let row_bytes = cols * c + 4;
        let image_bytes = rows * row_bytes;
        let mut data = vec![pad; g.n * image_bytes];
        for img in 0..g.n {
            for y in 0..g.h {
                let src = &x[(img * g.h + y) * g.w * c..][..g.w * c];
                let at = img * image_bytes + (y + p.padding[0]) * row_bytes + p.padding[1] * c;
                data[at..at + g.w * c].copy_from_slice(src);
            }
        }
        PaddedInput {
            data,
            row_bytes,
            image_bytes,
        }
    }

    /// The raw sums `acc [count, C_out]` of output rows `first..first + count` (row `r` is
    /// image `r / (oH*oW)`, pixel `r % (oH*oW)`).
    pub(super) fn rows(&self, g: &Geometry, input: &PaddedInput, first: usize, acc: &mut [i32]) {
        let count = acc.len() / self.n.max(1);
        let positions = (g.oh * g.ow).max(1);
        let last = first + count;
        // The reads below stay inside the padded images and `acc` holds `count` rows: checked
        // once here, so that the kernel's unchecked loads are in bounds.
        assert!(
            last <= g.n * positions
                && input.data.len() >= g.n * input.image_bytes
                && self.packed.len() >= self.blocks * g.kh * self.groups * 64
                && acc.len() >= count * self.n,
            "direct int8 conv: {count} rows from {first} outside the padded input"
        );
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `new` returned this value only where the CPU runs VNNI, and the bounds of
        // every access were checked above.
        unsafe {
            x86::rows(self, g, input, first, acc)
        }
        #[cfg(not(target_arch = "x86_64"))]
        unreachable!("the direct int8 conv is only built where VNNI runs");
    }
}

fn vnni_available() -> bool {
    super::gemm_i8::Int8Kernel::Avx512Vnni.is_available()
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{BLOCK, DirectConv, PaddedInput};
    use crate::op::conv::Geometry;
    use std::arch::x86_64::*;

    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    pub(super) unsafe fn rows(
        conv: &DirectConv,
        g: &Geometry,
        input: &PaddedInput,
        first: usize,
        acc: &mut [i32],
    ) {
        let p = &g.params;
        let (c, n, groups) = (g.c_in, conv.n, conv.groups);
        let positions = (g.oh * g.ow).max(1);
        let (mut img, position) = (first / positions, first % positions);
        let (mut oy, mut ox) = (position / g.ow.max(1), position % g.ow.max(1));
        for out in acc.chunks_exact_mut(n.max(1)) {
            let origin =
                img * input.image_bytes + oy * p.stride[0] * input.row_bytes + ox * p.stride[1] * c;
            for block in 0..conv.blocks {
                // SAFETY (whole block): `rows` checked that every window's rows, plus the 4
                // spare bytes, lie inside `input.data`, that `packed` holds every block, and
                // that `out` holds `n` sums.
                unsafe {
                    let mut sum = _mm512_setzero_si512();
                    for i in 0..g.kh {
                        let row = input.data.as_ptr().add(origin + i * input.row_bytes);
                        let weights = conv.packed.as_ptr().add((block * g.kh + i) * groups * 64);
                        for q in 0..groups {
                            let word = (row.add(4 * q) as *const i32).read_unaligned();
                            let w = _mm512_loadu_si512(weights.add(q * 64) as *const __m512i);
                            sum = _mm512_dpbusd_epi32(sum, _mm512_set1_epi32(word), w);
                        }
                    }
                    let j = block * BLOCK;
                    let lanes = (n - j).min(BLOCK);
                    let mask: __mmask16 = if lanes == BLOCK {
                        !0
                    } else {
                        (1u16 << lanes) - 1
                    };
                    _mm512_mask_storeu_epi32(out.as_mut_ptr().add(j), mask, sum);
                }
            }
            ox += 1;
            if ox == g.ow {
                (ox, oy) = (0, oy + 1);
                if oy == g.oh {
                    (oy, img) = (0, img + 1);
                }
            }
        }
    }
}
