//! From an eager op to loaded kernels: the op's graph lowered by the shared lowering, every
//! step checked to be a kernel the PTX renderer generates (see [`super::external`] for the
//! others), each kernel rendered for the device's PTX target and loaded, and the plan of
//! which memory each kernel parameter gets: an operand's storage, an output or intermediate
//! allocated per call, or scratch.

use super::external::{compile_call, external_part};
use super::graph::op_graph;
use crate::driver::{CudaDriver, FunctionId, LaunchDims, ModuleId};
use crate::tensor::device_state::DeviceState;
use crate::{CudaError, Result, render};
use std::sync::Arc;
use tessera_fx::{Graph, NodeKind};
use tessera_kernel::{BufferRole, LowerOptions, ScalarType, SlotId, SlotSource, Step, lower_with};
use tessera_tensor::backend::DeviceOperand;
use tessera_tensor::op::QuantOp;
use tessera_tensor::{DType, Op, TensorMeta};

/// Where a slot of the program lives when it runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SlotPlan {
    /// Operand `n`'s storage, read in the layout the kernels were compiled for.
    Operand(usize),
    /// Fresh packed memory, allocated for each call.
    Computed { dtype: DType, numel: usize },
}

/// The memory one kernel parameter is bound to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Binding {
    Slot {
        slot: SlotId,
        ty: ScalarType,
        /// Elements the kernel may touch.
        len: usize,
    },
    /// Scratch of `len` elements, allocated for the launch.
    Scratch { ty: ScalarType, len: usize },
}

/// One loaded kernel and how to launch it.
#[derive(Debug, Clone)]
pub(crate) struct Launch {
    pub(crate) kernel: String,
    pub(crate) function: FunctionId,
    pub(crate) dims: LaunchDims,
    pub(crate) bindings: Vec<Binding>,
    /// The bindings that are status buffers of gathers (`tessera_kernel::gather`), zeroed
    /// before the launch and checked after it.
    pub(crate) status: Vec<usize>,
}

/// An eager op's loaded kernels, launched in order by [`CompiledOp::run`]; its modules are
/// unloaded when it is dropped.
#[derive(Debug)]
pub(crate) struct CompiledOp {
    pub(crate) driver: Arc<dyn CudaDriver>,
    pub(crate) modules: Vec<ModuleId>,
    pub(crate) slots: Vec<SlotPlan>,
    pub(crate) launches: Vec<Launch>,
    /// The slots holding the op's results, in output order.
    pub(crate) outputs: Vec<SlotId>,
}

impl Drop for CompiledOp {
    fn drop(&mut self) {
        for m in &self.modules {
            let _ = self.driver.unload_module(*m);
        }
    }
}

/// Lowers, renders and loads `op` on `inputs` for `state`'s device; `Ok(None)` when some
/// step is not a kernel the renderer generates.
pub(crate) fn compile(
    driver: &Arc<dyn CudaDriver>,
    state: &DeviceState,
    op: &Op,
    inputs: &[DeviceOperand<'_>],
    outputs: &[TensorMeta],
) -> Result<Option<CompiledOp>> {
    if let Some(call) = compile_call(driver, state, op, inputs, outputs) {
        return call;
    }
    compile_graph(driver, state, &op_graph(op, inputs, outputs)?, inputs)
}

/// The lowering options of an eager graph: product kernels for the int8 linears and conv2d
/// (whose eager kernels are host GEMMs), the CPU's defaults otherwise (a float GEMM or
/// convolution is a library call, [`compile_call`]).
fn options_for(graph: &Graph) -> LowerOptions {
    let int8_product = graph.nodes().any(|id| {
        graph.node(&id).is_ok_and(|n| {
            matches!(
                &n.kind,
                NodeKind::CallFunction {
                    op: Op::Quant(
                        QuantOp::Linear { .. }
                            | QuantOp::LinearDynamic { .. }
                            | QuantOp::Conv2d { .. }
                    )
                }
            )
        })
    });
    LowerOptions {
        product_kernels: int8_product,
        weights_as_stored: true,
        plain_conv_calls: true,
        ..LowerOptions::default()
    }
}

/// Lowers, renders and loads `graph`, whose placeholders are `inputs`, for `state`'s device;
/// `Ok(None)` when some step is not a kernel the renderer generates.
pub(crate) fn compile_graph(
    driver: &Arc<dyn CudaDriver>,
    state: &DeviceState,
    graph: &Graph,
    inputs: &[DeviceOperand<'_>],
) -> Result<Option<CompiledOp>> {
    let layouts: Vec<_> = inputs.iter().map(|x| x.layout.clone()).collect();
    let program = lower_with(graph, &layouts, options_for(graph))?;
    if program.steps.iter().any(|s| external_part(s).is_some()) {
        return Ok(None);
    }
    let mut slots = Vec::with_capacity(program.slots.len());
    for slot in &program.slots {
        slots.push(match slot.source {
            SlotSource::Input(n) => SlotPlan::Operand(n),
            SlotSource::Step => SlotPlan::Computed {
                dtype: slot.meta.dtype,
                numel: slot.meta.numel(),
            },
            SlotSource::Attribute(_) | SlotSource::Derived { .. } => return Ok(None),
        });
    }
    let mut results = Vec::with_capacity(program.outputs.len());
    for out in &program.outputs {
        // A result that is an operand, or a view of a slot, would need a copy the program
        // does not make.
        let computed = matches!(slots[out.slot.index()], SlotPlan::Computed { .. });
        if !out.views.is_empty() || !computed || results.contains(&out.slot) {
            return Ok(None);
        }
        results.push(out.slot);
    }
    let mut rendered = Vec::new();
    for step in &program.steps {
        let Step::Kernel {
            kernel,
            inputs,
            outputs,
            ..
        } = step
        else {
            return Ok(None);
        };
        let text = match render(kernel, &state.target) {
            Ok(r) => r,
            Err(CudaError::Unsupported { .. }) => return Ok(None),
            Err(e) => return Err(e),
        };
        let (mut ins, mut outs) = (inputs.iter(), outputs.iter());
        let mut bindings = Vec::with_capacity(kernel.buffers.len());
        for param in &kernel.buffers {
            let slot = match param.role {
                BufferRole::Input => ins.next(),
                BufferRole::Output => outs.next(),
                BufferRole::Scratch => {
                    bindings.push(Binding::Scratch {
                        ty: param.ty,
                        len: param.len,
                    });
                    continue;
                }
            };
            let slot = slot.ok_or_else(|| CudaError::Launch {
                kernel: kernel.name.clone(),
                message: "has more buffer parameters than its step has slots".into(),
            })?;
            bindings.push(Binding::Slot {
                slot: *slot,
                ty: param.ty,
                len: param.len,
            });
        }
        let status: Vec<usize> = kernel.status_buffers().iter().map(|b| b.index()).collect();
        rendered.push((text, bindings, status));
    }
    let mut compiled = CompiledOp {
        driver: Arc::clone(driver),
        modules: Vec::new(),
        slots,
        launches: Vec::new(),
        outputs: results,
    };
    for (text, bindings, status) in rendered {
        let module = driver.load_module(state.ordinal, &text.ptx)?;
        compiled.modules.push(module);
        let function = driver.function(module, &text.name)?;
        compiled.launches.push(Launch {
            dims: LaunchDims::linear(text.grid_for(state.properties.multiprocessors), text.block),
            kernel: text.name,
            function,
            bindings,
            status,
        });
    }
    Ok(Some(compiled))
}
