//! Running a planned program into the caller's output tensors (PyTorch's `out=`): each output
//! is checked against the program's (shape, dtype, packed CPU storage, no sharing with an
//! input, an attribute or another output); a kernel that computes an output writes it straight
//! into the caller's storage, write-locked for the run, and other outputs (views, inputs
//! returned as they are, external results) are copied in after it.

use crate::run::{Run, materialize};
use crate::{
    BufferPtr, Environment, KernelError, KernelExecutor, MemoryPlan, Program, Result, ScalarType,
    SlotId, SlotSource, Workspace,
};
use tessera_tensor::{DType, Device, Tensor};

/// Runs `program` under `plan` in `workspace`, writing its outputs into `outputs`. When every
/// output is computed by a kernel, a warm run allocates nothing of its own.
pub fn run_planned_into(
    program: &Program,
    plan: &MemoryPlan,
    workspace: &mut Workspace,
    env: &dyn Environment,
    executor: &dyn KernelExecutor,
    inputs: &[Tensor],
    outputs: &[Tensor],
) -> Result<()> {
    check_outputs(plan, outputs)?;
    let run = Run {
        program,
        plan,
        env,
        executor,
    };
    let result = run.load(workspace, inputs).and_then(|()| {
        check_sharing(program, workspace, outputs)?;
        with_targets(&run, workspace, outputs, 0)?;
        let end = program.steps.len();
        for (k, out) in outputs.iter().enumerate() {
            if !plan.direct[k] {
                let value = materialize(&workspace.slots, &program.outputs[k], end)?;
                out.copy_(&value).map_err(|source| KernelError::Output {
                    index: k,
                    source: Box::new(source),
                })?;
            }
        }
        Ok(())
    });
    workspace.reset();
    result
}

/// Each output has its program output's shape and dtype, in packed CPU storage of its own.
fn check_outputs(plan: &MemoryPlan, outputs: &[Tensor]) -> Result<()> {
    if outputs.len() != plan.outputs.len() {
        return Err(KernelError::OutputCount {
            expected: plan.outputs.len(),
            got: outputs.len(),
        });
    }
    for (index, (t, meta)) in outputs.iter().zip(&plan.outputs).enumerate() {
        let (fits, packed) =
            t.with_layout(|l, d| (l.shape == meta.shape && d == meta.dtype, l.is_contiguous()));
        if !fits {
            return Err(KernelError::OutputMeta {
                index,
                shape: meta.shape.clone(),
                dtype: meta.dtype,
                got_shape: t.shape(),
                got_dtype: t.dtype(),
            });
        }
        if !packed || t.device() != Device::Cpu {
            return Err(KernelError::OutputLayout {
                index,
                shape: meta.shape.clone(),
                strides: t.strides(),
                device: t.device(),
            });
        }
        if let Some(other) = outputs[..index].iter().position(|o| o.shares_storage(t)) {
            return Err(KernelError::OutputShares {
                index,
                other: format!("output {other}"),
            });
        }
    }
    Ok(())
}

/// No output shares storage with a tensor the program reads (the run would read what it
/// writes, and lock one storage twice).
fn check_sharing(program: &Program, ws: &Workspace, outputs: &[Tensor]) -> Result<()> {
    for (index, out) in outputs.iter().enumerate() {
        for (slot, t) in program.slots.iter().zip(&ws.slots) {
            if t.as_ref().is_some_and(|t| t.shares_storage(out)) {
                let other = match &slot.source {
                    SlotSource::Input(n) => format!("input {n}"),
                    SlotSource::Attribute(name) => format!("attribute {name}"),
                    SlotSource::Step => format!("%{}", slot.name),
                    SlotSource::Derived { from, derivation } => {
                        format!("the {derivation} of {from}")
                    }
                };
                return Err(KernelError::OutputShares { index, other });
            }
        }
    }
    Ok(())
}

/// Write-locks the storage of each output from `outputs[next..]` that a kernel writes, points
/// its slot's target at it, and runs the steps with every lock held.
fn with_targets(run: &Run<'_>, ws: &mut Workspace, outputs: &[Tensor], next: usize) -> Result<()> {
    let lock = |k: usize| {
        outputs.get(k).map(|out| {
            let slot = std::slice::from_ref(&run.program.outputs[k].slot);
            run.plan.direct[k].then_some((slot, k, out))
        })
    };
    with_locked(run, ws, &lock, next)
}

/// What [`with_locked`] locks at each position: `None` past the end, `Some(None)` to skip it,
/// else the slots to point at the locked storage (the first a kernel writes, any others
/// holding the same tensor, which kernels then read through the same pointer, never through
/// a read lock that the write lock would block), the program output it is, and its tensor.
pub(crate) type LockAt<'a> = &'a dyn Fn(usize) -> Option<Option<(&'a [SlotId], usize, &'a Tensor)>>;

/// Write-locks the storage of each tensor `lock` gives from position `next` on, points the
/// targets of its slots at it, and runs the steps with every lock held. Allocates nothing.
pub(crate) fn with_locked(
    run: &Run<'_>,
    ws: &mut Workspace,
    lock: LockAt<'_>,
    next: usize,
) -> Result<()> {
    let Some(at) = lock(next) else {
        return run.steps(ws, None);
    };
    let Some((slots, k, out)) = at else {
        return with_locked(run, ws, lock, next + 1);
    };
    let numel = run.plan.outputs[k].numel();
    let locked = |source| KernelError::Output {
        index: k,
        source: Box::new(source),
    };
    macro_rules! write {
        ($t:ty, $ty:expr) => {
            out.with_cpu_slice_mut(|s: &mut [$t], layout| {
                if layout.offset + numel > s.len() {
                    return Err(KernelError::Backend {
                        kernel: "(runner)".into(),
                        message: format!("output {k}'s storage is shorter than its view"),
                    });
                }
                let target = BufferPtr {
                    ptr: s[layout.offset..].as_mut_ptr() as *mut u8,
                    len: numel,
                    ty: $ty,
                };
                for slot in slots {
                    ws.targets[slot.index()] = Some(target);
                }
                let r = with_locked(run, ws, lock, next + 1);
                for slot in slots {
                    ws.targets[slot.index()] = None;
                }
                r
            })
            .map_err(locked)?
        };
    }
    match run.plan.outputs[k].dtype {
        DType::F32 => write!(f32, ScalarType::F32),
        DType::F64 => write!(f64, ScalarType::F64),
        DType::F16 => write!(half::f16, ScalarType::F16),
        DType::BF16 => write!(half::bf16, ScalarType::BF16),
        // Kernels store a bool as the byte 0 or 1, a valid `bool`.
        DType::Bool => write!(bool, ScalarType::Bool),
        DType::I64 => write!(i64, ScalarType::I64),
        DType::U8 => write!(u8, ScalarType::U8),
        DType::I8 => write!(i8, ScalarType::I8),
        DType::I32 => write!(i32, ScalarType::I32),
    }
}
