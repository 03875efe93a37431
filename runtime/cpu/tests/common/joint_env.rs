//! The environment a lowered joint graph runs in: a module's parameters and buffers, then the
//! joint graph's own constants, by `get_attr` target.

use tessera_fx::autodiff::JointGraph;
use tessera_kernel::{BoxError, Environment};
use tessera_nn::{Module, ModuleExt};
use tessera_tensor::Tensor;

/// A module's parameters and buffers, then the joint graph's constants, by get_attr target.
pub struct Attributes<'a> {
    pub root: &'a dyn Module,
    pub joint: &'a JointGraph,
}

impl Environment for Attributes<'_> {
    fn attribute(&self, target: &str) -> Result<Tensor, BoxError> {
        if let Ok(p) = self.root.get_parameter(target) {
            return Ok(p.tensor().clone());
        }
        if let Ok(b) = self.root.get_buffer(target) {
            return Ok(b);
        }
        self.joint
            .traced
            .attributes
            .get(target)
            .cloned()
            .ok_or_else(|| format!("no attribute {target}").into())
    }

    fn call_module(&self, target: &str, _args: Vec<Tensor>) -> Result<Vec<Tensor>, BoxError> {
        Err(format!("module {target} was not inlined").into())
    }
}
