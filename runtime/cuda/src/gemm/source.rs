//! Where a GEMM operand's elements come from. Each is read as a matrix of `outer x k` (A: rows
//! of the product by k; B: columns of the product by k) per batch: a strided matrix in a
//! buffer, or, for a convolution, the input image gathered on the fly (implicit im2col: the
//! element of k = (input channel, kernel row, kernel column) and outer = output pixel
//! (image, row, column) is the input pixel it reads, zero in the padding; no im2col buffer
//! exists). A convolution's two gradients gather the same way: the weight gradient reads the
//! im2col matrix with its roles swapped (outer = (input channel, tap), k = output pixel), the
//! input gradient reads the output gradient per input pixel (outer = input pixel (image, row,
//! column), k = (output channel, tap)), zero where no output pixel reads that input pixel
//! through that tap (the padding, and the pixels a stride skips). A load slot is one element a
//! thread copies into shared memory per step: its position in the tile is fixed, the tile and
//! the step move.

use super::arith::{Ints, and_pred};
use super::element::Element;
use crate::emit::{Emitter, Reg};
use crate::index::IntWidth;
use tessera_tensor::op::ConvParams;

/// Element `(batch, outer, k)` at `offset + batch * batch_stride + outer * outer_stride +
/// k * k_stride`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StridedMatrix {
    pub offset: usize,
    pub batch_stride: usize,
    pub outer_stride: usize,
    pub k_stride: usize,
}

/// A 2-D convolution over a packed `[n, c_in, h, w]` input with a packed
/// `[c_out, c_in / groups, kh, kw]` weight, as one GEMM per group: rows are the group's output
/// channels, columns the output pixels `(image, oy, ox)`, k the group's input channels times
/// the kernel window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConvGeometry {
    pub n: usize,
    pub c_in: usize,
    pub h: usize,
    pub w: usize,
    pub c_out: usize,
    pub kh: usize,
    pub kw: usize,
    pub oh: usize,
    pub ow: usize,
    pub stride: [usize; 2],
    pub padding: [usize; 2],
    pub dilation: [usize; 2],
    pub groups: usize,
}

impl ConvGeometry {
    /// The geometry of a convolution of a packed `input` by a packed `weight` with `params`,
    /// or why the shapes do not fit together.
    pub fn new(
        input: [usize; 4],
        weight: [usize; 4],
        params: ConvParams,
    ) -> std::result::Result<ConvGeometry, String> {
        let [n, c_in, h, w] = input;
        let [c_out, group_in, kh, kw] = weight;
        let p = params;
        let out = |size: usize, i: usize, k: usize| {
            let span = p.dilation[i] * (k.max(1) - 1) + 1;
            (size + 2 * p.padding[i])
                .checked_sub(span)
                .map(|d| d / p.stride[i].max(1) + 1)
        };
        let valid = p.spatial_dims == 2
            && p.groups > 0
            && c_in == group_in * p.groups
            && c_out.is_multiple_of(p.groups)
            && p.stride.iter().chain(&p.dilation).all(|&s| s > 0)
            && kh > 0
            && kw > 0;
        match (valid, out(h, 0, kh), out(w, 1, kw)) {
            (true, Some(oh), Some(ow)) => Ok(ConvGeometry {
                n,
                c_in,
                h,
                w,
                c_out,
                kh,
                kw,
                oh,
                ow,
                stride: p.stride,
                padding: p.padding,
                dilation: p.dilation,
                groups: p.groups,
            }),
            _ => Err(format!(
                "conv2d of {input:?} by {weight:?} with {p:?}: the shapes do not fit together"
            )),
        }
    }

    /// The output's shape `[n, c_out, oh, ow]`.
    pub fn output_shape(&self) -> [usize; 4] {
        [self.n, self.c_out, self.oh, self.ow]
    }

    /// Input channels per group.
    pub fn group_in(&self) -> usize {
        self.c_in / self.groups
    }

    /// Output channels per group: the GEMM's rows.
    pub fn group_out(&self) -> usize {
        self.c_out / self.groups
    }

    /// The GEMM's reduced dimension.
    pub fn k(&self) -> usize {
        self.group_in() * self.kh * self.kw
    }

    /// Output pixels of all images: the GEMM's columns.
    pub fn pixels(&self) -> usize {
        self.n * self.oh * self.ow
    }

    /// The weights of group `g` as the A operand: `[group_out x k]`, row-major.
    pub fn weight_matrix(&self) -> StridedMatrix {
        StridedMatrix {
            offset: 0,
            batch_stride: self.group_out() * self.k(),
            outer_stride: self.k(),
            k_stride: 1,
        }
    }
}

/// An operand's source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Matrix(StridedMatrix),
    /// The packed input as im2col: outer = output pixel, k = (group input channel, tap).
    Im2col(ConvGeometry),
    /// The packed input as im2col transposed: outer = (group input channel, tap), k = output
    /// pixel (the weight gradient's B).
    Im2colTransposed(ConvGeometry),
    /// The packed output gradient gathered per input pixel: outer = input pixel, k = (group
    /// output channel, tap) (the input gradient's B).
    Col2im(ConvGeometry),
}

impl Source {
    /// Whether consecutive threads should take consecutive k (else consecutive outer
    /// indices), so a warp's loads fall on neighbouring addresses.
    pub fn k_fastest(&self) -> bool {
        match self {
            Source::Matrix(m) => {
                m.k_stride == 1 || (m.outer_stride != 1 && m.k_stride < m.outer_stride)
            }
            // Neighbouring output columns read neighbouring input columns, and neighbouring
            // input columns neighbouring output-gradient columns.
            Source::Im2col(_) | Source::Col2im(_) => false,
            Source::Im2colTransposed(_) => true,
        }
    }
}

/// One operand as a kernel reads it: its source, buffer (global address), element type, and
/// extents.
pub(crate) struct Operand {
    pub source: Source,
    pub base: Reg,
    pub element: Element,
    /// Rows of A (m) or columns of B (n).
    pub outer_len: usize,
    pub k_len: usize,
}

/// A thread's element of the tile: its outer and k position within the tile (index width).
#[derive(Clone, Copy)]
pub(crate) struct Slot {
    pub outer: Reg,
    pub k: Reg,
}

/// A slot's state for one tile: whether its outer index is inside the operand, and the
/// address of its element at k0 = 0 (a strided matrix) or of its image's first channel of the
/// group with the input row and column of kernel tap (0, 0), wrapping below zero (im2col).
pub(crate) enum SlotTile {
    Matrix {
        address: Reg,
        outer_inside: Reg,
        k_stride: usize,
    },
    Im2col {
        planes: Reg,
        outer_inside: Reg,
        origin: (Reg, Reg),
        geometry: ConvGeometry,
    },
    /// The address of image 0's plane of the slot's input channel, and the input row and
    /// column its tap adds to an output pixel's `(oy * stride, ox * stride)` (wrapping).
    Im2colTransposed {
        plane: Reg,
        outer_inside: Reg,
        tap_offset: (Reg, Reg),
        geometry: ConvGeometry,
    },
    /// The address of the slot's image's first output-gradient channel of the group, and its
    /// input row and column plus the padding.
    Col2im {
        planes: Reg,
        outer_inside: Reg,
        padded: (Reg, Reg),
        geometry: ConvGeometry,
    },
}

impl Operand {
    /// Per tile: the state of `slot` for the tile starting at outer index `outer0`, batch
    /// (or group) `batch`.
    pub fn begin_tile(
        &self,
        e: &mut Emitter,
        w: IntWidth,
        slot: Slot,
        outer0: Reg,
        batch: Reg,
    ) -> SlotTile {
        let size = self.element.bytes();
        let mut ix = Ints { e, w };
        let outer = ix.add(outer0, slot.outer);
        let outer_inside = ix.lt_imm(outer, self.outer_len);
        match self.source {
            Source::Matrix(m) => {
                let at = ix.constant(m.offset);
                let at = ix.mad_imm(batch, m.batch_stride, at);
                let at = ix.mad_imm(outer, m.outer_stride, at);
                let at = ix.mad_imm(slot.k, m.k_stride, at);
                SlotTile::Matrix {
                    address: ix.address(self.base, at, size),
                    outer_inside,
                    k_stride: m.k_stride,
                }
            }
            Source::Im2col(c) => {
                let per_image = c.oh * c.ow;
                let image = ix.div_imm(outer, per_image);
                let pixel = ix.rem_imm(outer, per_image);
                let oy = ix.div_imm(pixel, c.ow);
                let ox = ix.rem_imm(pixel, c.ow);
                let y = ix.mul_imm(oy, c.stride[0]);
                let y = ix.sub_imm(y, c.padding[0]);
                let x = ix.mul_imm(ox, c.stride[1]);
                let x = ix.sub_imm(x, c.padding[1]);
                let channel = ix.mul_imm(batch, c.group_in());
                let plane = ix.mad_imm(image, c.c_in, channel);
                let at = ix.mul_imm(plane, c.h * c.w);
                SlotTile::Im2col {
                    planes: ix.address(self.base, at, size),
                    outer_inside,
                    origin: (y, x),
                    geometry: c,
                }
            }
            Source::Im2colTransposed(c) => {
                let taps = c.kh * c.kw;
                let channel = ix.div_imm(outer, taps);
                let tap = ix.rem_imm(outer, taps);
                let ky = ix.div_imm(tap, c.kw);
                let kx = ix.rem_imm(tap, c.kw);
                let dy = ix.mul_imm(ky, c.dilation[0]);
                let dy = ix.sub_imm(dy, c.padding[0]);
                let dx = ix.mul_imm(kx, c.dilation[1]);
                let dx = ix.sub_imm(dx, c.padding[1]);
                let plane = ix.mad_imm(batch, c.group_in(), channel);
                let at = ix.mul_imm(plane, c.h * c.w);
                SlotTile::Im2colTransposed {
                    plane: ix.address(self.base, at, size),
                    outer_inside,
                    tap_offset: (dy, dx),
                    geometry: c,
                }
            }
            Source::Col2im(c) => {
                let per_image = c.h * c.w;
                let image = ix.div_imm(outer, per_image);
                let pixel = ix.rem_imm(outer, per_image);
                let y = ix.div_imm(pixel, c.w);
                let x = ix.rem_imm(pixel, c.w);
                let y = ix.add_imm(y, c.padding[0]);
                let x = ix.add_imm(x, c.padding[1]);
                let channel = ix.mul_imm(batch, c.group_out());
                let plane = ix.mad_imm(image, c.c_out, channel);
                let at = ix.mul_imm(plane, c.oh * c.ow);
                SlotTile::Col2im {
                    planes: ix.address(self.base, at, size),
                    outer_inside,
                    padded: (y, x),
                    geometry: c,
                }
            }
        }
    }

    /// Per step: the slot's element at k = `k0` + its slot's k, zero outside the operand (and
    /// in a convolution's padding), without reading memory there.
    pub fn load(&self, e: &mut Emitter, w: IntWidth, slot: Slot, tile: &SlotTile, k0: Reg) -> Reg {
        let size = self.element.bytes();
        let mut ix = Ints { e, w };
        let k = ix.add(k0, slot.k);
        let k_inside = ix.lt_imm(k, self.k_len);
        match *tile {
            SlotTile::Matrix {
                address,
                outer_inside,
                k_stride,
            } => {
                let inside = and_pred(ix.e, outer_inside, k_inside);
                let step = ix.mul_imm(k0, k_stride);
                let address = ix.address(address, step, size);
                self.element.load_or_zero(ix.e, address, inside)
            }
            SlotTile::Im2col {
                planes,
                outer_inside,
                origin: (y, x),
                geometry: c,
            } => {
                let inside = and_pred(ix.e, outer_inside, k_inside);
                let taps = c.kh * c.kw;
                let channel = ix.div_imm(k, taps);
                let tap = ix.rem_imm(k, taps);
                let ky = ix.div_imm(tap, c.kw);
                let kx = ix.rem_imm(tap, c.kw);
                let row = ix.mad_imm(ky, c.dilation[0], y);
                let column = ix.mad_imm(kx, c.dilation[1], x);
                // Below zero wraps past the extent: one unsigned compare per side.
                let row_inside = ix.lt_imm(row, c.h);
                let column_inside = ix.lt_imm(column, c.w);
                let inside = and_pred(ix.e, inside, row_inside);
                let inside = and_pred(ix.e, inside, column_inside);
                let plane_row = ix.mad_imm(channel, c.h, row);
                let at = ix.mad_imm(plane_row, c.w, column);
                let address = ix.address(planes, at, size);
                self.element.load_or_zero(ix.e, address, inside)
            }
            SlotTile::Im2colTransposed {
                plane,
                outer_inside,
                tap_offset: (dy, dx),
                geometry: c,
            } => {
                let inside = and_pred(ix.e, outer_inside, k_inside);
                let per_image = c.oh * c.ow;
                let image = ix.div_imm(k, per_image);
                let pixel = ix.rem_imm(k, per_image);
                let oy = ix.div_imm(pixel, c.ow);
                let ox = ix.rem_imm(pixel, c.ow);
                let row = ix.mad_imm(oy, c.stride[0], dy);
                let column = ix.mad_imm(ox, c.stride[1], dx);
                // Below zero wraps past the extent: one unsigned compare per side.
                let row_inside = ix.lt_imm(row, c.h);
                let column_inside = ix.lt_imm(column, c.w);
                let inside = and_pred(ix.e, inside, row_inside);
                let inside = and_pred(ix.e, inside, column_inside);
                let in_plane = ix.mad_imm(row, c.w, column);
                let at = ix.mad_imm(image, c.c_in * c.h * c.w, in_plane);
                let address = ix.address(plane, at, size);
                self.element.load_or_zero(ix.e, address, inside)
            }
            SlotTile::Col2im {
                planes,
                outer_inside,
                padded: (y, x),
                geometry: c,
            } => {
                let inside = and_pred(ix.e, outer_inside, k_inside);
                let taps = c.kh * c.kw;
                let channel = ix.div_imm(k, taps);
                let tap = ix.rem_imm(k, taps);
                let ky = ix.div_imm(tap, c.kw);
                let kx = ix.rem_imm(tap, c.kw);
                // The output pixel whose tap (ky, kx) reads input (y, x): oy * stride =
                // y + padding - ky * dilation, when that is a multiple of the stride in range.
                let mut output_index = |padded: Reg, tap: Reg, axis: usize, extent: usize| {
                    let reach = ix.mul_imm(tap, c.dilation[axis]);
                    let strided = ix.sub(padded, reach);
                    // Below zero wraps past the extent: one unsigned compare.
                    let within = ix.lt_imm(strided, extent * c.stride[axis]);
                    let within = if c.stride[axis] > 1 {
                        let skipped = ix.rem_imm(strided, c.stride[axis]);
                        let aligned = ix.lt_imm(skipped, 1);
                        and_pred(ix.e, within, aligned)
                    } else {
                        within
                    };
                    (ix.div_imm(strided, c.stride[axis]), within)
                };
                let (oy, row_inside) = output_index(y, ky, 0, c.oh);
                let (ox, column_inside) = output_index(x, kx, 1, c.ow);
                let inside = and_pred(ix.e, inside, row_inside);
                let inside = and_pred(ix.e, inside, column_inside);
                let plane_row = ix.mad_imm(channel, c.oh, oy);
                let at = ix.mad_imm(plane_row, c.ow, ox);
                let address = ix.address(planes, at, size);
                self.element.load_or_zero(ix.e, address, inside)
            }
        }
    }
}
