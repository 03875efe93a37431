//! Lowering of batch norm's running-statistics update ([`BatchNormUpdateOp`]): when the op
//! counts batches, a kernel over no loops adds 1 to the i64 `num_batches_tracked`; then one
//! kernel over the channels blends the running mean and the unbiased running variance with
//! the batch's, in f64 as the eager kernel computes them, its factor the momentum or, for a
//! cumulative average, `1 / batches` read from the new count. Half running statistics (which
//! the eager kernel rounds once from f64) run the eager kernel.

use super::{Lowering, Val, packed_index};
use crate::schedule::schedule;
use crate::table::Emit;
use crate::{
    BinaryFn, BufferRole, Expr, IndexExpr, KernelBuilder, Result, ScalarType, SlotId, SlotSource,
    Step, ValueId,
};
use tessera_fx::NodeId;
use tessera_tensor::layout::{Layout, broadcast_layout};
use tessera_tensor::op::BatchNormUpdateOp;
use tessera_tensor::{Op, TensorMeta};

impl Lowering<'_> {
    /// Lowers the update node `id` to kernels, or runs its eager kernel (reported as a
    /// fallback) when the kernel IR cannot express it.
    pub(super) fn batch_norm_update(&mut self, id: &NodeId, op: &BatchNormUpdateOp) -> Result<()> {
        let metas = self.meta(id)?;
        let operands = self
            .operands(id)?
            .iter()
            .map(|o| self.value(o))
            .collect::<Result<Vec<_>>>()?;
        let stats_ty = metas
            .first()
            .and_then(|m| ScalarType::of_buffer(m.dtype))
            .filter(|t| t.is_arithmetic());
        let input_tys: Option<Vec<ScalarType>> = operands
            .iter()
            .map(|v| ScalarType::of_buffer(self.program.slot(v.slot).meta.dtype))
            .collect();
        let (Some(stats_ty), Some(input_tys)) = (stats_ty, input_tys) else {
            return self.external(
                id,
                crate::ExternalCall::Op(Op::BatchNormUpdate(*op)),
                Some("not generated: half running statistics round once from f64".into()),
            );
        };
        let names = self.node_names(std::slice::from_ref(id))?;
        let mut outputs: Vec<Val> = Vec::new();
        // The new batch count, first: the blend reads it.
        let count = match (op.counted, metas.get(2), operands.get(4)) {
            (true, Some(meta), Some(counter)) => {
                let slot = self.increment(id, counter, meta, &names)?;
                Some(slot)
            }
            _ => None,
        };
        let channels = metas[0].shape.clone();
        let name = format!("k{}_batch_norm_update", self.kernel_count());
        let mut b = KernelBuilder::new(name, channels.clone());
        let mut inputs: Vec<SlotId> = Vec::new();
        let mut loaded: Vec<ValueId> = Vec::new();
        for (v, ty) in operands.iter().zip(&input_tys).take(4) {
            let Ok(view) = broadcast_layout("batch_norm_update", &v.layout, &channels) else {
                return self.external(
                    id,
                    crate::ExternalCall::Op(Op::BatchNormUpdate(*op)),
                    Some(format!("not generated: {:?} per channel", v.layout.shape)),
                );
            };
            // Its length is set from the loads' reach once the kernel is built.
            let buffer = b.buffer(BufferRole::Input, *ty, 0);
            let index = IndexExpr {
                offset: view.offset,
                strides: view.strides,
            };
            inputs.push(v.slot);
            loaded.push(b.push(*ty, Expr::Load { buffer, index }));
        }
        let f64_of = |b: &mut KernelBuilder, v: ValueId| Emit { b }.convert(v, ScalarType::F64);
        let mut wide = Vec::new();
        for v in loaded {
            match f64_of(&mut b, v) {
                Ok(w) => wide.push(w),
                Err(why) => {
                    return self.external(
                        id,
                        crate::ExternalCall::Op(Op::BatchNormUpdate(*op)),
                        Some(format!("not generated: {why}")),
                    );
                }
            }
        }
        let [batch_mean, batch_var, running_mean, running_var] = wide[..] else {
            return Err(crate::KernelError::Undefined {
                node: self.graph.display(id),
            });
        };
        let c = |b: &mut KernelBuilder, x: f64| b.push(ScalarType::F64, Expr::Const(x));
        let bin = |b: &mut KernelBuilder, f: BinaryFn, x: ValueId, y: ValueId| {
            b.push(ScalarType::F64, Expr::Binary(f, x, y))
        };
        let factor = match (op.momentum, count) {
            (Some(m), _) => c(&mut b, m),
            (None, Some(slot)) => {
                let buffer = b.buffer(BufferRole::Input, ScalarType::I64, 1);
                inputs.push(slot);
                let index = IndexExpr {
                    offset: 0,
                    strides: vec![0; channels.len()],
                };
                let batches = b.push(ScalarType::I64, Expr::Load { buffer, index });
                let batches = b.push(ScalarType::F64, Expr::Cast(batches));
                let one = c(&mut b, 1.0);
                bin(&mut b, BinaryFn::Div, one, batches)
            }
            // `meta` refuses a cumulative average without a counter.
            (None, None) => c(&mut b, 0.0),
        };
        // `BatchNormUpdateOp::blend` and `unbiased`, operation for operation.
        let one = c(&mut b, 1.0);
        let keep = bin(&mut b, BinaryFn::Sub, one, factor);
        let blend = |b: &mut KernelBuilder, running: ValueId, batch: ValueId| {
            let kept = bin(b, BinaryFn::Mul, keep, running);
            let added = bin(b, BinaryFn::Mul, factor, batch);
            bin(b, BinaryFn::Add, kept, added)
        };
        let n = c(&mut b, op.count as f64);
        let n_minus_one = c(&mut b, op.count as f64 - 1.0);
        let scaled = bin(&mut b, BinaryFn::Mul, batch_var, n);
        let unbiased = bin(&mut b, BinaryFn::Div, scaled, n_minus_one);
        let mean = blend(&mut b, running_mean, batch_mean);
        let var = blend(&mut b, running_var, unbiased);
        let numel: usize = channels.iter().product();
        let mut out_slots = Vec::new();
        for (value, meta) in [mean, var].into_iter().zip(&metas) {
            let narrowed = b.push(stats_ty, Expr::Cast(value));
            let buffer = b.buffer(BufferRole::Output, stats_ty, numel);
            b.store(buffer, packed_index(&channels), narrowed);
            let v = self.slot(
                id,
                meta.clone(),
                SlotSource::Step,
                Layout::contiguous(&channels),
            );
            out_slots.push(v.slot);
            outputs.push(v);
        }
        let mut kernel = b.finish();
        for at in 0..kernel.buffers.len() {
            if kernel.buffers[at].role == BufferRole::Input {
                let reach = kernel
                    .accesses()
                    .filter(|(buffer, _)| buffer.index() == at)
                    .map(|(_, ix)| ix.extent(&kernel.domain))
                    .max()
                    .unwrap_or(0);
                kernel.buffers[at].len = reach;
            }
        }
        schedule(&mut kernel);
        kernel.verify()?;
        self.program.steps.push(Step::Kernel {
            kernel,
            inputs,
            outputs: out_slots,
            nodes: names,
        });
        if let (Some(slot), Some(meta)) = (count, metas.get(2)) {
            outputs.push(Val {
                slot,
                views: Vec::new(),
                layout: Layout::contiguous(&meta.shape),
            });
        }
        self.values.insert(*id, outputs);
        Ok(())
    }

    /// A kernel over no loops storing `counter + 1` (i64, wrapping as the eager `+ 1` of an
    /// i64 scalar) into a new slot for output `meta` of `id`; the slot.
    fn increment(
        &mut self,
        id: &NodeId,
        counter: &Val,
        meta: &TensorMeta,
        names: &[String],
    ) -> Result<SlotId> {
        let name = format!("k{}_count_batch", self.kernel_count());
        let mut b = KernelBuilder::new(name, Vec::new());
        let input = b.buffer(
            BufferRole::Input,
            ScalarType::I64,
            counter.layout.offset + 1,
        );
        let index = IndexExpr {
            offset: counter.layout.offset,
            strides: Vec::new(),
        };
        let before = b.push(
            ScalarType::I64,
            Expr::Load {
                buffer: input,
                index,
            },
        );
        let one = b.push(ScalarType::I64, Expr::Const(1.0));
        let after = b.push(ScalarType::I64, Expr::Binary(BinaryFn::Add, before, one));
        let out = b.buffer(BufferRole::Output, ScalarType::I64, 1);
        b.store(out, packed_index(&[]), after);
        let mut kernel = b.finish();
        schedule(&mut kernel);
        kernel.verify()?;
        let v = self.slot(id, meta.clone(), SlotSource::Step, Layout::contiguous(&[]));
        self.program.steps.push(Step::Kernel {
            kernel,
            inputs: vec![counter.slot],
            outputs: vec![v.slot],
            nodes: names.to_vec(),
        });
        Ok(v.slot)
    }
}
