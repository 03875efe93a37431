//! Full backward hooks, wired into autograd as PyTorch's `BackwardHook` does: identity ops
//! on the module's inputs and outputs; the output one captures (and lets pre-hooks replace)
//! the output gradients, the input one calls the hooks with both and may replace the input
//! gradients. Parameters are not inputs, so their gradients are never touched.

use crate::hooks::{BackwardPreHook, FullBackwardHook};
use crate::{NnError, Result};
use std::sync::{Arc, Mutex};
use tessera_tensor::op::{CustomFunction, CustomOp};
use tessera_tensor::{Op, Tensor, TensorMeta, is_grad_enabled};

#[derive(Default)]
struct Captured {
    grad_outputs: Vec<Option<Tensor>>,
    inputs_wrapped: bool,
}

/// The hooks of one module call and what its backward has captured so far.
pub(crate) struct BackwardWiring {
    captured: Arc<Mutex<Captured>>,
    full: Arc<Vec<FullBackwardHook>>,
    pre: Arc<Vec<BackwardPreHook>>,
}

pub(crate) fn attach_backward_hooks(
    full: Vec<FullBackwardHook>,
    pre: Vec<BackwardPreHook>,
) -> BackwardWiring {
    BackwardWiring {
        captured: Arc::default(),
        full: Arc::new(full),
        pre: Arc::new(pre),
    }
}

fn run_full_hooks(
    full: &[FullBackwardHook],
    mut grad_inputs: Vec<Option<Tensor>>,
    grad_outputs: &[Option<Tensor>],
) -> Result<Vec<Option<Tensor>>> {
    for hook in full {
        if let Some(replaced) = hook(&grad_inputs, grad_outputs)? {
            if replaced.len() != grad_inputs.len() {
                return Err(NnError::Invalid(format!(
                    "a full backward hook returned {} gradients for {} inputs",
                    replaced.len(),
                    grad_inputs.len()
                )));
            }
            grad_inputs = replaced;
        }
    }
    Ok(grad_inputs)
}

/// Replaces the tensors at `positions` by the outputs of `function` applied to them.
fn wrap(tensors: &[Tensor], function: impl CustomFunction + 'static) -> Result<Vec<Tensor>> {
    let positions: Vec<usize> = (0..tensors.len())
        .filter(|&i| tensors[i].requires_grad())
        .collect();
    let chosen: Vec<&Tensor> = positions.iter().map(|&i| &tensors[i]).collect();
    let outputs = Op::Custom(CustomOp::new(function)).apply(&chosen)?;
    let mut result = tensors.to_vec();
    for (i, out) in positions.into_iter().zip(outputs) {
        result[i] = out;
    }
    Ok(result)
}

impl BackwardWiring {
    /// Routes the inputs that require grad through the identity whose backward calls the hooks.
    pub(crate) fn wrap_inputs(&self, tensors: &[Tensor]) -> Result<Vec<Tensor>> {
        if !is_grad_enabled() || !tensors.iter().any(Tensor::requires_grad) {
            return Ok(tensors.to_vec());
        }
        self.captured
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .inputs_wrapped = true;
        wrap(
            tensors,
            InputHook {
                captured: self.captured.clone(),
                full: self.full.clone(),
            },
        )
    }

    /// Routes the outputs that require grad through the identity that captures their gradients.
    pub(crate) fn wrap_outputs(&self, tensors: &[Tensor]) -> Result<Vec<Tensor>> {
        if !is_grad_enabled() || !tensors.iter().any(Tensor::requires_grad) {
            return Ok(tensors.to_vec());
        }
        wrap(
            tensors,
            OutputHook {
                captured: self.captured.clone(),
                full: self.full.clone(),
                pre: self.pre.clone(),
            },
        )
    }
}

fn identity_meta(inputs: &[TensorMeta]) -> tessera_tensor::Result<Vec<TensorMeta>> {
    Ok(inputs.to_vec())
}

fn identity(inputs: &[&Tensor]) -> tessera_tensor::Result<Vec<Tensor>> {
    Ok(inputs.iter().map(|t| t.detach()).collect())
}

/// A hook failing inside backward surfaces as an autograd error carrying its message.
fn to_tensor_error(e: NnError) -> tessera_tensor::TensorError {
    match e {
        NnError::Op(e) | NnError::Tensor { source: e, .. } => e,
        other => tessera_tensor::TensorError::Autograd(other.to_string()),
    }
}

struct InputHook {
    captured: Arc<Mutex<Captured>>,
    full: Arc<Vec<FullBackwardHook>>,
}

impl CustomFunction for InputHook {
    fn name(&self) -> String {
        "backward_hook_inputs".into()
    }
    fn meta(&self, inputs: &[TensorMeta]) -> tessera_tensor::Result<Vec<TensorMeta>> {
        identity_meta(inputs)
    }
    fn forward(&self, inputs: &[&Tensor]) -> tessera_tensor::Result<Vec<Tensor>> {
        identity(inputs)
    }
    fn backward(
        &self,
        _inputs: &[Tensor],
        _outputs: &[Tensor],
        grads: &[Option<Tensor>],
    ) -> tessera_tensor::Result<Vec<Option<Tensor>>> {
        let grad_outputs = std::mem::take(
            &mut self
                .captured
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .grad_outputs,
        );
        run_full_hooks(&self.full, grads.to_vec(), &grad_outputs).map_err(to_tensor_error)
    }
}

struct OutputHook {
    captured: Arc<Mutex<Captured>>,
    full: Arc<Vec<FullBackwardHook>>,
    pre: Arc<Vec<BackwardPreHook>>,
}

impl CustomFunction for OutputHook {
    fn name(&self) -> String {
        "backward_hook_outputs".into()
    }
    fn meta(&self, inputs: &[TensorMeta]) -> tessera_tensor::Result<Vec<TensorMeta>> {
        identity_meta(inputs)
    }
    fn forward(&self, inputs: &[&Tensor]) -> tessera_tensor::Result<Vec<Tensor>> {
        identity(inputs)
    }
    fn backward(
        &self,
        _inputs: &[Tensor],
        _outputs: &[Tensor],
        grads: &[Option<Tensor>],
    ) -> tessera_tensor::Result<Vec<Option<Tensor>>> {
        let mut grads = grads.to_vec();
        for hook in self.pre.iter() {
            if let Some(replaced) = hook(&grads).map_err(to_tensor_error)? {
                grads = replaced;
            }
        }
        let mut captured = self.captured.lock().unwrap_or_else(|e| e.into_inner());
        if captured.inputs_wrapped {
            captured.grad_outputs = grads.clone();
        } else {
            // No input needs a gradient: PyTorch calls the hooks now, with no input gradients.
            drop(captured);
            run_full_hooks(&self.full, Vec::new(), &grads).map_err(to_tensor_error)?;
        }
        Ok(grads)
    }
}
