//! `GraphModule`: a traced graph together with the module it was traced from, itself a
//! module. Its parameters, buffers and state-dict keys are the traced module's (plus those of
//! the modules passes added to it), its hooks and train/eval work like any module's, and
//! calling it runs the graph with the interpreter, so it can be trained like the original.
//! The graph's buffer mutations (a training batch norm's running statistics) are written
//! into the module's buffers after each call, as eager execution updates them.
//!
//! The traced module is shared, never changed: a pass that needs a different module (a conv
//! with batch norm folded in, a pruned or quantized layer) adds it to the graph module's own
//! [`GraphModule::owned_modules`] under a fresh name and points the `call_module` node at it.

use crate::interpreter::{GraphInterpreter, run};
use crate::trace::TracedGraph;
use crate::{FxError, Graph};
use indexmap::IndexMap;
use std::collections::HashSet;
use std::sync::{Arc, OnceLock};
use tessera_nn::{Forward, Module, ModuleCore, NnError, Visitor};
use tessera_tensor::Tensor;

/// A graph and the module whose state and leaf submodules it uses.
pub struct GraphModule {
    core: ModuleCore,
    root: Arc<dyn Module>,
    pub graph: Graph,
    /// Tensors made during tracing that are not state of the root (`_tensor_constant0`).
    pub constants: IndexMap<String, Tensor>,
    /// Modules the graph module owns (added by passes), children next to the root's; shared
    /// with the graph module's [`GraphModule::share`]d copies.
    owned: IndexMap<String, Arc<dyn Module>>,
    /// Owned module name -> the path of the traced module it stands in for (a folded conv for
    /// `conv1`), where torch.fx's layout ([`GraphModule::fx_state_dict`]) files it.
    pub(crate) replaces: IndexMap<String, String>,
    /// The names of the root's own parameters, buffers and children (the shared root cannot
    /// change), collected once for [`GraphModule::fresh_name`].
    root_names: OnceLock<HashSet<String>>,
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
            owned: IndexMap::new(),
            replaces: IndexMap::new(),
            root_names: OnceLock::new(),
        }
    }

    /// A hand-built graph as a module whose root holds no state (PyTorch's
    /// `GraphModule(nn.Module(), graph)`): its `get_attr` nodes can read only constants and
    /// modules added with [`GraphModule::add_owned_module`].
    pub fn from_graph(graph: Graph) -> Self {
        let root: Arc<dyn Module> = Arc::new(tessera_nn::layers::Identity::new());
        GraphModule::new(root, TracedGraph::from(graph))
    }

    /// Adds `module` as an owned child called `name`, which `call_module` nodes can target.
    /// The name must be a single, unused attribute name (no `.`).
    pub fn add_owned_module(&mut self, name: &str, module: Box<dyn Module>) -> crate::Result<()> {
        if name.is_empty() || name.contains('.') || self.name_is_taken(name) {
            return Err(FxError::ModuleName { name: name.into() });
        }
        self.owned.insert(name.into(), Arc::from(module));
        Ok(())
    }

    /// [`GraphModule::add_owned_module`] for a module that stands in for the traced module at
    /// `traced_path` (the conv `conv1` with a batch norm folded in), as torch.fx's `fuse`
    /// replaces a module in place: [`GraphModule::fx_state_dict`] files it under
    /// `traced_path` once no node calls the traced module any more. The ordinary state dict
    /// keeps both under their own names. `traced_path` may name an owned module that itself
    /// replaces a traced one (a quantized copy of a folded conv): the new module then stands
    /// in for that traced module.
    pub fn add_owned_module_replacing(
        &mut self,
        name: &str,
        module: Box<dyn Module>,
        traced_path: &str,
    ) -> crate::Result<()> {
        self.add_owned_module(name, module)?;
        let traced = self.replaces.get(traced_path).cloned();
        let traced = traced.unwrap_or_else(|| traced_path.into());
        self.replaces.insert(name.into(), traced);
        Ok(())
    }

    /// Removes the owned module `name` (a pass that replaces it again), if there is one.
    pub fn remove_owned_module(&mut self, name: &str) -> Option<Arc<dyn Module>> {
        self.replaces.shift_remove(name);
        self.owned.shift_remove(name)
    }

    /// The traced module path the owned module `name` stands in for, if it was added with
    /// [`GraphModule::add_owned_module_replacing`].
    pub fn replaced_path(&self, name: &str) -> Option<&str> {
        self.replaces.get(name).map(String::as_str)
    }

    /// The modules the graph module owns, in the order they were added.
    pub fn owned_modules(&self) -> &IndexMap<String, Arc<dyn Module>> {
        &self.owned
    }

    /// A graph module with a copy of this one's graph and constants that shares its modules
    /// (the traced root and the owned modules), as Python's `copy.copy` of a `GraphModule`:
    /// parameters updated through either are seen by both. Hooks are not copied.
    pub fn share(&self) -> GraphModule {
        GraphModule {
            core: ModuleCore::default(),
            root: self.root.clone(),
            graph: self.graph.clone(),
            constants: self.constants.clone(),
            owned: self.owned.clone(),
            replaces: self.replaces.clone(),
            root_names: OnceLock::new(),
        }
    }

    /// `base`, or `base_1`, `base_2`, ... : the first name not used by an owned module, a
    /// constant or any attribute or child of the root.
    pub fn fresh_name(&self, base: &str) -> String {
        let base = base.replace('.', "_");
        std::iter::once(base.clone())
            .chain((1..).map(|i| format!("{base}_{i}")))
            .find(|n| !self.name_is_taken(n))
            .unwrap_or(base)
    }

    fn name_is_taken(&self, name: &str) -> bool {
        self.owned.contains_key(name)
            || self.constants.contains_key(name)
            || self
                .root_names
                .get_or_init(|| attribute_names(self.root.as_module()))
                .contains(name)
    }

    /// The module the graph was traced from.
    pub fn root(&self) -> &dyn Module {
        self.root.as_module()
    }

    /// The shared handle of the module the graph was traced from.
    pub(crate) fn root_handle(&self) -> &Arc<dyn Module> {
        &self.root
    }

    /// Saves the graph as a deployment artifact (see [`crate::artifact`]): module calls are
    /// inlined into ops first, so the saved graph runs without the model's Rust type.
    pub fn save(&self, dir: impl AsRef<std::path::Path>) -> crate::Result<()> {
        let root = self.as_module();
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
            root: self.as_module(),
            constants: Some(&self.constants),
        };
        let outputs = run(&mut interpreter, &self.graph, inputs).map_err(to_nn_error)?;
        crate::write_back(&self.graph, self.as_module(), outputs).map_err(to_nn_error)
    }
}

/// The names of `module`'s own parameters, buffers and children.
fn attribute_names(module: &dyn Module) -> HashSet<String> {
    struct Names(HashSet<String>);
    impl<'a> Visitor<'a> for Names {
        fn parameter(&mut self, name: &str, _: Option<&'a tessera_nn::Parameter>) {
            self.0.insert(name.into());
        }
        fn buffer(&mut self, name: &str, _: Option<&'a Tensor>, _: bool) {
            self.0.insert(name.into());
        }
        fn child(&mut self, name: &str, _: &'a dyn Module) {
            self.0.insert(name.into());
        }
    }
    let mut names = Names(HashSet::new());
    module.visit_fields(&mut names);
    module.core().visit_dynamic(&mut names);
    names.0
}

fn to_nn_error(e: FxError) -> NnError {
    NnError::Graph(Box::new(e))
}

impl Module for GraphModule {
    tessera_nn::module_core_methods!();

    /// The traced module's state, under the same names (so state dicts are interchangeable),
    /// then the owned modules.
    fn visit_fields<'a>(&'a self, visitor: &mut dyn Visitor<'a>) {
        self.root.visit_fields(visitor);
        self.root.core().visit_dynamic(visitor);
        for (name, module) in &self.owned {
            visitor.child(name, module.as_module());
        }
    }

    fn type_name(&self) -> String {
        "GraphModule".into()
    }

    /// Owned modules first, then the traced module's children, without scanning siblings.
    fn child_module(&self, name: &str) -> Option<&dyn Module> {
        self.owned
            .get(name)
            .map(|m| m.as_module())
            .or_else(|| self.root.child_module(name))
            .or_else(|| tessera_nn::find_child(self.as_module(), name))
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
