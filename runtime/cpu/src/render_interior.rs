//! Index-set splitting of an elementwise kernel's innermost loop around the interior of its
//! guarded loads ([`tessera_kernel::interior`]): per row, the interval where every guarded
//! load is inside is computed once, and run with plain loads from row pointers computed once,
//! with no guard and no border code in the loop; the indices before it run the guarded
//! vector steps (all of a row with an empty interior) and those after it guarded scalars.

use crate::render::{Renderer, clif_type};
use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{InstBuilder, Value, types};
use cranelift_frontend::FunctionBuilder;
use tessera_kernel::{Bound, Expr, IndexExpr, RowBound, ScalarType, unguarded_index};

/// `ceil(x / d)` of an i64 `x >= 0` and a constant `d >= 1`.
fn ceil_div(b: &mut FunctionBuilder, x: Value, d: usize) -> Value {
    if d == 1 {
        return x;
    }
    let up = b.ins().iadd_imm_s(x, d as i64 - 1);
    b.ins().udiv_imm_u(up, d as i64)
}

/// `max(k - x, 0)` of an i64 `x`.
fn clamped_rsub(b: &mut FunctionBuilder, k: usize, x: Value) -> Value {
    let k = b.ins().iconst(types::I64, k as i64);
    let diff = b.ins().isub(k, x);
    let zero = b.ins().iconst(types::I64, 0);
    b.ins().smax(diff, zero)
}

impl Renderer<'_> {
    /// The innermost loop of a kernel with guarded loads over `start..end`: the row's interior
    /// with plain loads (vector steps of 16 and 4 lanes, then one vector ending at the
    /// interior's end where recomputing points is safe, or scalars), the indices before it
    /// through the guarded vector steps and scalars (so a row with an empty interior runs as
    /// it would unsplit), those after it guarded scalars.
    pub(crate) fn split_row(
        &mut self,
        b: &mut FunctionBuilder,
        bounds: &[RowBound],
        start: Value,
        end: Value,
        outer: &[Option<Value>],
    ) {
        let s = self.kernel.schedule;
        let vector = s.vector_width == 4;
        let (lo, hi) = self.interior_range(b, bounds, start, end);
        let unrolled: &[usize] = if vector { &[s.unroll] } else { &[] };
        self.span(b, start, lo, outer, unrolled, false);
        self.interior = self.interior_rows(b);
        let unrolled: &[usize] = if vector { &[s.unroll, 1] } else { &[] };
        let overlap = vector && self.kernel.recomputes_safely();
        self.span(b, lo, hi, outer, unrolled, overlap);
        self.interior.clear();
        self.span(b, hi, end, outer, &[], false);
    }

    /// After the vector steps of `start..end` stopped at `at`: when points remain and the span
    /// holds a vector, that vector ending at `end`, returning `end`; `at` otherwise.
    pub(crate) fn last_vector(
        &mut self,
        b: &mut FunctionBuilder,
        start: Value,
        at: Value,
        end: Value,
        outer: &[Option<Value>],
    ) -> Value {
        let (overlap, join) = (b.create_block(), b.create_block());
        let from = b.append_block_param(join, types::I64);
        let left = b.ins().icmp(IntCC::SignedLessThan, at, end);
        let width = b.ins().isub(end, start);
        let holds = b
            .ins()
            .icmp_imm_s(IntCC::SignedGreaterThanOrEqual, width, 4);
        let go = b.ins().band(left, holds);
        b.ins().brif(go, overlap, &[], join, &[at.into()]);
        b.switch_to_block(overlap);
        let j = b.ins().iadd_imm_s(end, -4);
        self.point(b, Some(j), 4, outer);
        b.ins().jump(join, &[end.into()]);
        b.switch_to_block(join);
        from
    }

    /// The interior `(lo, hi)` of the row at the loop indices pushed, within `start..end`, as
    /// [`tessera_kernel::Kernel::interior`] computes it: `(end, end)` when it is empty.
    pub(crate) fn interior_range(
        &self,
        b: &mut FunctionBuilder,
        bounds: &[RowBound],
        start: Value,
        end: Value,
    ) -> (Value, Value) {
        let (mut lo, mut hi) = (start, end);
        for rb in bounds {
            // The coordinate at j = 0: the outer indices' part and the offset.
            let c0 = self.elements(b, &rb.coord, None);
            match rb.step() {
                0 => {
                    let c = b.ins().iadd_imm_s(c0, -(rb.pad as i64));
                    let ok = b
                        .ins()
                        .icmp_imm_u(IntCC::UnsignedLessThan, c, rb.len as i64);
                    hi = b.ins().select(ok, hi, start);
                }
                s => {
                    let before = clamped_rsub(b, rb.pad, c0);
                    let first = ceil_div(b, before, s);
                    let until = clamped_rsub(b, rb.pad + rb.len, c0);
                    let past = ceil_div(b, until, s);
                    lo = b.ins().smax(lo, first);
                    hi = b.ins().smin(hi, past);
                }
            }
        }
        let empty = b.ins().icmp(IntCC::SignedGreaterThanOrEqual, lo, hi);
        let lo = b.ins().select(empty, end, lo);
        let hi = b.ins().select(empty, end, hi);
        (lo, hi)
    }

    /// Per value, for each guarded load, the byte address of its element at innermost index 0
    /// of the row at the loop indices pushed, were it inside there ([`unguarded_index`]).
    pub(crate) fn interior_rows(&self, b: &mut FunctionBuilder) -> Vec<Option<Value>> {
        let kernel = self.kernel;
        kernel
            .values
            .iter()
            .map(|v| match &v.expr {
                Expr::LoadIf {
                    buffer,
                    index,
                    bounds,
                    ..
                } => {
                    let plain = unguarded_index(index, bounds);
                    let row = self.row_elements(b, &plain.strides, plain.offset);
                    let bytes = b.ins().imul_imm_s(row, v.ty.bytes() as i64);
                    Some(b.ins().iadd(self.bases[buffer.index()], bytes))
                }
                _ => None,
            })
            .collect()
    }

    /// `offset + sum(strides[l] * i_l)` over the loop indices pushed (not the innermost).
    fn row_elements(&self, b: &mut FunctionBuilder, strides: &[usize], offset: i64) -> Value {
        let mut at = b.ins().iconst(types::I64, offset);
        for (&s, &i) in strides.iter().zip(&self.indices) {
            if s != 0 {
                let term = b.ins().imul_imm_s(i, s as i64);
                at = b.ins().iadd(at, term);
            }
        }
        at
    }

    /// A guarded load of `index` and `bounds` inside its input at innermost index `j` (`lanes`
    /// of them, f32 when 4), read from its row's address `row` with no guard.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn interior_load(
        &self,
        b: &mut FunctionBuilder,
        index: &IndexExpr,
        bounds: &[Bound],
        ty: ScalarType,
        row: Value,
        j: Value,
        lanes: usize,
    ) -> Value {
        let step = unguarded_index(index, bounds)
            .strides
            .last()
            .copied()
            .unwrap_or(0);
        let offset = b.ins().imul_imm_s(j, (step * ty.bytes()) as i64);
        let addr = b.ins().iadd(row, offset);
        match (lanes, step) {
            (1, _) => b.ins().load(clif_type(ty), self.flags, addr, 0),
            (_, 1) => b.ins().load(types::F32X4, self.flags, addr, 0),
            (_, 0) => {
                let x = b.ins().load(types::F32, self.flags, addr, 0);
                b.ins().splat(types::F32X4, x)
            }
            (_, step) => self.strided_f32x4(b, addr, step),
        }
    }
}
