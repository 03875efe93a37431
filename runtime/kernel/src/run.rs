//! Running a [`Program`] on tensors: slots are filled from the inputs, the environment
//! (attributes, module calls) and the steps; kernels run through a [`KernelExecutor`] (the
//! kernel-IR interpreter, or a backend's compiled code) on raw buffers; each slot is dropped
//! after its last use.

use crate::{
    BufferRole, ExternalCall, Kernel, KernelError, Program, Result, ScalarType, SlotId, SlotSource,
    SlotView, Step,
};
use std::time::{Duration, Instant};
use tessera_tensor::op::ViewOp;
use tessera_tensor::{DType, Layout, Op, Tensor};

/// A boxed error of an environment (a module's error, a missing attribute).
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// What a program reads from outside: attributes by name and leaf module calls.
pub trait Environment {
    /// The current value of a parameter, buffer or constant.
    fn attribute(&self, target: &str) -> Result<Tensor, BoxError>;
    /// Calls the leaf module at `target`.
    fn call_module(&self, target: &str, args: Vec<Tensor>) -> Result<Vec<Tensor>, BoxError>;
}

/// A kernel's buffer as a backend sees it: the start of its storage, its length in elements
/// and its element type. Input buffers are only read; output buffers are written once per
/// element and are not initialised before.
#[derive(Debug, Clone, Copy)]
pub struct BufferPtr {
    pub ptr: *mut u8,
    pub len: usize,
    pub ty: ScalarType,
}

/// Runs one kernel on buffers the runner checked: one per parameter, of its type, at least
/// as long as the parameter says.
pub trait KernelExecutor {
    /// Runs `kernel`, the kernel of step `step`.
    ///
    /// # Safety
    /// `buffers` point to live storage of the lengths and types given, outputs writable and
    /// not aliased by any other buffer, for the duration of the call.
    unsafe fn execute(&self, step: usize, kernel: &Kernel, buffers: &[BufferPtr]) -> Result<()>;
}

/// The packed storage of a kernel output before it becomes a tensor.
enum OutVec {
    F32(Vec<f32>),
    F64(Vec<f64>),
}

impl OutVec {
    /// A buffer of `len` elements of `ty` from the tensor crate's cache of freed buffers.
    fn new(ty: ScalarType, len: usize, kernel: &str) -> tessera_tensor::Result<OutVec> {
        Ok(match ty {
            ScalarType::F64 => OutVec::F64(tessera_tensor::try_uninit_buffer(kernel, len)?),
            _ => OutVec::F32(tessera_tensor::try_uninit_buffer(kernel, len)?),
        })
    }

    fn ptr(&mut self, ty: ScalarType, len: usize) -> BufferPtr {
        let ptr = match self {
            OutVec::F32(v) => v.as_mut_ptr() as *mut u8,
            OutVec::F64(v) => v.as_mut_ptr() as *mut u8,
        };
        BufferPtr { ptr, len, ty }
    }

    /// Hands the buffer back to the tensor crate's cache.
    fn recycle(self) {
        match self {
            OutVec::F32(v) => tessera_tensor::recycle(v),
            OutVec::F64(v) => tessera_tensor::recycle(v),
        }
    }

    /// The tensor of the buffer's first `len` elements (all of them: outputs are allocated
    /// at their parameter's length).
    fn into_tensor(self, len: usize, shape: &[usize]) -> tessera_tensor::Result<Tensor> {
        match self {
            OutVec::F32(mut v) => {
                v.truncate(len);
                Tensor::from_vec(v, shape)
            }
            OutVec::F64(mut v) => {
                v.truncate(len);
                Tensor::from_vec(v, shape)
            }
        }
    }
}

fn step_error(
    step: usize,
    what: impl Into<String>,
) -> impl FnOnce(tessera_tensor::TensorError) -> KernelError {
    let what = what.into();
    move |source| KernelError::Step {
        step,
        what,
        source: Box::new(source),
    }
}

/// A slot's tensor seen through its views, applied eagerly.
fn materialize(slots: &[Option<Tensor>], v: &SlotView, step: usize) -> Result<Tensor> {
    let mut t = slots[v.slot.index()]
        .clone()
        .ok_or_else(|| KernelError::Backend {
            kernel: format!("step {step}"),
            message: format!("slot {} is empty when read", v.slot),
        })?;
    for view in &v.views {
        t = Op::View(view.clone()).apply1(&[&t]).map_err(step_error(
            step,
            format!("view {}", Op::View(view.clone()).name()),
        ))?;
    }
    Ok(t)
}

/// `t` packed in fresh storage (for a kernel compiled for packed data it is not in).
fn packed(t: &Tensor, step: usize) -> Result<Tensor> {
    let err = step_error(step, "packing an input");
    match t.dtype() {
        DType::F32 => Tensor::from_vec(
            t.to_vec::<f32>().map_err(step_error(step, "packing"))?,
            &t.shape(),
        )
        .map_err(err),
        DType::F64 => Tensor::from_vec(
            t.to_vec::<f64>().map_err(step_error(step, "packing"))?,
            &t.shape(),
        )
        .map_err(err),
        _ => Op::View(ViewOp::Contiguous).apply1(&[t]).map_err(err),
    }
}

/// Holds a read lock on the storage of each tensor from `all[next..]` while `f` runs on all
/// their buffers; a tensor sharing storage with an earlier one reuses its pointer (one lock
/// per storage, so a lock is never taken twice).
fn with_reads<R>(
    all: &[&Tensor],
    next: usize,
    acc: &mut Vec<(BufferPtr, Layout)>,
    step: usize,
    f: &mut dyn FnMut(&[(BufferPtr, Layout)]) -> Result<R>,
) -> Result<R> {
    let Some(first) = all.get(next) else {
        return f(acc);
    };
    if let Some(j) = (0..next).find(|&j| all[j].shares_storage(first)) {
        acc.push((acc[j].0, first.layout()));
        let r = with_reads(all, next + 1, acc, step, f);
        acc.pop();
        return r;
    }
    let err = step_error(step, "reading a kernel input");
    macro_rules! read {
        ($t:ty, $ty:expr) => {
            first
                .with_storage_slice(|s: &[$t], layout| {
                    acc.push((
                        BufferPtr {
                            ptr: s.as_ptr() as *mut u8,
                            len: s.len(),
                            ty: $ty,
                        },
                        layout.clone(),
                    ));
                    let r = with_reads(all, next + 1, acc, step, f);
                    acc.pop();
                    r
                })
                .map_err(err)?
        };
    }
    match first.dtype() {
        DType::F32 => read!(f32, ScalarType::F32),
        DType::F64 => read!(f64, ScalarType::F64),
        d => Err(KernelError::Backend {
            kernel: format!("step {step}"),
            message: format!("a kernel input is {d:?}"),
        }),
    }
}

/// Runs `program` on `inputs` with kernels executed by `executor`.
pub fn run_program(
    program: &Program,
    env: &dyn Environment,
    executor: &dyn KernelExecutor,
    inputs: &[Tensor],
) -> Result<Vec<Tensor>> {
    run_program_timed(program, env, executor, inputs, None)
}

/// What a timed run measured of one step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepCost {
    /// The step's index in [`Program::steps`].
    pub step: usize,
    pub elapsed: Duration,
    /// Bytes of tensor storage the step created on the running thread
    /// ([`tessera_tensor::allocated_bytes`]).
    pub allocated_bytes: u64,
}

/// Called after each step of a timed run with what it cost and the step's output tensors.
pub type StepTimer<'a> = &'a mut dyn FnMut(StepCost, &[&Tensor]);

/// [`run_program`], calling `timer` after each step (what a profiler records). Without a
/// timer it reads neither the clock nor the allocation count.
pub fn run_program_timed(
    program: &Program,
    env: &dyn Environment,
    executor: &dyn KernelExecutor,
    inputs: &[Tensor],
    mut timer: Option<StepTimer<'_>>,
) -> Result<Vec<Tensor>> {
    let expected = program.input_count();
    if inputs.len() != expected {
        return Err(KernelError::InputCount {
            expected,
            got: inputs.len(),
        });
    }
    let mut slots: Vec<Option<Tensor>> = vec![None; program.slots.len()];
    let mut uses = vec![0usize; program.slots.len()];
    for step in &program.steps {
        match step {
            Step::Kernel { inputs, .. } => inputs.iter().for_each(|s| uses[s.index()] += 1),
            Step::External { inputs, .. } => inputs.iter().for_each(|v| uses[v.slot.index()] += 1),
        }
    }
    for v in &program.outputs {
        uses[v.slot.index()] += 1;
    }
    for (i, slot) in program.slots.iter().enumerate() {
        let tensor = match &slot.source {
            SlotSource::Input(n) => {
                let t = &inputs[*n];
                if t.shape() != slot.meta.shape || t.dtype() != slot.meta.dtype {
                    return Err(KernelError::InputMeta {
                        index: *n,
                        shape: slot.meta.shape.clone(),
                        dtype: slot.meta.dtype,
                        got_shape: t.shape(),
                        got_dtype: t.dtype(),
                    });
                }
                t.clone()
            }
            SlotSource::Attribute(target) => {
                let t = env
                    .attribute(target)
                    .map_err(|source| KernelError::Environment {
                        what: format!("reading attribute {target}"),
                        source,
                    })?;
                if t.shape() != slot.meta.shape || t.dtype() != slot.meta.dtype {
                    return Err(KernelError::SlotMeta {
                        slot: SlotId::from_index(i).to_string(),
                        name: target.clone(),
                        shape: slot.meta.shape.clone(),
                        dtype: slot.meta.dtype,
                        got_shape: t.shape(),
                        got_dtype: t.dtype(),
                    });
                }
                t
            }
            SlotSource::Step => continue,
        };
        slots[i] = Some(tensor);
    }
    for (index, step) in program.steps.iter().enumerate() {
        let started = timer
            .is_some()
            .then(|| (Instant::now(), tessera_tensor::allocated_bytes()));
        let read: Vec<SlotId> = match step {
            Step::Kernel {
                kernel,
                inputs,
                outputs,
                ..
            } => {
                run_kernel(
                    program, &mut slots, executor, index, kernel, inputs, outputs,
                )?;
                inputs.clone()
            }
            Step::External {
                node,
                call,
                inputs,
                outputs,
            } => {
                let args = inputs
                    .iter()
                    .map(|v| materialize(&slots, v, index))
                    .collect::<Result<Vec<_>>>()?;
                let results = match call {
                    ExternalCall::Op(op) => {
                        let refs: Vec<&Tensor> = args.iter().collect();
                        op.apply(&refs)
                            .map_err(step_error(index, format!("%{node} = {}", op.name())))?
                    }
                    ExternalCall::Module(target) => {
                        env.call_module(target, args).map_err(|source| {
                            KernelError::Environment {
                                what: format!("calling module {target} for %{node}"),
                                source,
                            }
                        })?
                    }
                };
                if results.len() != outputs.len() {
                    return Err(KernelError::Backend {
                        kernel: format!("%{node}"),
                        message: format!(
                            "gave {} values, {} expected",
                            results.len(),
                            outputs.len()
                        ),
                    });
                }
                for (slot, t) in outputs.iter().zip(results) {
                    slots[slot.index()] = Some(t);
                }
                inputs.iter().map(|v| v.slot).collect()
            }
        };
        if let (Some(timer), Some((started, allocated))) = (timer.as_mut(), started) {
            let cost = StepCost {
                step: index,
                elapsed: started.elapsed(),
                allocated_bytes: tessera_tensor::allocated_bytes().wrapping_sub(allocated),
            };
            let written = step_outputs(step);
            let outputs: Vec<&Tensor> = written
                .iter()
                .filter_map(|s| slots[s.index()].as_ref())
                .collect();
            timer(cost, &outputs);
        }
        for s in read {
            uses[s.index()] -= 1;
            if uses[s.index()] == 0 {
                slots[s.index()] = None;
            }
        }
    }
    program
        .outputs
        .iter()
        .map(|v| materialize(&slots, v, program.steps.len()))
        .collect()
}

/// The slots a step writes.
fn step_outputs(step: &Step) -> &[SlotId] {
    match step {
        Step::Kernel { outputs, .. } | Step::External { outputs, .. } => outputs,
    }
}

/// Runs one kernel step: checks its inputs against the layouts it was compiled for (packing
/// those compiled packed that are not), allocates its outputs, and calls the executor.
fn run_kernel(
    program: &Program,
    slots: &mut [Option<Tensor>],
    executor: &dyn KernelExecutor,
    index: usize,
    kernel: &Kernel,
    inputs: &[SlotId],
    outputs: &[SlotId],
) -> Result<()> {
    let mut tensors = Vec::new();
    for s in inputs {
        let slot = program.slot(*s);
        let t = slots[s.index()]
            .clone()
            .ok_or_else(|| KernelError::Backend {
                kernel: kernel.name.clone(),
                message: format!("slot {s} is empty when read"),
            })?;
        let t = if t.layout() == slot.layout {
            t
        } else if slot.layout == Layout::contiguous(&slot.meta.shape) {
            packed(&t, index)?
        } else {
            let l = t.layout();
            return Err(KernelError::InputLayout {
                index: match slot.source {
                    SlotSource::Input(n) => n,
                    _ => s.index(),
                },
                expected: slot.layout.strides.clone(),
                offset: slot.layout.offset,
                got: l.strides,
                got_offset: l.offset,
            });
        };
        tensors.push(t);
    }
    let out_params: Vec<_> = kernel
        .buffers
        .iter()
        .filter(|b| b.role == BufferRole::Output)
        .cloned()
        .collect();
    let mut out_vecs: Vec<OutVec> = out_params
        .iter()
        .map(|p| OutVec::new(p.ty, p.len, &kernel.name))
        .collect::<tessera_tensor::Result<_>>()
        .map_err(step_error(index, "allocating the outputs"))?;
    // Scratch buffers come from the buffer cache too: the external call writes each block of
    // them before any load of the kernel reads it.
    let mut scratch: Vec<(OutVec, ScalarType, usize)> = kernel
        .buffers
        .iter()
        .filter(|b| b.role == BufferRole::Scratch)
        .map(|b| Ok((OutVec::new(b.ty, b.len, &kernel.name)?, b.ty, b.len)))
        .collect::<tessera_tensor::Result<_>>()
        .map_err(step_error(index, "allocating the scratch buffers"))?;
    let refs: Vec<&Tensor> = tensors.iter().collect();
    with_reads(&refs, 0, &mut Vec::new(), index, &mut |reads| {
        let mut buffers = Vec::new();
        let (mut next_in, mut next_out) = (reads.iter(), out_vecs.iter_mut().zip(&out_params));
        let mut next_scratch = scratch.iter_mut();
        for param in &kernel.buffers {
            let b = match param.role {
                BufferRole::Input => next_in.next().map(|(b, _)| *b),
                BufferRole::Output => next_out.next().map(|(v, p)| v.ptr(p.ty, p.len)),
                BufferRole::Scratch => next_scratch.next().map(|(v, ty, len)| v.ptr(*ty, *len)),
            };
            let b = b.ok_or_else(|| KernelError::Backend {
                kernel: kernel.name.clone(),
                message: "fewer buffers than parameters".into(),
            })?;
            if b.ty != param.ty || b.len < param.len {
                return Err(KernelError::Backend {
                    kernel: kernel.name.clone(),
                    message: format!(
                        "a {} buffer of {} elements for a {} parameter of {}",
                        b.ty, b.len, param.ty, param.len
                    ),
                });
            }
            buffers.push(b);
        }
        // SAFETY: inputs are live storage under read locks, checked above against the
        // parameters' types and lengths; outputs are fresh vectors of the parameters' lengths.
        unsafe { executor.execute(index, kernel, &buffers) }
    })?;
    // The scratch buffers go back to the cache for the next call (they are no tensors').
    scratch.into_iter().for_each(|(vec, _, _)| vec.recycle());
    for ((vec, slot), param) in out_vecs.into_iter().zip(outputs).zip(&out_params) {
        let shape = &program.slot(*slot).meta.shape;
        // The kernel stored every point of its nest into each output, whose elements are packed
        // one per point (`Kernel::verify`'s bounds and the lowering's packed store index).
        let t = vec
            .into_tensor(param.len, shape)
            .map_err(step_error(index, kernel.name.clone()))?;
        slots[slot.index()] = Some(t);
    }
    Ok(())
}

/// An environment with no attributes and no modules (a graph of inputs and ops only).
#[derive(Debug, Clone, Copy, Default)]
pub struct NoEnvironment;

impl Environment for NoEnvironment {
    fn attribute(&self, target: &str) -> Result<Tensor, BoxError> {
        Err(format!("no attribute {target} in an empty environment").into())
    }

    fn call_module(&self, target: &str, _args: Vec<Tensor>) -> Result<Vec<Tensor>, BoxError> {
        Err(format!("no module {target} in an empty environment").into())
    }
}
