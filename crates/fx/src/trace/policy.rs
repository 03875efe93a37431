//! Which module calls tracing records as one `call_module` node (leaves) and which it traces
//! through, decided by module kind and by module path: by default Tessera's built-in layers
//! are leaves and custom modules are traced.

use std::collections::HashSet;
use tessera_nn::{Module, ModuleExt, ModuleKind, ModuleType};

/// Leaf decisions by module kind and by module path; a path rule wins over a kind rule.
#[derive(Debug, Clone)]
pub struct LeafPolicy {
    leaf_kinds: HashSet<ModuleKind>,
    leaf_paths: HashSet<String>,
    traced_paths: HashSet<String>,
}

impl Default for LeafPolicy {
    /// Every layer of `tessera_nn::layers` ([`ModuleKind::LAYERS`]) is a leaf.
    fn default() -> Self {
        LeafPolicy {
            leaf_kinds: ModuleKind::LAYERS.iter().cloned().collect(),
            ..LeafPolicy::none()
        }
    }
}

impl LeafPolicy {
    /// No leaves at all: every call is traced down to ops.
    pub fn none() -> Self {
        LeafPolicy {
            leaf_kinds: HashSet::new(),
            leaf_paths: HashSet::new(),
            traced_paths: HashSet::new(),
        }
    }

    /// Records modules of `kind` as leaves.
    pub fn leaf_kind(mut self, kind: ModuleKind) -> Self {
        self.leaf_kinds.insert(kind);
        self
    }

    /// Traces through modules of `kind`.
    pub fn trace_kind(mut self, kind: ModuleKind) -> Self {
        self.leaf_kinds.remove(&kind);
        self
    }

    /// Records modules of type `M` (of its kind) as leaves.
    pub fn leaf_type<M: ModuleType>(self) -> Self {
        self.leaf_kind(ModuleKind::of::<M>())
    }

    /// Traces through modules of type `M` (of its kind).
    pub fn trace_type<M: ModuleType>(self) -> Self {
        self.trace_kind(ModuleKind::of::<M>())
    }

    /// Records the module at `path` as a leaf, whatever its kind.
    pub fn leaf_path(mut self, path: &str) -> Self {
        self.traced_paths.remove(path);
        self.leaf_paths.insert(path.to_string());
        self
    }

    /// Traces through the module at `path`, whatever its kind.
    pub fn trace_path(mut self, path: &str) -> Self {
        self.leaf_paths.remove(path);
        self.traced_paths.insert(path.to_string());
        self
    }

    /// Whether the call of `module` at `path` is one node; the traced root never is.
    pub fn is_leaf(&self, module: &dyn Module, path: &str) -> bool {
        if path.is_empty() || self.traced_paths.contains(path) {
            return false;
        }
        self.leaf_paths.contains(path) || self.leaf_kinds.contains(&module.kind())
    }
}
