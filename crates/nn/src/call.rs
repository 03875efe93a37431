//! Calling a module: `call` (PyTorch's `__call__`) runs the global and module forward
//! pre-hooks, `forward`, the forward hooks, wires full backward hooks into autograd, and
//! names the module path in errors from inside.

use crate::backward_hooks::attach_backward_hooks;
use crate::call_stack::enter;
use crate::{Module, NnError, Result};
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

/// A recurrent call or result with a nested pair: an LSTM's `(input, (h0, c0))` and
/// `(output, (h_n, c_n))`, an LSTM cell's `(input, (hx, cx))`.
impl Args for (Tensor, (Tensor, Tensor)) {
    fn tensors(&self) -> Vec<Tensor> {
        vec![self.0.clone(), self.1.0.clone(), self.1.1.clone()]
    }
    fn with_tensors(self, tensors: Vec<Tensor>) -> Result<Self> {
        let n = tensors.len();
        <[Tensor; 3]>::try_from(tensors)
            .map(|[a, b, c]| (a, (b, c)))
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
        let pre = global_then_local(&global_table.forward_pre, &local_table.forward_pre);
        let post = global_then_local(&global_table.forward, &local_table.forward);
        let backward_hooks = global_table.has_backward_hooks() || local_table.has_backward_hooks();
        let full_backward =
            global_then_local(&global_table.full_backward, &local_table.full_backward);
        let backward_pre = global_then_local(&global_table.backward_pre, &local_table.backward_pre);
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

/// The hooks of one kind, global ones first (as PyTorch runs them), without their ids.
fn global_then_local<H: Clone>(global: &[(u64, H)], local: &[(u64, H)]) -> Vec<H> {
    global.iter().chain(local).map(|(_, h)| h.clone()).collect()
}
