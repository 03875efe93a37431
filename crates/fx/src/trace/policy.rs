//! Which module calls tracing records as one `call_module` node (leaves) and which it traces
//! through: by default Tessera's built-in layers are leaves and custom modules are traced.

use std::any::TypeId;
use std::collections::HashSet;
use tessera_nn::Module;
use tessera_nn::layers::*;

/// Leaf decisions by module type and by module path; a path rule wins over a type rule.
#[derive(Debug, Clone)]
pub struct LeafPolicy {
    leaf_types: HashSet<TypeId>,
    leaf_paths: HashSet<String>,
    traced_paths: HashSet<String>,
}

macro_rules! type_ids {
    ($($t:ty),* $(,)?) => {
        [$(TypeId::of::<$t>()),*]
    };
}

impl Default for LeafPolicy {
    /// Every layer of `tessera_nn::layers` is a leaf.
    fn default() -> Self {
        let builtin = type_ids!(
            Identity,
            Linear,
            Bilinear,
            Conv1d,
            Conv2d,
            ConvTranspose2d,
            BatchNorm1d,
            BatchNorm2d,
            LayerNorm,
            GroupNorm,
            Dropout,
            Embedding,
            ReLU,
            LeakyReLU,
            GELU,
            SiLU,
            Sigmoid,
            Tanh,
            Softmax,
            LogSoftmax,
            MaxPool2d,
            AvgPool2d,
            AdaptiveAvgPool2d,
            Flatten,
            MSELoss,
            L1Loss,
            CrossEntropyLoss,
            NLLLoss,
            BCEWithLogitsLoss,
        );
        LeafPolicy {
            leaf_types: builtin.into_iter().collect(),
            leaf_paths: HashSet::new(),
            traced_paths: HashSet::new(),
        }
    }
}

impl LeafPolicy {
    /// No leaves at all: every call is traced down to ops.
    pub fn none() -> Self {
        LeafPolicy {
            leaf_types: HashSet::new(),
            leaf_paths: HashSet::new(),
            traced_paths: HashSet::new(),
        }
    }

    /// Records modules of type `M` as leaves.
    pub fn leaf_type<M: Module>(mut self) -> Self {
        self.leaf_types.insert(TypeId::of::<M>());
        self
    }

    /// Traces through modules of type `M`.
    pub fn trace_type<M: Module>(mut self) -> Self {
        self.leaf_types.remove(&TypeId::of::<M>());
        self
    }

    /// Records the module at `path` as a leaf, whatever its type.
    pub fn leaf_path(mut self, path: &str) -> Self {
        self.traced_paths.remove(path);
        self.leaf_paths.insert(path.to_string());
        self
    }

    /// Traces through the module at `path`, whatever its type.
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
        self.leaf_paths.contains(path) || self.leaf_types.contains(&module.as_any().type_id())
    }
}
