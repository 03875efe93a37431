//! Calling a module: `call` (PyTorch's `__call__`) runs the global and module forward
//! pre-hooks, `forward`, the forward hooks, wires full backward hooks into autograd, and
//! names the module path in errors from inside.

use crate::backward_hooks::attach_backward_hooks;
use crate::walk::{module_id, own};
use crate::{Module, NnError, Result};
use std::cell::RefCell;
use tessera_tensor::Tensor;

/// A module's computation for inputs of type `I` (a tensor, a tuple of tensors and plain
/// values, a `Vec<Tensor>`). Call it through [`Call::call`] so that hooks run.
pub trait Forward<I = Tensor>: Module {
    type Output;
    fn forward(&self, input: I) -> Result<Self::Output>;
}

/// Values that pass through hooks: the tensors they hold can be read and replaced.
pub trait Args: Sized {
    fn tensors(&self) -> Vec<Tensor>;
    fn with_tensors(self, tensors: Vec<Tensor>) -> Result<Self>;
}

fn count_error(expected: usize, got: usize) -> NnError {
    NnError::Invalid(format!(
        "a hook returned {got} tensors where the module takes {expected}"
    ))
}

impl Args for Tensor {
    fn tensors(&self) -> Vec<Tensor> {
        vec![self.clone()]
    }
    fn with_tensors(self, tensors: Vec<Tensor>) -> Result<Self> {
        let n = tensors.len();
        <[Tensor; 1]>::try_from(tensors)
            .map(|[t]| t)
            .map_err(|_| count_error(1, n))
    }
}

impl Args for Vec<Tensor> {
    fn tensors(&self) -> Vec<Tensor> {
        self.clone()
    }
    fn with_tensors(self, tensors: Vec<Tensor>) -> Result<Self> {
        Ok(tensors)
    }
}

impl Args for (Tensor, Tensor) {
    fn tensors(&self) -> Vec<Tensor> {
        vec![self.0.clone(), self.1.clone()]
    }
    fn with_tensors(self, tensors: Vec<Tensor>) -> Result<Self> {
        let n = tensors.len();
        <[Tensor; 2]>::try_from(tensors)
            .map(|[a, b]| (a, b))
            .map_err(|_| count_error(2, n))
    }
}

impl Args for (Tensor, Tensor, Tensor) {
    fn tensors(&self) -> Vec<Tensor> {
        vec![self.0.clone(), self.1.clone(), self.2.clone()]
    }
    fn with_tensors(self, tensors: Vec<Tensor>) -> Result<Self> {
        let n = tensors.len();
        <[Tensor; 3]>::try_from(tensors)
            .map(|[a, b, c]| (a, b, c))
            .map_err(|_| count_error(3, n))
    }
}

/// A non-tensor argument (fixed for hooks), such as the note's activation name.
pub trait Plain {}
impl Plain for &str {}
impl Plain for String {}
impl Plain for bool {}
impl Plain for usize {}
impl Plain for i64 {}
impl Plain for f64 {}

impl<P: Plain> Args for (Tensor, P) {
    fn tensors(&self) -> Vec<Tensor> {
        vec![self.0.clone()]
    }
    fn with_tensors(self, tensors: Vec<Tensor>) -> Result<Self> {
        let n = tensors.len();
        <[Tensor; 1]>::try_from(tensors)
            .map(|[t]| (t, self.1))
            .map_err(|_| count_error(1, n))
    }
}

thread_local! {
    /// The modules being called on this thread and their qualified paths. The pointers are
    /// only read while the `call` that pushed them is still running.
    static CALL_STACK: RefCell<Vec<(*const dyn Module, String)>> = const { RefCell::new(Vec::new()) };
}

/// Pops the call stack when a call ends, also on error.
struct CallFrame;

impl Drop for CallFrame {
    fn drop(&mut self) {
        CALL_STACK.with(|s| s.borrow_mut().pop());
    }
}

/// Pushes `module` with its path: its field name under the module calling it (`""` at the
/// top level; its type name when called from a module it is not registered in).
fn enter(module: &dyn Module) -> (CallFrame, String) {
    let id = module_id(module);
    let path = CALL_STACK.with(|s| {
        let stack = s.borrow();
        let Some((parent, parent_path)) = stack.last() else {
            return String::new();
        };
        // SAFETY: the parent's `call` is below this one on the same thread, so the module
        // it points to is still borrowed.
        let parent = unsafe { &**parent };
        // A direct child first (cheap); else any descendant (a module reached through a
        // container, `self.activations["relu"]`).
        let name = own(parent)
            .children
            .into_iter()
            .find(|(_, m)| module_id(*m) == id)
            .map(|(n, _)| n)
            .or_else(|| {
                crate::walk::named_modules(parent, "", true)
                    .into_iter()
                    .find(|(_, m)| module_id(*m) == id)
                    .map(|(n, _)| n)
            });
        match name {
            None => module.type_name(),
            Some(n) if parent_path.is_empty() => n,
            Some(n) => format!("{parent_path}.{n}"),
        }
    });
    CALL_STACK.with(|s| {
        s.borrow_mut()
            .push((module as *const dyn Module, path.clone()))
    });
    (CallFrame, path)
}

/// Runs `f` as if inside a call of `module` at the top level, so that the submodules `f`
/// calls get their paths (tracing a closure over a module does this).
pub(crate) fn as_caller<R>(module: &dyn Module, f: impl FnOnce() -> R) -> R {
    CALL_STACK.with(|s| {
        s.borrow_mut()
            .push((module as *const dyn Module, String::new()))
    });
    let _frame = CallFrame;
    f()
}

/// Runs `forward` the way PyTorch's `__call__` does.
pub trait Call<I>: Forward<I> {
    fn call(&self, input: I) -> Result<Self::Output>;
}

impl<I: Args, M: Forward<I> + ?Sized> Call<I> for M
where
    M::Output: Args,
{
    fn call(&self, input: I) -> Result<Self::Output> {
        let module = self.as_module();
        let (_frame, path) = enter(module);
        let context = |e: NnError| match e {
            NnError::Op(source) => {
                let where_ = if path.is_empty() {
                    module.type_name()
                } else {
                    format!("{path} ({})", module.type_name())
                };
                NnError::Tensor {
                    context: where_,
                    source,
                }
            }
            other => other,
        };

        let global = crate::hooks::global();
        let (global_table, local_table) = (global.lock(), module.core().hooks.lock());
        let pre: Vec<_> = global_table
            .forward_pre
            .iter()
            .chain(&local_table.forward_pre)
            .map(|(_, h)| h.clone())
            .collect();
        let post: Vec<_> = global_table
            .forward
            .iter()
            .chain(&local_table.forward)
            .map(|(_, h)| h.clone())
            .collect();
        let backward_hooks = global_table.has_backward_hooks() || local_table.has_backward_hooks();
        let full_backward: Vec<_> = global_table
            .full_backward
            .iter()
            .chain(&local_table.full_backward)
            .map(|(_, h)| h.clone())
            .collect();
        let backward_pre: Vec<_> = global_table
            .backward_pre
            .iter()
            .chain(&local_table.backward_pre)
            .map(|(_, h)| h.clone())
            .collect();
        drop((global_table, local_table));

        let mut input = input;
        for hook in &pre {
            let tensors = input.tensors();
            if let Some(replaced) = hook(module, &tensors)? {
                input = input.with_tensors(replaced)?;
            }
        }
        let wiring = if backward_hooks {
            Some(attach_backward_hooks(full_backward, backward_pre))
        } else {
            None
        };
        if let Some(w) = &wiring {
            let tensors = input.tensors();
            input = input.with_tensors(w.wrap_inputs(&tensors)?)?;
        }
        let inputs_seen = input.tensors();
        let mut output = match crate::module_trace::leaf_recorder(module, &path, &inputs_seen) {
            // A traced leaf: its ops run for their shapes only and the call is one record.
            Some(recorder) => {
                let output = crate::module_trace::without_module_recorder(|| {
                    tessera_tensor::trace::without_recorder(|| self.forward(input))
                })
                .map_err(context)?;
                recorder.record_call(module, &path, &inputs_seen, &output.tensors())?;
                output
            }
            None => self.forward(input).map_err(context)?,
        };
        for hook in &post {
            let tensors = output.tensors();
            if let Some(replaced) = hook(module, &inputs_seen, &tensors)? {
                output = output.with_tensors(replaced)?;
            }
        }
        if let Some(w) = &wiring {
            let tensors = output.tensors();
            output = output.with_tensors(w.wrap_outputs(&tensors)?)?;
        }
        Ok(output)
    }
}
