//! `GraphModule`: a traced graph together with the module it was traced from, itself a
//! module. Its parameters, buffers and state-dict keys are the traced module's, its hooks and
//! train/eval work like any module's, and calling it runs the graph with the interpreter, so
//! it can be trained like the original.

use crate::interpreter::{GraphInterpreter, run};
use crate::trace::TracedGraph;
use crate::{FxError, Graph};
use indexmap::IndexMap;
use std::any::Any;
use std::sync::Arc;
use tessera_nn::{Forward, Module, ModuleCore, NnError, Visitor};
use tessera_tensor::Tensor;

/// A graph and the module whose state and leaf submodules it uses.
pub struct GraphModule {
    core: ModuleCore,
    root: Arc<dyn Module>,
    pub graph: Graph,
    /// Tensors made during tracing that are not state of the root (`_tensor_constant0`).
    pub constants: IndexMap<String, Tensor>,
}

impl GraphModule {
    /// Wraps `traced`, which was traced from `root`.
    pub fn new(root: Arc<dyn Module>, traced: TracedGraph) -> Self {
        let constants = traced
            .attributes
            .into_iter()
            .filter(|(name, _)| name.starts_with("_tensor_constant"))
            .collect();
        GraphModule {
            core: ModuleCore::default(),
            root,
            graph: traced.graph,
            constants,
        }
    }

    /// The module the graph was traced from.
    pub fn root(&self) -> &dyn Module {
        self.root.as_module()
    }

    /// Saves the graph as a deployment artifact (see [`crate::artifact`]): module calls are
    /// inlined into ops first, so the saved graph runs without the model's Rust type.
    pub fn save(&self, dir: impl AsRef<std::path::Path>) -> crate::Result<()> {
        let root = self.root.as_module();
        let mut attributes: IndexMap<String, Tensor> = IndexMap::new();
        for (name, p) in tessera_nn::ModuleExt::named_parameters(root) {
            attributes.insert(name, p.detach());
        }
        for (name, b) in tessera_nn::ModuleExt::named_buffers(root) {
            attributes.insert(name, b.detach());
        }
        attributes.extend(self.constants.iter().map(|(k, v)| (k.clone(), v.clone())));
        let mut traced = TracedGraph {
            graph: self.graph.clone(),
            attributes,
        };
        crate::trace::inline(&mut traced, root, |_| true)?;
        crate::artifact::save(&traced, dir)
    }

    fn run(&self, inputs: &[Tensor]) -> tessera_nn::Result<Vec<Tensor>> {
        let mut interpreter = GraphInterpreter {
            root: self.root.as_module(),
            constants: Some(&self.constants),
        };
        run(&mut interpreter, &self.graph, inputs).map_err(to_nn_error)
    }
}

fn to_nn_error(e: FxError) -> NnError {
    NnError::Invalid(e.to_string())
}

impl Module for GraphModule {
    fn core(&self) -> &ModuleCore {
        &self.core
    }

    fn core_mut(&mut self) -> Option<&mut ModuleCore> {
        Some(&mut self.core)
    }

    /// The traced module's state, under the same names (so state dicts are interchangeable).
    fn visit_fields<'a>(&'a self, visitor: &mut dyn Visitor<'a>) {
        self.root.visit_fields(visitor);
        self.root.core().visit_dynamic(visitor);
    }

    fn type_name(&self) -> String {
        "GraphModule".into()
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn as_module(&self) -> &dyn Module {
        self
    }

    fn as_layer(&self) -> Option<&dyn tessera_nn::Layer> {
        (self.graph.placeholders().len() == 1).then_some(self as &dyn tessera_nn::Layer)
    }
}

/// Graphs with one input and one output are layers.
impl Forward for GraphModule {
    type Output = Tensor;

    fn forward(&self, input: Tensor) -> tessera_nn::Result<Tensor> {
        let mut outputs = self.run(std::slice::from_ref(&input))?;
        match outputs.len() {
            1 => Ok(outputs.remove(0)),
            n => Err(NnError::Invalid(format!(
                "the graph returns {n} values; call it with a Vec of inputs"
            ))),
        }
    }
}

/// Any number of inputs and outputs, in placeholder and output order.
impl Forward<Vec<Tensor>> for GraphModule {
    type Output = Vec<Tensor>;

    fn forward(&self, inputs: Vec<Tensor>) -> tessera_nn::Result<Vec<Tensor>> {
        self.run(&inputs)
    }
}
