//! torch.fx's state-dict layout of a [`GraphModule`]: what PyTorch's `fx.GraphModule(root,
//! graph)` copies from its root, keyed and ordered as there. Every `call_module` and
//! `get_attr` target is installed in node order at its path, with plain holder modules for
//! the path's prefixes (torch.fx's `_copy_attr`), so a module no node uses (a batch norm
//! folded away) has no keys and an owned module that replaces a traced one (a folded conv)
//! sits at the traced module's path, as after `torch.fx.experimental.optimization.fuse`.
//! The ordinary [`tessera_nn::ModuleExt::state_dict`] of a graph module is left alone: it
//! keeps the traced model's keys, so checkpoints of the model load into its graph module.

use crate::{FxError, GraphModule, NodeKind};
use indexmap::IndexMap;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use tessera_nn::{IncompatibleKeys, Module, ModuleCore, ModuleExt, Parameter, StateDict, Visitor};
use tessera_tensor::Tensor;

/// A graph module's state in torch.fx's layout: a module tree sharing the graph module's
/// parameters, buffers and constants, so loading a state dict into it loads into the graph
/// module. Holders print as PyTorch's plain `Module`, the top as `GraphModule`.
pub struct FxLayout {
    core: ModuleCore,
    type_name: &'static str,
    entries: IndexMap<String, Entry>,
}

/// One attribute of a layout module.
enum Entry {
    /// A plain module made to hold the next segment of deeper paths.
    Holder(Box<FxLayout>),
    /// The submodule at `path` inside `owner` (the traced root or an owned module).
    Module {
        owner: Arc<dyn Module>,
        path: String,
    },
    Parameter(Parameter),
    Buffer(Tensor),
}

impl FxLayout {
    fn holder(type_name: &'static str) -> Self {
        FxLayout {
            core: ModuleCore::default(),
            type_name,
            entries: IndexMap::new(),
        }
    }

    /// Installs `entry` at the dotted `path`, making holders for its prefixes; nothing when
    /// the path is taken or a module installed earlier already holds a prefix of it.
    fn install(&mut self, path: &str, entry: Entry) {
        let mut segments: Vec<&str> = path.split('.').collect();
        let Some(leaf) = segments.pop() else {
            return;
        };
        let mut node = self;
        for segment in segments {
            let next = node
                .entries
                .entry(segment.into())
                .or_insert_with(|| Entry::Holder(Box::new(FxLayout::holder("Module"))));
            let Entry::Holder(holder) = next else {
                return;
            };
            node = holder;
        }
        node.entries.entry(leaf.into()).or_insert(entry);
    }
}

impl Module for FxLayout {
    tessera_nn::module_core_methods!();

    fn visit_fields<'a>(&'a self, visitor: &mut dyn Visitor<'a>) {
        for (name, entry) in &self.entries {
            match entry {
                Entry::Holder(holder) => visitor.child(name, holder.as_ref()),
                Entry::Module { owner, path } => {
                    // Resolved when the layout was built, from modules that never change.
                    if let Ok(module) = owner.get_submodule(path) {
                        visitor.child(name, module);
                    }
                }
                Entry::Parameter(p) => visitor.parameter(name, Some(p)),
                Entry::Buffer(t) => visitor.buffer(name, Some(t), true),
            }
        }
    }

    fn type_name(&self) -> String {
        self.type_name.into()
    }
}

impl GraphModule {
    /// The graph module's state in torch.fx's layout (see [`FxLayout`]); an error names a
    /// node whose target is no module, parameter, buffer or constant.
    pub fn fx_layout(&self) -> crate::Result<FxLayout> {
        let replacements = self.valid_replacements();
        let mut layout = FxLayout::holder("GraphModule");
        for id in self.graph.nodes() {
            let node = self.graph.node(&id)?;
            let (NodeKind::CallModule { target, .. } | NodeKind::GetAttr { target }) = &node.kind
            else {
                continue;
            };
            let entry = self
                .layout_entry(target)
                .ok_or_else(|| FxError::LayoutTarget {
                    node: node.name.to_string(),
                    target: target.clone(),
                })?;
            layout.install(&layout_path(target, &replacements), entry);
        }
        Ok(layout)
    }

    /// The state dict PyTorch's `GraphModule` of the same graph has (`fused.state_dict()`
    /// after `torch.fx.experimental.optimization.fuse`): the keys of the modules, parameters
    /// and buffers the graph uses, in node order, with each folded module under the path of
    /// the module it replaced. Write it with `save_pt_state_dict` for PyTorch to load.
    pub fn fx_state_dict(&self) -> crate::Result<StateDict> {
        self.fx_layout()?.state_dict().map_err(layout_state_error)
    }

    /// Loads a state dict in torch.fx's layout (`torch.save(fused.state_dict(), path)`, read
    /// with `load_pt_state_dict`) into this graph module's parameters and buffers; `strict`
    /// as `nn.Module.load_state_dict`, whose missing and unexpected keys it reports.
    pub fn load_fx_state_dict(
        &self,
        state: &StateDict,
        strict: bool,
    ) -> crate::Result<IncompatibleKeys> {
        self.fx_layout()?
            .load_state_dict(state, strict, false)
            .map_err(layout_state_error)
    }

    /// Owned module name -> traced path, for the replacements torch.fx's layout can show:
    /// no node uses the traced module any more and no other owned module that a node uses
    /// claims its path (a folded conv replaced again by its quantized copy claims nothing).
    pub(crate) fn valid_replacements(&self) -> HashMap<String, String> {
        let used: HashSet<&str> = self
            .graph
            .nodes()
            .filter_map(|id| match &self.graph.node(&id).ok()?.kind {
                NodeKind::CallModule { target, .. } | NodeKind::GetAttr { target } => {
                    Some(target.as_str())
                }
                _ => None,
            })
            .collect();
        let mut claims: HashMap<&str, Vec<&str>> = HashMap::new();
        for (name, traced) in &self.replaces {
            let called = used.iter().any(|t| split_first(t).0 == name.as_str());
            if self.owned_modules().contains_key(name) && called {
                claims.entry(traced.as_str()).or_default().push(name);
            }
        }
        claims
            .into_iter()
            .filter(|(traced, _)| {
                let inside = format!("{traced}.");
                !used
                    .iter()
                    .any(|t| t == traced || t.starts_with(inside.as_str()))
            })
            .filter_map(|(traced, names)| match names.as_slice() {
                [name] => Some((name.to_string(), traced.to_string())),
                _ => None,
            })
            .collect()
    }

    /// What a `call_module` or `get_attr` target names: a submodule of an owned module or of
    /// the root, a constant, or a parameter or buffer.
    fn layout_entry(&self, target: &str) -> Option<Entry> {
        let (first, rest) = split_first(target);
        let (owner, path) = match self.owned_modules().get(first) {
            Some(owned) => (owned, rest),
            None => (self.root_handle(), target),
        };
        if owner.get_submodule(path).is_ok() {
            return Some(Entry::Module {
                owner: owner.clone(),
                path: path.into(),
            });
        }
        if let Some(constant) = self.constants.get(target) {
            return Some(Entry::Buffer(constant.clone()));
        }
        if let Ok(p) = self.get_parameter(target) {
            return Some(Entry::Parameter(p));
        }
        self.get_buffer(target).ok().map(Entry::Buffer)
    }
}

/// Where torch.fx's layout puts the `call_module` or `get_attr` target `target`: under the
/// traced path of the owned module it starts with, if that module replaced one.
pub(crate) fn layout_path(target: &str, replacements: &HashMap<String, String>) -> String {
    let (first, rest) = split_first(target);
    match replacements.get(first) {
        Some(traced) if rest.is_empty() => traced.to_string(),
        Some(traced) => format!("{traced}.{rest}"),
        None => target.to_string(),
    }
}

/// `("layer1", "0.conv1")` for `layer1.0.conv1`; `("conv1", "")` for `conv1`.
fn split_first(path: &str) -> (&str, &str) {
    path.split_once('.').unwrap_or((path, ""))
}

pub(crate) fn layout_state_error(e: tessera_nn::NnError) -> FxError {
    FxError::LayoutState {
        source: Box::new(e),
    }
}
