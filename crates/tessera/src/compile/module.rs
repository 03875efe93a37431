//! A compiled module is a module: its state is the source module's (same `state_dict` keys,
//! loading a state dict into it updates what it runs), and a one-input graph is a layer whose
//! `forward` runs the compiled program.

use super::CompiledModule;
use crate::nn::{Forward, Layer, Module, NnError, Visitor};
use tessera_tensor::Tensor;

impl Module for CompiledModule {
    crate::nn::module_core_methods!();

    /// The source module's parameters, buffers and children under their own names.
    fn visit_fields<'a>(&'a self, visitor: &mut dyn Visitor<'a>) {
        self.source.visit_fields(visitor);
    }

    fn type_name(&self) -> String {
        "CompiledModule".into()
    }

    fn child_module(&self, name: &str) -> Option<&dyn Module> {
        self.source.child_module(name)
    }

    fn as_layer(&self) -> Option<&dyn Layer> {
        (self.source.graph.placeholders().len() == 1).then_some(self as &dyn Layer)
    }
}

/// A compiled graph with one input and one output is a layer.
impl Forward for CompiledModule {
    type Output = Tensor;

    fn forward(&self, input: Tensor) -> crate::nn::Result<Tensor> {
        let mut outputs = self
            .run(std::slice::from_ref(&input))
            .map_err(|e| NnError::Graph(Box::new(e)))?;
        match outputs.len() {
            1 => Ok(outputs.remove(0)),
            n => Err(NnError::Invalid(format!(
                "the compiled graph returns {n} values; call CompiledModule::run"
            ))),
        }
    }
}
