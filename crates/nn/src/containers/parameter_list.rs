//! `ParameterList`: parameters held in a list and registered as `0`, `1`, ...

use crate::{Module, ModuleCore, Parameter, Visitor};

/// A list of parameters; `state_dict` keys are `<name>.0`, `<name>.1`, ...
#[derive(Default)]
pub struct ParameterList {
    core: ModuleCore,
    items: Vec<Parameter>,
}

impl ParameterList {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn append(&mut self, param: Parameter) {
        self.items.push(param);
    }

    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    pub fn iter(&self) -> std::slice::Iter<'_, Parameter> {
        self.items.iter()
    }
}

impl FromIterator<Parameter> for ParameterList {
    fn from_iter<I: IntoIterator<Item = Parameter>>(iter: I) -> Self {
        ParameterList {
            core: ModuleCore::default(),
            items: iter.into_iter().collect(),
        }
    }
}

impl std::ops::Index<usize> for ParameterList {
    type Output = Parameter;

    fn index(&self, index: usize) -> &Parameter {
        &self.items[index]
    }
}

impl Module for ParameterList {
    crate::module_core_methods!();
    fn visit_fields<'a>(&'a self, visitor: &mut dyn Visitor<'a>) {
        let mut name = [0u8; 20];
        for (i, p) in self.items.iter().enumerate() {
            visitor.parameter(super::index_name(i, &mut name), Some(p));
        }
    }
    fn type_name(&self) -> String {
        "ParameterList".into()
    }

    /// `  (0): Parameter containing: [torch.float32 of size 2]` per parameter.
    fn extra_repr(&self) -> String {
        self.items
            .iter()
            .enumerate()
            .map(|(i, p)| {
                format!(
                    "  ({i}): Parameter containing: [{} of size {}]",
                    p.dtype().torch_name(),
                    super::size_str(&p.shape())
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}
