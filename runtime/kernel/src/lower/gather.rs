//! Lowering of the ops that read by index ([`crate::Expr::Gather`]): embedding lookups,
//! `index_select` and `gather` become one kernel over their output, each element read at the
//! position its i64 index picks, the index checked against its dim in the kernel (a bad one
//! fails the run with [`crate::KernelError::IndexOutOfRange`]); the negative log-likelihood
//! and its gradient ([`super::nll`]) build on the same pieces. Index tensors of other dtypes
//! than i64 and tables of other dtypes than f32 and f64 run the eager kernel.

use super::{Lowering, Val, packed_index};
use crate::schedule::schedule;
use crate::{
    BufferId, BufferRole, Expr, IndexExpr, KernelBuilder, Result, ScalarType, SlotId, SlotSource,
    Step, ValueId,
};
use tessera_fx::NodeId;
use tessera_tensor::layout::Layout;
use tessera_tensor::op::IndexOp;
use tessera_tensor::{DType, Op};

/// A kernel being built by an indexing lowering: the builder, the slots its input buffers
/// read (in parameter order) and its status buffer, made on the first gather.
pub(super) struct IndexKernel {
    pub(super) b: KernelBuilder,
    inputs: Vec<(SlotId, BufferId)>,
    status: Option<BufferId>,
}

/// The index of a tensor seen through `layout` whose dim `d` walks loop `map[d]` (a dim
/// mapped to no loop stays at coordinate 0), in a nest of `loops` loops.
pub(super) fn mapped_index(layout: &Layout, map: &[Option<usize>], loops: usize) -> IndexExpr {
    let mut strides = vec![0; loops];
    for (d, l) in map.iter().enumerate() {
        if let (Some(l), Some(s)) = (l, layout.strides.get(d)) {
            strides[*l] += s;
        }
    }
    IndexExpr {
        offset: layout.offset,
        strides,
    }
}

impl IndexKernel {
    pub(super) fn new(b: KernelBuilder) -> IndexKernel {
        IndexKernel {
            b,
            inputs: Vec::new(),
            status: None,
        }
    }

    /// The input buffer reading `slot`, made on first use (its length is set when the kernel
    /// is finished).
    pub(super) fn input(&mut self, slot: SlotId, ty: ScalarType) -> BufferId {
        if let Some((_, b)) = self.inputs.iter().find(|(s, _)| *s == slot) {
            return *b;
        }
        let b = self.b.buffer(BufferRole::Input, ty, 0);
        self.inputs.push((slot, b));
        b
    }

    /// A plain load of `v` (of type `ty`) with its dims walking the loops `map` says.
    pub(super) fn load(&mut self, v: &Val, ty: ScalarType, map: &[Option<usize>]) -> ValueId {
        let buffer = self.input(v.slot, ty);
        let index = mapped_index(&v.layout, map, self.b.loop_count());
        self.b.push(ty, Expr::Load { buffer, index })
    }

    /// The element of `v` whose dim `dim` is the i64 value `by` (checked against the dim's
    /// size) and whose other dims walk the loops `map` says.
    pub(super) fn gather(
        &mut self,
        v: &Val,
        ty: ScalarType,
        map: &[Option<usize>],
        dim: usize,
        by: ValueId,
    ) -> ValueId {
        let buffer = self.input(v.slot, ty);
        let mut map = map.to_vec();
        map[dim] = None;
        let index = mapped_index(&v.layout, &map, self.b.loop_count());
        let status = match self.status {
            Some(s) => s,
            None => {
                let s = self.b.buffer(
                    BufferRole::Scratch,
                    ScalarType::I64,
                    crate::gather::STATUS_LEN,
                );
                self.status = Some(s);
                s
            }
        };
        self.b.push(
            ty,
            Expr::Gather {
                buffer,
                index,
                by,
                stride: v.layout.strides[dim],
                len: v.layout.shape[dim],
                status,
            },
        )
    }

    /// The element of `v` at its dims walking the loops `map` says, read only when the i64
    /// value `by` lies in `0..len` (the check of an index that picks no element of `v`, as a
    /// class target checked while the upstream gradient is read).
    pub(super) fn checked_load(
        &mut self,
        v: &Val,
        ty: ScalarType,
        map: &[Option<usize>],
        by: ValueId,
        len: usize,
    ) -> ValueId {
        let mut wide = v.clone();
        wide.layout.shape.push(len);
        wide.layout.strides.push(0);
        let mut map = map.to_vec();
        map.push(None);
        self.gather(&wide, ty, &map, map.len() - 1, by)
    }

    pub(super) fn constant(&mut self, ty: ScalarType, c: f64) -> ValueId {
        self.b.push(ty, Expr::Const(c))
    }
}

impl Lowering<'_> {
    /// Finishes `k`, storing `value` packed into a new slot for the value of node `id`
    /// (`meta`'s shape, over `k`'s output loops), and adds its step; the slot.
    pub(super) fn finish_index_kernel(
        &mut self,
        id: &NodeId,
        mut k: IndexKernel,
        value: ValueId,
        meta: tessera_tensor::TensorMeta,
    ) -> Result<Val> {
        let ty = k.b.ty(value);
        let out_shape = k.b.domain().to_vec();
        let out =
            k.b.buffer(BufferRole::Output, ty, out_shape.iter().product());
        let mut index = packed_index(&out_shape);
        index.strides.resize(k.b.loop_count(), 0);
        k.b.store(out, index, value);
        let mut kernel = k.b.finish();
        for (_, b) in &k.inputs {
            kernel.buffers[b.index()].len = kernel.buffer_reach(*b);
        }
        schedule(&mut kernel);
        kernel.verify()?;
        let names = self.node_names(std::slice::from_ref(id))?;
        let layout = Layout::contiguous(&meta.shape);
        let v = self.slot(id, meta, SlotSource::Step, layout);
        self.program.steps.push(Step::Kernel {
            kernel,
            inputs: k.inputs.iter().map(|(s, _)| *s).collect(),
            outputs: vec![v.slot],
            nodes: names,
        });
        Ok(v)
    }

    /// Lowers an embedding, `index_select` or `gather` node, or runs its eager kernel
    /// (reported as a fallback) when the kernel IR cannot express it.
    pub(super) fn indexing(&mut self, id: &NodeId, op: &Op) -> Result<()> {
        let kernel = self.indexing_kernel(id, op)?;
        self.value_or_fallback(id, op, kernel)
    }

    fn indexing_kernel(
        &mut self,
        id: &NodeId,
        op: &Op,
    ) -> Result<std::result::Result<Val, String>> {
        let operands = self
            .operands(id)?
            .iter()
            .map(|o| self.value(o))
            .collect::<Result<Vec<_>>>()?;
        let Some(meta) = self.meta(id)?.first().cloned() else {
            return Ok(Err("the node has no value".into()));
        };
        let (Some(x), Some(index)) = (operands.first(), operands.get(1)) else {
            return Ok(Err("the node has no table or no index".into()));
        };
        let Some(ty) = ScalarType::of_buffer(meta.dtype).filter(|t| t.is_arithmetic()) else {
            return Ok(Err(format!("a {:?} table", meta.dtype)));
        };
        if self.program.slot(index.slot).meta.dtype != DType::I64 {
            return Ok(Err("indices of another dtype than i64".into()));
        }
        let out = meta.shape.clone();
        let name = format!("k{}_{}", self.kernel_count(), op.name());
        let mut k = IndexKernel::new(KernelBuilder::new(name, out.clone()));
        let rank = out.len();
        let value = match op {
            // out[i.., j] = weight[index[i..], j]
            Op::Embedding(_) => {
                let by_map: Vec<Option<usize>> = (0..rank - 1).map(Some).collect();
                let by = k.load(index, ScalarType::I64, &by_map);
                k.gather(x, ty, &[None, Some(rank - 1)], 0, by)
            }
            // out[.., i, ..] = x[.., index[i], ..] along `dim`
            Op::Index(IndexOp::IndexSelect { dim }) if rank > 0 && x.layout.shape.len() == rank => {
                let by = k.load(index, ScalarType::I64, &[Some(*dim)]);
                let map: Vec<Option<usize>> = (0..rank).map(Some).collect();
                k.gather(x, ty, &map, *dim, by)
            }
            // out[p] = x[p with dim `dim` replaced by index[p]]
            Op::Index(IndexOp::Gather { dim }) if rank > 0 && x.layout.shape.len() == rank => {
                let map: Vec<Option<usize>> = (0..rank).map(Some).collect();
                let by = k.load(index, ScalarType::I64, &map);
                k.gather(x, ty, &map, *dim, by)
            }
            _ => return Ok(Err("a shape the indexing lowering does not cover".into())),
        };
        Ok(Ok(self.finish_index_kernel(id, k, value, meta)?))
    }
}
