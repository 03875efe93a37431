//! Running a [`Program`] on tensors under its [`MemoryPlan`]: slots are filled from the inputs,
//! the environment (attributes, module calls) and the steps; kernels run through a
//! [`KernelExecutor`] (the kernel-IR interpreter, or a backend's compiled code) on raw buffers,
//! intermediate ones in the workspace's arena; each tensor slot is dropped after its last use.

use crate::memory_plan::{MemoryPlan, SlotHome};
use crate::{
    BufferRole, ExternalCall, Kernel, KernelError, Program, Result, ScalarType, SlotId, SlotSource,
    SlotView, Step, Workspace,
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

    /// Runs the kernels of one launch group ([`Program::launch_groups`]), which write
    /// disjoint buffers and read none another writes, so they may run at once. The default
    /// runs them one by one with [`KernelExecutor::execute`]; a backend launches them as one.
    ///
    /// # Safety
    /// As [`KernelExecutor::execute`], for every part's buffers.
    unsafe fn execute_group(&self, parts: &[GroupPart<'_>]) -> Result<()> {
        for part in parts {
            // SAFETY: forwarded from the caller, part by part.
            unsafe { self.execute(part.step, part.kernel, part.buffers) }?;
        }
        Ok(())
    }
}

/// One kernel of a launch group with its buffers, checked as [`KernelExecutor::execute`]'s.
#[derive(Debug, Clone, Copy)]
pub struct GroupPart<'a> {
    /// The kernel's step in the program.
    pub step: usize,
    pub kernel: &'a Kernel,
    pub buffers: &'a [BufferPtr],
}

/// The packed storage of a kernel output before it becomes a tensor.
pub(crate) enum OutVec {
    F32(Vec<f32>),
    F64(Vec<f64>),
    F16(Vec<half::f16>),
    BF16(Vec<half::bf16>),
    /// One byte per element, 0 or 1, as kernels store bools.
    Bool(Vec<bool>),
    I64(Vec<i64>),
    U8(Vec<u8>),
    I8(Vec<i8>),
    I32(Vec<i32>),
}

impl OutVec {
    /// A buffer of `len` elements of `ty` from the tensor crate's cache of freed buffers.
    pub(crate) fn new(ty: ScalarType, len: usize, kernel: &str) -> tessera_tensor::Result<OutVec> {
        Ok(match ty {
            ScalarType::F64 => OutVec::F64(tessera_tensor::try_uninit_buffer(kernel, len)?),
            ScalarType::F16 => OutVec::F16(tessera_tensor::try_uninit_buffer(kernel, len)?),
            ScalarType::BF16 => OutVec::BF16(tessera_tensor::try_uninit_buffer(kernel, len)?),
            ScalarType::Bool => OutVec::Bool(tessera_tensor::try_uninit_buffer(kernel, len)?),
            ScalarType::I64 => OutVec::I64(tessera_tensor::try_uninit_buffer(kernel, len)?),
            ScalarType::F32 => OutVec::F32(tessera_tensor::try_uninit_buffer(kernel, len)?),
            ScalarType::U8 => OutVec::U8(tessera_tensor::try_uninit_buffer(kernel, len)?),
            ScalarType::I8 => OutVec::I8(tessera_tensor::try_uninit_buffer(kernel, len)?),
            ScalarType::I32 => OutVec::I32(tessera_tensor::try_uninit_buffer(kernel, len)?),
        })
    }

    fn ptr(&mut self, ty: ScalarType, len: usize) -> BufferPtr {
        let ptr = match self {
            OutVec::F32(v) => v.as_mut_ptr() as *mut u8,
            OutVec::F64(v) => v.as_mut_ptr() as *mut u8,
            OutVec::F16(v) => v.as_mut_ptr() as *mut u8,
            OutVec::BF16(v) => v.as_mut_ptr() as *mut u8,
            OutVec::Bool(v) => v.as_mut_ptr() as *mut u8,
            OutVec::I64(v) => v.as_mut_ptr() as *mut u8,
            OutVec::U8(v) => v.as_mut_ptr(),
            OutVec::I8(v) => v.as_mut_ptr() as *mut u8,
            OutVec::I32(v) => v.as_mut_ptr() as *mut u8,
        };
        BufferPtr { ptr, len, ty }
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
            OutVec::F16(mut v) => {
                v.truncate(len);
                Tensor::from_vec(v, shape)
            }
            OutVec::BF16(mut v) => {
                v.truncate(len);
                Tensor::from_vec(v, shape)
            }
            OutVec::Bool(mut v) => {
                v.truncate(len);
                Tensor::from_vec(v, shape)
            }
            OutVec::I64(mut v) => {
                v.truncate(len);
                Tensor::from_vec(v, shape)
            }
            OutVec::U8(mut v) => {
                v.truncate(len);
                Tensor::from_vec(v, shape)
            }
            OutVec::I8(mut v) => {
                v.truncate(len);
                Tensor::from_vec(v, shape)
            }
            OutVec::I32(mut v) => {
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
pub(crate) fn materialize(slots: &[Option<Tensor>], v: &SlotView, step: usize) -> Result<Tensor> {
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

/// Holds a read lock on the storage of each tensor from `all[next..]` while `f` runs on their
/// buffers (the whole storage of each); a tensor sharing storage with an earlier one reuses
/// its pointer (one lock per storage, so a lock is never taken twice). Allocates nothing when
/// `acc` has room for every buffer.
fn with_reads<R>(
    all: &[(Tensor, usize)],
    next: usize,
    acc: &mut Vec<BufferPtr>,
    step: usize,
    f: &mut dyn FnMut(&[BufferPtr]) -> Result<R>,
) -> Result<R> {
    let Some((first, _)) = all.get(next) else {
        return f(acc);
    };
    if let Some(j) = (0..next).find(|&j| all[j].0.shares_storage(first)) {
        acc.push(acc[j]);
        let r = with_reads(all, next + 1, acc, step, f);
        acc.pop();
        return r;
    }
    let on_cpu = first.device() == tessera_tensor::Device::Cpu;
    macro_rules! read {
        ($t:ty, $ty:expr) => {{
            let mut go = |s: &[$t], _: &Layout| {
                acc.push(BufferPtr {
                    ptr: s.as_ptr() as *mut u8,
                    len: s.len(),
                    ty: $ty,
                });
                let r = with_reads(all, next + 1, acc, step, f);
                acc.pop();
                r
            };
            // Device storage is copied to the host for the kernel (the copy allocates).
            let read = if on_cpu {
                first.with_cpu_slice(|s: &[$t], l| go(s, l))
            } else {
                first.with_storage_slice(|s: &[$t], l| go(s, l))
            };
            read.map_err(|e| step_error(step, "reading a kernel input")(e))?
        }};
    }
    match first.dtype() {
        DType::F32 => read!(f32, ScalarType::F32),
        DType::F64 => read!(f64, ScalarType::F64),
        DType::F16 => read!(half::f16, ScalarType::F16),
        DType::BF16 => read!(half::bf16, ScalarType::BF16),
        // A kernel reads a bool as its byte, which Rust keeps 0 or 1.
        DType::Bool => read!(bool, ScalarType::Bool),
        DType::I64 => read!(i64, ScalarType::I64),
        DType::U8 => read!(u8, ScalarType::U8),
        DType::I8 => read!(i8, ScalarType::I8),
        DType::I32 => read!(i32, ScalarType::I32),
    }
}

/// Runs `program` on `inputs` with kernels executed by `executor`, planning its memory for
/// this one run (a compiled module plans once and keeps its workspace: [`run_planned`]).
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
    /// Bytes of the values the step wrote (in the arena or in tensors).
    pub output_bytes: u64,
}

/// Called after each step of a timed run with what it cost and the step's output tensors
/// (those that are tensors: values in the arena are not).
pub type StepTimer<'a> = &'a mut dyn FnMut(StepCost, &[&Tensor]);

/// [`run_program`], calling `timer` after each step (what a profiler records). Without a
/// timer it reads neither the clock nor the allocation count.
pub fn run_program_timed(
    program: &Program,
    env: &dyn Environment,
    executor: &dyn KernelExecutor,
    inputs: &[Tensor],
    timer: Option<StepTimer<'_>>,
) -> Result<Vec<Tensor>> {
    let plan = MemoryPlan::new(program);
    let mut workspace = Workspace::new(program, &plan);
    run_planned(program, &plan, &mut workspace, env, executor, inputs, timer)
}

/// Runs `program` under its memory plan `plan` in `workspace` (made for that plan): once the
/// workspace is warm, only the output tensors are allocated (and what external steps and
/// the GEMM library allocate themselves).
pub fn run_planned(
    program: &Program,
    plan: &MemoryPlan,
    workspace: &mut Workspace,
    env: &dyn Environment,
    executor: &dyn KernelExecutor,
    inputs: &[Tensor],
    timer: Option<StepTimer<'_>>,
) -> Result<Vec<Tensor>> {
    let run = Run {
        program,
        plan,
        env,
        executor,
    };
    let result = run.load(workspace, inputs).and_then(|()| {
        run.steps(workspace, timer)?;
        let end = program.steps.len();
        program
            .outputs
            .iter()
            .map(|v| materialize(&workspace.slots, v, end))
            .collect()
    });
    workspace.reset();
    result
}

/// One run's fixed parts: the program, its plan, and what runs its steps.
pub(crate) struct Run<'a> {
    pub(crate) program: &'a Program,
    pub(crate) plan: &'a MemoryPlan,
    pub(crate) env: &'a dyn Environment,
    pub(crate) executor: &'a dyn KernelExecutor,
}

impl Run<'_> {
    /// Checks that `ws` was made for this plan and fills the input and attribute slots.
    pub(crate) fn load(&self, ws: &mut Workspace, inputs: &[Tensor]) -> Result<()> {
        let program = self.program;
        let expected = program.input_count();
        if inputs.len() != expected {
            return Err(KernelError::InputCount {
                expected,
                got: inputs.len(),
            });
        }
        if ws.slots.len() != program.slots.len() || ws.arena_bytes() < self.plan.arena_bytes {
            return Err(KernelError::Backend {
                kernel: "(runner)".into(),
                message: format!(
                    "a workspace of {} slots and {} arena bytes for a program of {} slots \
                     planned for {} bytes",
                    ws.slots.len(),
                    ws.arena_bytes(),
                    program.slots.len(),
                    self.plan.arena_bytes
                ),
            });
        }
        self.plan.check(program)?;
        ws.reset();
        for (i, slot) in program.slots.iter().enumerate() {
            let fits = |t: &Tensor| {
                t.with_layout(|l, d| l.shape == slot.meta.shape && d == slot.meta.dtype)
            };
            let tensor = match &slot.source {
                SlotSource::Input(n) => {
                    let t = &inputs[*n];
                    if !fits(t) {
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
                    let t =
                        self.env
                            .attribute(target)
                            .map_err(|source| KernelError::Environment {
                                what: format!("reading attribute {target}"),
                                source,
                            })?;
                    if !fits(&t) {
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
                SlotSource::Step | SlotSource::Derived { .. } => continue,
            };
            ws.slots[i] = Some(tensor);
        }
        crate::derived::fill_derived(program, &mut ws.slots, &mut ws.derived)
    }

    /// Runs every step, dropping each tensor slot after its last use. A launch group runs as
    /// one call of the executor, except in a timed run, which runs and times its kernels one
    /// by one.
    pub(crate) fn steps(&self, ws: &mut Workspace, mut timer: Option<StepTimer<'_>>) -> Result<()> {
        let mut index = 0;
        while index < self.program.steps.len() {
            if timer.is_none()
                && let Some(group) = self.program.launch_group_at(index)
            {
                self.group(ws, group.clone())?;
                for i in group.clone() {
                    for s in &self.plan.releases[i] {
                        ws.slots[s.index()] = None;
                    }
                }
                index = group.end;
                continue;
            }
            let step = &self.program.steps[index];
            let started = timer
                .is_some()
                .then(|| (Instant::now(), tessera_tensor::allocated_bytes()));
            match step {
                Step::Kernel { .. } => self.group(ws, index..index + 1)?,
                Step::External {
                    node,
                    call,
                    inputs,
                    outputs,
                } => self.external(ws, index, node, call, inputs, outputs)?,
            }
            if let (Some(timer), Some((started, allocated))) = (timer.as_mut(), started) {
                let written = step_outputs(step);
                let cost = StepCost {
                    step: index,
                    elapsed: started.elapsed(),
                    allocated_bytes: tessera_tensor::allocated_bytes().wrapping_sub(allocated),
                    output_bytes: written
                        .iter()
                        .map(|s| {
                            let meta = &self.program.slot(*s).meta;
                            (meta.numel() * meta.dtype.size_in_bytes()) as u64
                        })
                        .sum(),
                };
                let outputs: Vec<&Tensor> = written
                    .iter()
                    .filter_map(|s| ws.slots[s.index()].as_ref())
                    .collect();
                timer(cost, &outputs);
            }
            for s in &self.plan.releases[index] {
                ws.slots[s.index()] = None;
            }
            index += 1;
        }
        Ok(())
    }

    /// Runs an external step: its arguments are materialised as tensors (the fallback path
    /// allocates), its results stored in their slots.
    fn external(
        &self,
        ws: &mut Workspace,
        index: usize,
        node: &str,
        call: &ExternalCall,
        inputs: &[SlotView],
        outputs: &[SlotId],
    ) -> Result<()> {
        let args = inputs
            .iter()
            .map(|v| materialize(&ws.slots, v, index))
            .collect::<Result<Vec<_>>>()?;
        let results = match call {
            ExternalCall::Op(op) => {
                let refs: Vec<&Tensor> = args.iter().collect();
                op.apply(&refs)
                    .map_err(step_error(index, format!("%{node} = {}", op.name())))?
            }
            ExternalCall::Module(target) => {
                self.env
                    .call_module(target, args)
                    .map_err(|source| KernelError::Environment {
                        what: format!("calling module {target} for %{node}"),
                        source,
                    })?
            }
        };
        if results.len() != outputs.len() {
            return Err(KernelError::Backend {
                kernel: format!("%{node}"),
                message: format!("gave {} values, {} expected", results.len(), outputs.len()),
            });
        }
        for (slot, t) in outputs.iter().zip(results) {
            ws.slots[slot.index()] = Some(t);
        }
        Ok(())
    }

    /// Runs the kernel steps `steps` (one step, or a launch group) as one call of the
    /// executor: arena buffers and the caller's output buffers by pointer, tensor inputs
    /// read-locked (packed first when a kernel was compiled for packed data they are not in),
    /// outputs that leave the arena in new buffers that become their slots' tensors.
    fn group(&self, ws: &mut Workspace, steps: std::ops::Range<usize>) -> Result<()> {
        ws.buffers.clear();
        ws.reads.clear();
        ws.fresh.clear();
        ws.parts.clear();
        for index in steps.clone() {
            let Step::Kernel {
                kernel,
                inputs,
                outputs,
                ..
            } = &self.program.steps[index]
            else {
                return Err(KernelError::Backend {
                    kernel: format!("step {index}"),
                    message: "an external step in a launch group".into(),
                });
            };
            let first = ws.buffers.len();
            self.gather_buffers(ws, index, kernel, inputs, outputs)?;
            ws.parts.push((index, first..ws.buffers.len()));
        }
        let Workspace {
            reads,
            read_ptrs,
            buffers,
            parts,
            ..
        } = ws;
        let program = self.program;
        let executor = self.executor;
        let kernel_of = |index: usize| match &program.steps[index] {
            Step::Kernel { kernel, .. } => Some(kernel),
            Step::External { .. } => None,
        };
        with_reads(reads, 0, read_ptrs, steps.start, &mut |ptrs| {
            for (ptr, (_, at)) in ptrs.iter().zip(reads.iter()) {
                buffers[*at] = *ptr;
            }
            for (index, range) in parts.iter() {
                let Some(kernel) = kernel_of(*index) else {
                    continue;
                };
                for (b, param) in buffers[range.clone()].iter().zip(&kernel.buffers) {
                    if b.ty != param.ty || b.len < param.len {
                        return Err(KernelError::Backend {
                            kernel: kernel.name.clone(),
                            message: format!(
                                "a {} buffer of {} elements for a {} parameter of {}",
                                b.ty, b.len, param.ty, param.len
                            ),
                        });
                    }
                }
                for s in &kernel.status_buffers() {
                    // SAFETY: a status is an i64 scratch of `STATUS_LEN` elements in the arena
                    // (`verify`, and the length check above), written by this kernel only.
                    unsafe { clear_status(buffers[range.start + s.index()]) };
                }
            }
            // SAFETY: tensor inputs are live storage under read locks, arena buffers lie in the
            // workspace's arena (checked against the plan when the run started) and are
            // disjoint from every buffer live at the same step (the plan takes a launch group
            // as one step, `MemoryPlan::new`), outputs are fresh vectors or the caller's write-locked
            // storage; all were checked above against the parameters' types and lengths.
            unsafe {
                match parts.as_slice() {
                    [(index, range)] => match kernel_of(*index) {
                        Some(kernel) => executor.execute(*index, kernel, &buffers[range.clone()]),
                        None => Ok(()),
                    },
                    _ => {
                        let group: Vec<GroupPart<'_>> = parts
                            .iter()
                            .filter_map(|(index, range)| {
                                Some(GroupPart {
                                    step: *index,
                                    kernel: kernel_of(*index)?,
                                    buffers: &buffers[range.clone()],
                                })
                            })
                            .collect();
                        executor.execute_group(&group)
                    }
                }
            }?;
            for (index, range) in parts.iter() {
                let Some(kernel) = kernel_of(*index) else {
                    continue;
                };
                for s in &kernel.status_buffers() {
                    // SAFETY: as above; the kernel has finished.
                    let read = unsafe { read_status(buffers[range.start + s.index()]) };
                    crate::gather::check_status(&kernel.name, &read)?;
                }
            }
            Ok(())
        })?;
        ws.reads.clear();
        for (vec, slot, len) in ws.fresh.drain(..) {
            let shape = &self.program.slot(slot).meta.shape;
            // The kernel stored every point of its nest into each output, whose elements are
            // packed one per point (`Kernel::verify`'s bounds and the lowering's packed store
            // index).
            let t = vec.into_tensor(len, shape).map_err(|e| {
                let name = &self.program.slot(slot).name;
                step_error(steps.start, format!("the output %{name}"))(e)
            })?;
            ws.slots[slot.index()] = Some(t);
        }
        Ok(())
    }

    /// Appends kernel step `index`'s buffers to the workspace's: arena and target pointers,
    /// a placeholder for each tensor input (read-locked later), a fresh vector for each
    /// output leaving the arena.
    fn gather_buffers(
        &self,
        ws: &mut Workspace,
        index: usize,
        kernel: &Kernel,
        inputs: &[SlotId],
        outputs: &[SlotId],
    ) -> Result<()> {
        let missing = || KernelError::Backend {
            kernel: kernel.name.clone(),
            message: "fewer buffers than parameters".into(),
        };
        let (mut ins, mut outs) = (inputs.iter(), outputs.iter());
        let mut scratch = self.plan.scratch[index].iter();
        for param in &kernel.buffers {
            let at = ws.buffers.len();
            let b = match param.role {
                BufferRole::Input => {
                    let s = *ins.next().ok_or_else(missing)?;
                    match (self.plan.slots[s.index()], ws.targets[s.index()]) {
                        (SlotHome::Arena(b), _) => ws.arena_ptr(&b),
                        (_, Some(target)) => target,
                        _ => {
                            let t = self.kernel_input(ws, index, kernel, s)?;
                            ws.reads.push((t, at));
                            BufferPtr {
                                ptr: std::ptr::null_mut(),
                                len: 0,
                                ty: param.ty,
                            }
                        }
                    }
                }
                BufferRole::Output => {
                    let s = *outs.next().ok_or_else(missing)?;
                    match (self.plan.slots[s.index()], ws.targets[s.index()]) {
                        (SlotHome::Arena(b), _) => ws.arena_ptr(&b),
                        (_, Some(target)) => target,
                        _ => {
                            let mut v = OutVec::new(param.ty, param.len, &kernel.name)
                                .map_err(|e| step_error(index, "allocating the outputs")(e))?;
                            let b = v.ptr(param.ty, param.len);
                            ws.fresh.push((v, s, param.len));
                            b
                        }
                    }
                }
                BufferRole::Scratch => {
                    let b = *scratch.next().ok_or_else(missing)?;
                    ws.arena_ptr(&b)
                }
            };
            ws.buffers.push(b);
        }
        Ok(())
    }

    /// The tensor in slot `s` in the layout `kernel` was compiled for it.
    fn kernel_input(
        &self,
        ws: &Workspace,
        index: usize,
        kernel: &Kernel,
        s: SlotId,
    ) -> Result<Tensor> {
        let slot = self.program.slot(s);
        let t = ws.slots[s.index()]
            .clone()
            .ok_or_else(|| KernelError::Backend {
                kernel: kernel.name.clone(),
                message: format!("slot {s} is empty when read"),
            })?;
        if t.with_layout(|l, _| *l == slot.layout) {
            return Ok(t);
        }
        if slot.layout == Layout::contiguous(&slot.meta.shape) {
            return packed(&t, index);
        }
        let l = t.layout();
        Err(KernelError::InputLayout {
            index: match slot.source {
                SlotSource::Input(n) => n,
                _ => s.index(),
            },
            expected: slot.layout.strides.clone(),
            offset: slot.layout.offset,
            got: l.strides,
            got_offset: l.offset,
        })
    }
}

/// The slots a step writes.
fn step_outputs(step: &Step) -> &[SlotId] {
    match step {
        Step::Kernel { outputs, .. } | Step::External { outputs, .. } => outputs,
    }
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

/// Zeroes the status buffer `b` of a kernel with gathers before it runs.
///
/// # Safety
/// `b` points to at least [`crate::gather::STATUS_LEN`] writable i64s.
pub unsafe fn clear_status(b: BufferPtr) {
    // SAFETY: forwarded from the caller.
    unsafe { std::ptr::write_bytes(b.ptr as *mut i64, 0, crate::gather::STATUS_LEN) };
}

/// The status buffer `b` of a kernel with gathers after it ran.
///
/// # Safety
/// `b` points to at least [`crate::gather::STATUS_LEN`] readable i64s.
pub unsafe fn read_status(b: BufferPtr) -> [i64; crate::gather::STATUS_LEN] {
    let mut out = [0; crate::gather::STATUS_LEN];
    for (i, o) in out.iter_mut().enumerate() {
        // SAFETY: forwarded from the caller.
        *o = unsafe { *(b.ptr as *const i64).add(i) };
    }
    out
}
