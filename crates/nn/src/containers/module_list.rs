//! `ModuleList`: modules held in a list and registered as children `0`, `1`, ...

use crate::repr::{add_indent, repr};
use crate::{Module, ModuleCore, Visitor};

/// A list of modules (`ModuleList<MyLinear>`, or `ModuleList<Box<dyn Layer>>` for mixed
/// kinds); index it to call them.
pub struct ModuleList<M: Module = Box<dyn Module>> {
    core: ModuleCore,
    items: Vec<M>,
}

impl<M: Module> Default for ModuleList<M> {
    fn default() -> Self {
        ModuleList {
            core: ModuleCore::default(),
            items: Vec::new(),
        }
    }
}

impl<M: Module> ModuleList<M> {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn append(&mut self, module: M) {
        self.items.push(module);
    }

    pub fn extend(&mut self, modules: impl IntoIterator<Item = M>) {
        self.items.extend(modules);
    }

    /// Inserts before `index` (PyTorch's `insert`); indices after it shift.
    pub fn insert(&mut self, index: usize, module: M) {
        self.items.insert(index.min(self.items.len()), module);
    }

    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    pub fn get(&self, index: usize) -> Option<&M> {
        self.items.get(index)
    }

    pub fn iter(&self) -> std::slice::Iter<'_, M> {
        self.items.iter()
    }
}

impl<M: Module> FromIterator<M> for ModuleList<M> {
    fn from_iter<I: IntoIterator<Item = M>>(iter: I) -> Self {
        ModuleList {
            core: ModuleCore::default(),
            items: iter.into_iter().collect(),
        }
    }
}

impl<M: Module> std::ops::Index<usize> for ModuleList<M> {
    type Output = M;

    fn index(&self, index: usize) -> &M {
        &self.items[index]
    }
}

impl<M: Module> Module for ModuleList<M> {
    crate::module_core_methods!();
    super::indexed_children!(items);
    fn type_name(&self) -> String {
        "ModuleList".into()
    }

    /// PyTorch folds runs of identical children: `(0-2): 3 x MyLinear()`.
    fn custom_repr(&self) -> Option<String> {
        if self.items.is_empty() {
            return Some("ModuleList()".into());
        }
        let reprs: Vec<String> = self.items.iter().map(|m| repr(m.as_module())).collect();
        let mut blocks: Vec<(usize, usize, &String)> = Vec::new();
        for (i, r) in reprs.iter().enumerate() {
            match blocks.last_mut() {
                Some((_, end, block)) if *block == r => *end = i,
                _ => blocks.push((i, i, r)),
            }
        }
        let lines: Vec<String> = blocks
            .into_iter()
            .map(|(start, end, block)| {
                let line = if start == end {
                    format!("({start}): {block}")
                } else {
                    format!("({start}-{end}): {} x {block}", end - start + 1)
                };
                add_indent(&line, 2)
            })
            .collect();
        Some(format!("ModuleList(\n  {}\n)", lines.join("\n  ")))
    }
}
