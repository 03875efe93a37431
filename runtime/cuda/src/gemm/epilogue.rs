//! The two epilogues of a tile kernel. [`KernelEpilogue`]: a kernel-IR kernel's elementwise
//! DAG (bias, activation, residual add, ...) evaluated at the output point, the external
//! call's scratch load replaced by the accumulator, so the product never goes through memory.
//! [`StoreEpilogue`]: the product (plus an optional bias) rounded to the element type and
//! stored, for the standalone entry points.

use super::arith::Ints;
use super::element::Element;
use super::tile_kernel::{Epilogue, OutputPoint};
use crate::body::Body;
use crate::emit::{Emitter, Reg};
use crate::index::IntWidth;
use tessera_kernel::{Kernel, ValueId};

/// How an output point of the product maps to the kernel's loop indices.
#[derive(Debug, Clone, Copy)]
pub(crate) enum PointMap {
    /// A GEMM: the row is the output loops but the last flattened, the column the last.
    Gemm { n: usize },
    /// A convolution over `[images, channels, oh, ow]`: the row is the group's output
    /// channel, the column the pixel `(image, oy, ox)`, the batch the group.
    Conv {
        group_out: usize,
        oh: usize,
        ow: usize,
    },
}

/// Evaluates `kernel`'s DAG and stores at each output point.
pub(crate) struct KernelEpilogue<'k> {
    pub kernel: &'k Kernel,
    pub bases: Vec<Reg>,
    pub width: IntWidth,
    /// The loads of the external call's scratch at the output point.
    pub scratch_values: Vec<ValueId>,
    pub map: PointMap,
}

impl Epilogue for KernelEpilogue<'_> {
    fn point(&mut self, e: &mut Emitter, at: &OutputPoint) {
        let kernel = self.kernel;
        let mut body = Body {
            kernel,
            e: std::mem::take(e),
            bases: self.bases.clone(),
            width: self.width,
            loops: vec![None; kernel.extents().len()],
            values: vec![None; kernel.values.len()],
            preloaded: vec![None; kernel.values.len()],
            rebase: None,
        };
        let mut ix = Ints {
            e: &mut body.e,
            w: self.width,
        };
        match self.map {
            PointMap::Gemm { n } => {
                let flat = ix.mad_imm(at.row, n, at.col);
                let domain = kernel.domain.clone();
                body.decompose(flat, &domain, 0);
            }
            PointMap::Conv { group_out, oh, ow } => {
                let image = ix.div_imm(at.col, oh * ow);
                let pixel = ix.rem_imm(at.col, oh * ow);
                let oy = ix.div_imm(pixel, ow);
                let ox = ix.rem_imm(pixel, ow);
                let channel = ix.mad_imm(at.batch, group_out, at.row);
                body.loops = vec![Some(image), Some(channel), Some(oy), Some(ox)];
            }
        }
        for v in &self.scratch_values {
            body.preloaded[v.index()] = Some(at.value);
        }
        for v in 0..kernel.values.len() {
            body.emit_value(ValueId::from_index(v));
        }
        for s in 0..kernel.stores.len() {
            body.emit_store(s);
        }
        *e = body.e;
    }
}

/// Where a standalone kernel stores output point `(batch, row, col)`.
#[derive(Debug, Clone, Copy)]
pub(crate) enum OutputIndex {
    /// `offset + batch * batch_stride + row * row_stride + col * col_stride`.
    Strided {
        offset: usize,
        batch_stride: usize,
        row_stride: usize,
        col_stride: usize,
    },
    /// A packed `[images, groups * group_out, oh * ow]` convolution output.
    Conv {
        group_out: usize,
        channels: usize,
        pixels: usize,
    },
}

/// Stores each output point, plus `bias[bias_offset + stride * i]` where `i` is the column
/// (GEMM) or the output channel (convolution).
pub(crate) struct StoreEpilogue {
    pub out: Reg,
    pub index: OutputIndex,
    pub element: Element,
    pub bias: Option<(Reg, usize, usize)>,
    pub width: IntWidth,
}

impl Epilogue for StoreEpilogue {
    fn point(&mut self, e: &mut Emitter, at: &OutputPoint) {
        let mut ix = Ints { e, w: self.width };
        let (out, bias_index) = match self.index {
            OutputIndex::Strided {
                offset,
                batch_stride,
                row_stride,
                col_stride,
            } => {
                let i = ix.constant(offset);
                let i = ix.mad_imm(at.batch, batch_stride, i);
                let i = ix.mad_imm(at.row, row_stride, i);
                (ix.mad_imm(at.col, col_stride, i), at.col)
            }
            OutputIndex::Conv {
                group_out,
                channels,
                pixels,
            } => {
                let channel = ix.mad_imm(at.batch, group_out, at.row);
                let image = ix.div_imm(at.col, pixels);
                let pixel = ix.rem_imm(at.col, pixels);
                let plane = ix.mad_imm(image, channels, channel);
                (ix.mad_imm(plane, pixels, pixel), channel)
            }
        };
        let size = self.element.bytes();
        let mut value = at.value;
        if let Some((bias, offset, stride)) = self.bias {
            let start = ix.constant(offset);
            let i = ix.mad_imm(bias_index, stride, start);
            let address = ix.address(bias, i, size);
            let b = self.element.load_as_acc(ix.e, address);
            let sum = ix.e.reg(self.element.acc_class());
            ix.e.ins(format!(
                "add.rn.{} {sum}, {value}, {b}",
                self.element.acc_suffix()
            ));
            value = sum;
        }
        let address = ix.address(self.out, out, size);
        self.element.store_from_acc(ix.e, address, value);
    }
}
