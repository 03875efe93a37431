//! `ParametrizationList`: the module at `parametrizations.<name>` holding the stored tensors
//! (`original`, or `original0`, `original1`, ...) and the chain of parametrizations
//! (`0`, `1`, ...) whose composition is the parametrized value.

use super::{Parametrization, cache};
use crate::containers::ModuleList;
use crate::repr::repr;
use crate::{Module, ModuleCore, NnError, Parameter, Result, Visitor};
use tessera_tensor::{Tensor, no_grad};

/// One parametrization as a child module, so that reprs and paths show it (`(0): _Orthogonal()`).
pub(crate) struct Step {
    core: ModuleCore,
    parametrization: Box<dyn Parametrization>,
}

impl Step {
    pub(crate) fn new(parametrization: Box<dyn Parametrization>) -> Step {
        Step {
            core: ModuleCore::default(),
            parametrization,
        }
    }
}

impl Module for Step {
    crate::module_core_methods!();
    fn visit_fields<'a>(&'a self, visitor: &mut dyn Visitor<'a>) {
        self.parametrization.visit_buffers(visitor);
    }
    fn type_name(&self) -> String {
        self.parametrization.name()
    }
    fn extra_repr(&self) -> String {
        self.parametrization.extra_repr()
    }
}

/// A stored tensor: a parameter when the parametrized tensor was one, else a buffer.
pub(crate) enum Original {
    Parameter(Parameter),
    Buffer(Tensor),
}

impl Original {
    pub(crate) fn tensor(&self) -> &Tensor {
        match self {
            Original::Parameter(p) => p.tensor(),
            Original::Buffer(b) => b,
        }
    }
}

/// PyTorch's `ParametrizationList`: the stored tensors and the parametrizations applied to
/// them, in order. The parametrized module's handle (its field) is rebound to the result.
pub struct ParametrizationList {
    core: ModuleCore,
    pub(crate) originals: Vec<Original>,
    pub(crate) steps: ModuleList<Step>,
    /// The module's handle (a field or a run-time registration) holding the value.
    pub(crate) target: Tensor,
}

impl ParametrizationList {
    pub(crate) fn new(originals: Vec<Original>, first: Step, target: Tensor) -> Self {
        let mut steps = ModuleList::new();
        steps.append(first);
        ParametrizationList {
            core: ModuleCore::default(),
            originals,
            steps,
            target,
        }
    }

    /// The stored tensors (`original`, or `original0`, `original1`, ...).
    pub fn originals(&self) -> Vec<Tensor> {
        self.originals.iter().map(|o| o.tensor().clone()).collect()
    }

    /// How many parametrizations are chained.
    pub fn len(&self) -> usize {
        self.steps.len()
    }

    pub fn is_empty(&self) -> bool {
        self.steps.is_empty()
    }

    /// The parametrized value computed from the stored tensors now (recorded by autograd in
    /// grad mode, so gradients reach the stored tensors).
    pub fn compute(&self) -> Result<Tensor> {
        let mut steps = self.steps.iter();
        let first = steps.next().ok_or_else(|| {
            NnError::Invalid("a ParametrizationList holds at least one parametrization".into())
        })?;
        let mut value = first.parametrization.forward_originals(&self.originals())?;
        for step in steps {
            value = step.parametrization.forward(&value)?;
        }
        Ok(value)
    }

    /// Rebinds the module's handle to the current value (the cached one inside
    /// [`cached`](super::cached)) and returns it.
    pub(crate) fn refresh(&self) -> Result<Tensor> {
        let id = self.target.id();
        let value = match cache::get(id) {
            Some(value) => value,
            None => {
                let value = self.compute()?;
                cache::put(id, &value);
                value
            }
        };
        self.target.rebind(&value);
        Ok(self.target.clone())
    }

    /// Stores `value` through the right inverses, last parametrization first (PyTorch's
    /// assignment to a parametrized attribute).
    pub(crate) fn assign(&self, value: &Tensor) -> Result<()> {
        let _guard = no_grad();
        let mut steps: Vec<&Step> = self.steps.iter().collect();
        let first = steps.remove(0);
        let mut value = value.detach();
        for step in steps.iter().rev() {
            value = step.parametrization.right_inverse(&value)?;
        }
        let stored = first.parametrization.right_inverse_originals(&value)?;
        if stored.len() != self.originals.len() {
            return Err(NnError::Invalid(format!(
                "{}.right_inverse returned {} tensors, expected {}",
                first.parametrization.name(),
                stored.len(),
                self.originals.len()
            )));
        }
        for (original, new) in self.originals.iter().zip(&stored) {
            let original = original.tensor();
            if new.dtype() != original.dtype() {
                return Err(NnError::Invalid(format!(
                    "the tensor returned by right_inverse has dtype {} while `original` has dtype {}",
                    new.dtype(),
                    original.dtype()
                )));
            }
        }
        for (original, new) in self.originals.iter().zip(stored) {
            let original = original.tensor();
            if new.shape() == original.shape() {
                original.copy_(&new)?;
            } else {
                original.set_data(&new.deep_clone()?);
            }
        }
        cache::forget(self.target.id());
        Ok(())
    }
}

impl Module for ParametrizationList {
    crate::module_core_methods!();
    fn visit_fields<'a>(&'a self, visitor: &mut dyn Visitor<'a>) {
        let single = self.originals.len() == 1;
        for (i, original) in self.originals.iter().enumerate() {
            let name = if single {
                "original".to_string()
            } else {
                format!("original{i}")
            };
            match original {
                Original::Parameter(p) => visitor.parameter(&name, Some(p)),
                Original::Buffer(b) => visitor.buffer(&name, Some(b), true),
            }
        }
        for (i, step) in self.steps.iter().enumerate() {
            visitor.child(&i.to_string(), step);
        }
    }
    fn type_name(&self) -> String {
        "ParametrizationList".into()
    }
    /// PyTorch's ParametrizationList is a ModuleList and prints as one (repeated entries
    /// folded), under its own name.
    fn custom_repr(&self) -> Option<String> {
        Some(repr(&self.steps).replacen("ModuleList", "ParametrizationList", 1))
    }
}
