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
        wrap(tensors, self.identity(Side::Inputs))
    }

    /// Routes the outputs that require grad through the identity that captures their gradients.
    pub(crate) fn wrap_outputs(&self, tensors: &[Tensor]) -> Result<Vec<Tensor>> {
        if !is_grad_enabled() || !tensors.iter().any(Tensor::requires_grad) {
            return Ok(tensors.to_vec());
        }
        wrap(tensors, self.identity(Side::Outputs))
    }

    fn identity(&self, side: Side) -> HookIdentity {
        HookIdentity {
            side,
            captured: self.captured.clone(),
            full: self.full.clone(),
            pre: self.pre.clone(),
        }
    }
}

/// A hook failing inside backward surfaces as an autograd error carrying its message.
fn to_tensor_error(e: NnError) -> tessera_tensor::TensorError {
    match e {
        NnError::Op(e) | NnError::Tensor { source: e, .. } => e,
        other => tessera_tensor::TensorError::Autograd(other.to_string()),
    }
}

/// Which side of the module call an identity hook sits on.
#[derive(Clone, Copy)]
enum Side {
    /// Calls the full hooks with the input gradients and the captured output gradients.
    Inputs,
    /// Runs the pre-hooks on the output gradients and captures them for the input side.
    Outputs,
}

/// The identity op whose backward runs one side's hooks.
struct HookIdentity {
    side: Side,
    captured: Arc<Mutex<Captured>>,
    full: Arc<Vec<FullBackwardHook>>,
    pre: Arc<Vec<BackwardPreHook>>,
}

impl HookIdentity {
    fn inputs_backward(&self, grads: &[Option<Tensor>]) -> Result<Vec<Option<Tensor>>> {
        let grad_outputs = std::mem::take(&mut self.captured().grad_outputs);
        run_full_hooks(&self.full, grads.to_vec(), &grad_outputs)
    }

    fn outputs_backward(&self, grads: &[Option<Tensor>]) -> Result<Vec<Option<Tensor>>> {
        let mut grads = grads.to_vec();
        for hook in self.pre.iter() {
            if let Some(replaced) = hook(&grads)? {
                grads = replaced;
            }
        }
        let mut captured = self.captured();
        if captured.inputs_wrapped {
            captured.grad_outputs = grads.clone();
        } else {
            // No input needs a gradient: PyTorch calls the hooks now, with no input gradients.
            drop(captured);
            run_full_hooks(&self.full, Vec::new(), &grads)?;
        }
        Ok(grads)
    }

    fn captured(&self) -> std::sync::MutexGuard<'_, Captured> {
        self.captured.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl CustomFunction for HookIdentity {
    fn name(&self) -> String {
        match self.side {
            Side::Inputs => "backward_hook_inputs".into(),
            Side::Outputs => "backward_hook_outputs".into(),
        }
    }
    fn meta(&self, inputs: &[TensorMeta]) -> tessera_tensor::Result<Vec<TensorMeta>> {
        Ok(inputs.to_vec())
    }
    fn forward(&self, inputs: &[&Tensor]) -> tessera_tensor::Result<Vec<Tensor>> {
        Ok(inputs.iter().map(|t| t.detach()).collect())
    }
    fn backward(
        &self,
        _inputs: &[Tensor],
        _outputs: &[Tensor],
        grads: &[Option<Tensor>],
    ) -> tessera_tensor::Result<Vec<Option<Tensor>>> {
        match self.side {
            Side::Inputs => self.inputs_backward(grads),
            Side::Outputs => self.outputs_backward(grads),
        }
        .map_err(to_tensor_error)
    }
}
