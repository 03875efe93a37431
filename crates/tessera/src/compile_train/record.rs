//! An optimizer step recorded instead of applied: [`RecordedUpdate`] is the [`UpdateSink`] a
//! compiled training step hands to `Optimizer::step_with`, which turns each call into an entry
//! of an [`UpdateRecord`] (ops over references to gradients, live tensors and run-time
//! scalars). The record's shape says which graph the step needs; its tensors and scalars are
//! what that graph is fed on this call.

use std::collections::HashMap;
use tessera_nn::optim::UpdateSink;
use tessera_tensor::{DType, Device, Op, Tensor, TensorId, TensorMeta};

/// What a value of the update is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum ValueRef {
    /// The gradient of trainable parameter `i` (the joint graph's `i`-th gradient output).
    Grad(usize),
    /// Live tensor `i` of the record (a parameter or an optimizer state tensor).
    Live(usize),
    /// Run-time scalar `i` (a learning rate).
    Scalar(usize),
    /// Output `index` of recorded op `op`.
    Output { op: usize, index: usize },
}

/// The recorded step: the structure ([`UpdateShape`]) and what feeds it.
pub(crate) struct UpdateRecord {
    /// Live tensors the ops read, in first-use order.
    pub live: Vec<Tensor>,
    /// Run-time scalar values, in order of use.
    pub scalars: Vec<f64>,
    /// Tensors written at the end of the step, in output order.
    pub assigns: Vec<Assign>,
    pub shape: UpdateShape,
}

/// A tensor the step writes at its end: a parameter, or optimizer state of `owner`.
pub(crate) struct Assign {
    pub target: Tensor,
    /// The parameter whose update writes it (the last one the optimizer asked the gradient
    /// of), to name it in errors.
    pub owner: Option<TensorId>,
}

/// What decides the graph of an update: its ops and their operands, the live tensors' shapes
/// and dtypes, and what is written back. Two steps of equal shape run the same program.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct UpdateShape {
    pub ops: Vec<(Op, Vec<ValueRef>)>,
    pub live: Vec<TensorMeta>,
    pub scalars: usize,
    pub written: Vec<ValueRef>,
}

/// The sink that records. Gradients exist for the parameters in `grads` (by id, with their
/// position among the joint graph's gradients).
pub(crate) struct RecordedUpdate<'a> {
    grads: &'a HashMap<TensorId, usize>,
    /// Stand-ins (meta tensors) handed to the optimizer, by id.
    standins: HashMap<TensorId, ValueRef>,
    live_ids: HashMap<TensorId, usize>,
    /// The stand-in of each group's learning rate on each device (one input per group).
    scalar_standins: HashMap<(usize, Device), Tensor>,
    /// The parameter being updated (the last one whose gradient was asked for).
    owner: Option<TensorId>,
    record: UpdateRecord,
}

impl<'a> RecordedUpdate<'a> {
    pub(crate) fn new(grads: &'a HashMap<TensorId, usize>) -> Self {
        RecordedUpdate {
            grads,
            standins: HashMap::new(),
            live_ids: HashMap::new(),
            scalar_standins: HashMap::new(),
            owner: None,
            record: UpdateRecord {
                live: Vec::new(),
                scalars: Vec::new(),
                assigns: Vec::new(),
                shape: UpdateShape {
                    ops: Vec::new(),
                    live: Vec::new(),
                    scalars: 0,
                    written: Vec::new(),
                },
            },
        }
    }

    pub(crate) fn finish(self) -> UpdateRecord {
        self.record
    }

    fn standin(&mut self, meta: &TensorMeta, value: ValueRef) -> Tensor {
        let t = Tensor::new_meta(&meta.shape, meta.dtype);
        self.standins.insert(t.id(), value);
        t
    }

    /// The reference of a tensor the optimizer passes: a stand-in, or a live tensor (added
    /// on first use).
    fn resolve(&mut self, t: &Tensor) -> tessera_nn::Result<ValueRef> {
        if let Some(&r) = self.standins.get(&t.id()) {
            return Ok(r);
        }
        if t.is_meta() {
            return Err(tessera_nn::NnError::Invalid(format!(
                "recording an optimizer step: a meta tensor of shape {:?} that the step did not \
                 receive from the recorder",
                t.shape()
            )));
        }
        let next = self.record.live.len();
        let i = *self.live_ids.entry(t.id()).or_insert(next);
        if i == next {
            self.record.live.push(t.clone());
            self.record.shape.live.push(t.meta());
        }
        Ok(ValueRef::Live(i))
    }
}

impl UpdateSink for RecordedUpdate<'_> {
    fn grad(&mut self, param: &Tensor) -> Option<Tensor> {
        let i = *self.grads.get(&param.id())?;
        self.owner = Some(param.id());
        Some(self.standin(&param.meta(), ValueRef::Grad(i)))
    }

    fn scalar(&mut self, group: usize, value: f64, param: &Tensor) -> tessera_nn::Result<Tensor> {
        let key = (group, param.device());
        if let Some(t) = self.scalar_standins.get(&key) {
            return Ok(t.clone());
        }
        let i = self.record.scalars.len();
        self.record.scalars.push(value);
        self.record.shape.scalars += 1;
        let t = self.standin(&TensorMeta::new(vec![], DType::F64), ValueRef::Scalar(i));
        self.scalar_standins.insert(key, t.clone());
        Ok(t)
    }

    fn apply(&mut self, op: &Op, inputs: &[&Tensor]) -> tessera_nn::Result<Vec<Tensor>> {
        let refs = inputs
            .iter()
            .map(|t| self.resolve(t))
            .collect::<tessera_nn::Result<Vec<_>>>()?;
        let metas: Vec<TensorMeta> = inputs.iter().map(|t| t.meta()).collect();
        let outputs = op.meta(&metas)?;
        let n = self.record.shape.ops.len();
        self.record.shape.ops.push((op.clone(), refs));
        Ok(outputs
            .iter()
            .enumerate()
            .map(|(index, meta)| self.standin(meta, ValueRef::Output { op: n, index }))
            .collect())
    }

    fn to_device_of(&mut self, value: &Tensor, _param: &Tensor) -> tessera_nn::Result<Tensor> {
        Ok(value.clone())
    }

    fn assign(&mut self, target: &Tensor, value: &Tensor) -> tessera_nn::Result<()> {
        let value = self.resolve(value)?;
        self.record.shape.written.push(value);
        self.record.assigns.push(Assign {
            target: target.clone(),
            owner: self.owner,
        });
        Ok(())
    }

    fn keep(&mut self, value: &Tensor, param: &Tensor) -> tessera_nn::Result<Tensor> {
        let meta = value.meta();
        let value = self.resolve(value)?;
        let kept = Tensor::zeros(&meta.shape, meta.dtype)?.to_device(param.device())?;
        self.record.shape.written.push(value);
        self.record.assigns.push(Assign {
            target: kept.clone(),
            owner: Some(param.id()),
        });
        Ok(kept)
    }
}
