//! A [`CompiledOp`] assembled launch by launch, for the eager ops whose device kernels are not
//! one lowered program (products and convolutions, see [`super::product`]): slots for the
//! operands and for fresh memory, packed copies of operands read through any view (the
//! lowering's copy kernel, so a broadcast is materialised and a transpose gathered), and
//! launches of standalone generated kernels bound to slots by their parameters' roles.

use super::compile::{Binding, CompiledOp, Launch, SlotPlan, compile};
use crate::driver::{CudaDriver, LaunchDims};
use crate::gemm::{GemmParamRole, RenderedGemm};
use crate::tensor::device_state::DeviceState;
use crate::{CudaError, Result};
use std::sync::Arc;
use tessera_kernel::{ScalarType, SlotId};
use tessera_tensor::backend::DeviceOperand;
use tessera_tensor::layout::Layout;
use tessera_tensor::op::ViewOp;
use tessera_tensor::{DType, Op, TensorMeta};

/// The op being assembled; its modules are unloaded if it is dropped unfinished.
pub(crate) struct OpBuilder<'a> {
    state: &'a DeviceState,
    op: CompiledOp,
}

impl<'a> OpBuilder<'a> {
    /// A builder whose first `operands` slots are the op's operands, in order.
    pub(crate) fn new(
        driver: &Arc<dyn CudaDriver>,
        state: &'a DeviceState,
        operands: usize,
    ) -> OpBuilder<'a> {
        OpBuilder {
            state,
            op: CompiledOp {
                driver: Arc::clone(driver),
                modules: Vec::new(),
                slots: (0..operands).map(SlotPlan::Operand).collect(),
                launches: Vec::new(),
                outputs: Vec::new(),
            },
        }
    }

    /// The slot of operand `n`.
    pub(crate) fn operand(&self, n: usize) -> SlotId {
        SlotId::from_index(n)
    }

    /// A slot of fresh memory for `numel` elements of `dtype`, allocated per call.
    pub(crate) fn computed(&mut self, dtype: DType, numel: usize) -> SlotId {
        self.op.slots.push(SlotPlan::Computed { dtype, numel });
        SlotId::from_index(self.op.slots.len() - 1)
    }

    /// A packed copy of operand `n` of `inputs` read through `layout` (a view of its storage),
    /// made by the lowering's copy kernel; `None` when that kernel is not generated for its
    /// dtype.
    pub(crate) fn packed(
        &mut self,
        inputs: &[DeviceOperand<'_>],
        n: usize,
        layout: &Layout,
    ) -> Result<Option<SlotId>> {
        let operand = inputs.get(n).ok_or_else(|| CudaError::InvalidUse {
            call: "eager op",
            message: format!("operand {n} missing: {} given", inputs.len()),
        })?;
        let dtype = operand.memory.dtype();
        let view = DeviceOperand {
            memory: operand.memory,
            layout,
        };
        let meta = TensorMeta::new(layout.shape.clone(), dtype);
        let copy = compile(
            &self.op.driver,
            self.state,
            &Op::View(ViewOp::Contiguous),
            &[view],
            &[meta],
        )?;
        let Some(mut copy) = copy else {
            return Ok(None);
        };
        // The copy's own slots, renumbered into this op's: its operand is operand `n`.
        let renumbered: Vec<SlotId> = copy
            .slots
            .iter()
            .map(|plan| match *plan {
                SlotPlan::Operand(_) => self.operand(n),
                SlotPlan::Computed { dtype, numel } => self.computed(dtype, numel),
            })
            .collect();
        self.op.modules.append(&mut copy.modules);
        for mut launch in std::mem::take(&mut copy.launches) {
            for binding in &mut launch.bindings {
                if let Binding::Slot { slot, .. } = binding {
                    *slot = renumbered[slot.index()];
                }
            }
            self.op.launches.push(launch);
        }
        let result = copy.outputs.first().ok_or_else(|| CudaError::InvalidUse {
            call: "eager op",
            message: "the copy kernel has no result".into(),
        })?;
        Ok(Some(renumbered[result.index()]))
    }

    /// Loads `kernel` and appends its launch, each pointer parameter bound to the slot `slot_of`
    /// gives its role.
    pub(crate) fn launch(
        &mut self,
        kernel: RenderedGemm,
        slot_of: impl Fn(GemmParamRole) -> Option<SlotId>,
    ) -> Result<()> {
        let mut bindings = Vec::with_capacity(kernel.params.len());
        for param in &kernel.params {
            let missing = || CudaError::Launch {
                kernel: kernel.name.clone(),
                message: format!("has a {:?} parameter the op does not bind", param.role),
            };
            let slot = slot_of(param.role).ok_or_else(missing)?;
            let ty = ScalarType::of_buffer(param.dtype).ok_or_else(missing)?;
            bindings.push(Binding::Slot {
                slot,
                ty,
                len: param.len,
            });
        }
        let module = self
            .op
            .driver
            .load_module(self.state.ordinal, &kernel.ptx)?;
        self.op.modules.push(module);
        let function = self.op.driver.function(module, &kernel.name)?;
        let grid = kernel.grid_for(self.state.properties.multiprocessors);
        self.op.launches.push(Launch {
            dims: LaunchDims::linear(grid, kernel.block),
            kernel: kernel.name,
            function,
            bindings,
            // Standalone GEMM and convolution kernels have no gathers.
            status: Vec::new(),
        });
        Ok(())
    }

    /// The op, its results being `outputs`.
    pub(crate) fn finish(mut self, outputs: Vec<SlotId>) -> CompiledOp {
        self.op.outputs = outputs;
        self.op
    }
}
