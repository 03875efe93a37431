//! `ModuleDict`: modules by name, kept in insertion order and registered under their keys.

use crate::{Module, ModuleCore, Result, Visitor};
use indexmap::IndexMap;

/// Named modules in insertion order (`ModuleDict<Box<dyn Layer>>` for mixed kinds).
pub struct ModuleDict<M: Module = Box<dyn Module>> {
    core: ModuleCore,
    items: IndexMap<String, M>,
}

impl<M: Module> Default for ModuleDict<M> {
    fn default() -> Self {
        ModuleDict {
            core: ModuleCore::default(),
            items: IndexMap::new(),
        }
    }
}

impl<M: Module> ModuleDict<M> {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds or replaces `name` (a replaced entry keeps its position, as in PyTorch).
    pub fn insert(&mut self, name: impl Into<String>, module: M) -> Result<()> {
        super::insert_named(&mut self.items, "module", name.into(), module)
    }

    super::ordered_map_reads!(items: M);

    pub fn get_mut(&mut self, name: &str) -> Option<&mut M> {
        self.items.get_mut(name)
    }

    pub fn remove(&mut self, name: &str) -> Option<M> {
        self.items.shift_remove(name)
    }

    pub fn contains_key(&self, name: &str) -> bool {
        self.items.contains_key(name)
    }
}

impl<M: Module> std::ops::Index<&str> for ModuleDict<M> {
    type Output = M;

    fn index(&self, name: &str) -> &M {
        &self.items[name]
    }
}

impl<M: Module> Module for ModuleDict<M> {
    crate::module_core_methods!();
    fn visit_fields<'a>(&'a self, visitor: &mut dyn Visitor<'a>) {
        for (name, m) in &self.items {
            visitor.child(name, m.as_module());
        }
    }
    fn type_name(&self) -> String {
        "ModuleDict".into()
    }
}
