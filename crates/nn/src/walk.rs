//! Walking the module tree: own registrations, named children/modules/parameters/buffers
//! with PyTorch's order and de-duplication, lookup by dotted path, and `apply`.

use crate::{Module, NnError, Parameter, Result, Visitor};
use std::collections::HashSet;
use tessera_tensor::{Tensor, TensorId};

/// A module's own registrations, fields first, then run-time ones.
#[derive(Default)]
pub(crate) struct Own<'a> {
    pub(crate) parameters: Vec<(String, Option<&'a Parameter>)>,
    pub(crate) buffers: Vec<(String, Option<&'a Tensor>, bool)>,
    pub(crate) children: Vec<(String, &'a dyn Module)>,
}

impl<'a> Visitor<'a> for Own<'a> {
    fn parameter(&mut self, name: &str, param: Option<&'a Parameter>) {
        self.parameters.push((name.to_string(), param));
    }

    fn buffer(&mut self, name: &str, buffer: Option<&'a Tensor>, persistent: bool) {
        self.buffers.push((name.to_string(), buffer, persistent));
    }

    fn child(&mut self, name: &str, module: &'a dyn Module) {
        self.children.push((name.to_string(), module));
    }
}

pub(crate) fn own(module: &dyn Module) -> Own<'_> {
    let mut own = Own::default();
    module.visit_fields(&mut own);
    module.core().visit_dynamic(&mut own);
    // A parametrized tensor is no longer a registration of its own: its handle holds the
    // computed value and `parametrizations.<name>.original` holds the learnable tensor.
    if let Some(p) = &module.core().parametrizations {
        own.parameters.retain(|(name, _)| !p.contains(name));
        own.buffers.retain(|(name, _, _)| !p.contains(name));
    }
    // A pruned parameter is hidden too (`<name>_orig` and `<name>_mask` stand for it); once
    // the pruning is removed it comes last, where PyTorch re-registers it.
    let pruned = &module.core().pruned;
    if !pruned.is_empty() {
        let mut restored = Vec::new();
        own.parameters.retain(|(name, p)| match pruned.get(name) {
            None => true,
            Some(crate::prune::Pruned::Active(_)) => false,
            Some(crate::prune::Pruned::Restored) => {
                restored.push((name.clone(), *p));
                false
            }
        });
        restored.sort_by_key(|(name, _)| pruned.get_index_of(name));
        own.parameters.extend(restored);
    }
    own
}

/// The names the module's fields use (so run-time registrations cannot shadow them).
pub(crate) fn field_names(module: &dyn Module) -> Vec<String> {
    let own = own(module);
    own.parameters
        .into_iter()
        .map(|(n, _)| n)
        .chain(own.buffers.into_iter().map(|(n, _, _)| n))
        .chain(own.children.into_iter().map(|(n, _)| n))
        .collect()
}

/// The identity of a module: its address and type. The address alone is not enough: a
/// struct's first field can sit at the struct's own address.
pub(crate) type ModuleId = (usize, std::any::TypeId);

pub(crate) fn module_id(module: &dyn Module) -> ModuleId {
    (
        module as *const dyn Module as *const () as usize,
        module.as_any().type_id(),
    )
}

fn join(prefix: &str, name: &str) -> String {
    if prefix.is_empty() {
        name.to_string()
    } else {
        format!("{prefix}.{name}")
    }
}

pub(crate) fn named_children(module: &dyn Module) -> Vec<(String, &dyn Module)> {
    let mut seen = HashSet::new();
    own(module)
        .children
        .into_iter()
        .filter(|(_, m)| seen.insert(module_id(*m)))
        .collect()
}

pub(crate) fn named_modules<'a>(
    module: &'a dyn Module,
    prefix: &str,
    remove_duplicate: bool,
) -> Vec<(String, &'a dyn Module)> {
    fn go<'a>(
        m: &'a dyn Module,
        prefix: String,
        dedup: bool,
        seen: &mut HashSet<ModuleId>,
        out: &mut Vec<(String, &'a dyn Module)>,
    ) {
        if dedup && !seen.insert(module_id(m)) {
            return;
        }
        out.push((prefix.clone(), m));
        for (name, child) in own(m).children {
            go(child, join(&prefix, &name), dedup, seen, out);
        }
    }
    let mut out = Vec::new();
    go(
        module,
        prefix.to_string(),
        remove_duplicate,
        &mut HashSet::new(),
        &mut out,
    );
    out
}

pub(crate) fn named_parameters(module: &dyn Module, recurse: bool) -> Vec<(String, Parameter)> {
    named_unique(module, recurse, |own| {
        own.parameters
            .into_iter()
            .filter_map(|(name, p)| p.map(|p| (name, p.clone(), p.id())))
            .collect()
    })
}

pub(crate) fn named_buffers(module: &dyn Module, recurse: bool) -> Vec<(String, Tensor)> {
    named_unique(module, recurse, |own| {
        own.buffers
            .into_iter()
            .filter_map(|(name, b, _)| b.map(|b| (name, b.clone(), b.id())))
            .collect()
    })
}

/// The tensors `select` picks from each module's own state (this module's alone unless
/// `recurse`), named by their qualified path, each shared tensor once under its first name.
fn named_unique<T>(
    module: &dyn Module,
    recurse: bool,
    select: impl Fn(Own<'_>) -> Vec<(String, T, TensorId)>,
) -> Vec<(String, T)> {
    let modules = if recurse {
        named_modules(module, "", true)
    } else {
        vec![(String::new(), module)]
    };
    let mut seen: HashSet<TensorId> = HashSet::new();
    let mut out = Vec::new();
    for (prefix, m) in modules {
        for (name, tensor, id) in select(own(m)) {
            if seen.insert(id) {
                out.push((join(&prefix, &name), tensor));
            }
        }
    }
    out
}

/// The direct child `name` of `module` among its fields and run-time registrations.
pub fn find_child<'a>(module: &'a dyn Module, name: &str) -> Option<&'a dyn Module> {
    struct Find<'n, 'a> {
        name: &'n str,
        found: Option<&'a dyn Module>,
    }
    impl<'a> Visitor<'a> for Find<'_, 'a> {
        fn child(&mut self, name: &str, module: &'a dyn Module) {
            if self.found.is_none() && name == self.name {
                self.found = Some(module);
            }
        }
    }
    let mut find = Find { name, found: None };
    module.visit_fields(&mut find);
    module.core().visit_dynamic(&mut find);
    find.found
}

pub(crate) fn get_submodule<'a>(module: &'a dyn Module, path: &str) -> Result<&'a dyn Module> {
    if path.is_empty() {
        return Ok(module);
    }
    let mut current = module;
    for segment in path.split('.') {
        current = current.child_module(segment).ok_or_else(|| {
            NnError::NotFound(format!(
                "{} has no attribute `{segment}`",
                current.type_name()
            ))
        })?;
    }
    Ok(current)
}

fn split_last(path: &str) -> (&str, &str) {
    match path.rsplit_once('.') {
        Some((module, name)) => (module, name),
        None => ("", path),
    }
}

pub(crate) fn get_parameter(module: &dyn Module, path: &str) -> Result<Parameter> {
    let (module_path, name) = split_last(path);
    let owner = get_submodule(module, module_path)?;
    let own = own(owner);
    match own.parameters.into_iter().find(|(n, _)| n == name) {
        Some((_, Some(p))) => Ok(p.clone()),
        Some((_, None)) => Err(NnError::NotFound(format!(
            "`{name}` is registered as None in {}",
            owner.type_name()
        ))),
        None if own.buffers.iter().any(|(n, _, _)| n == name) => Err(NnError::NotFound(format!(
            "`{name}` is not an nn.Parameter"
        ))),
        None => Err(NnError::NotFound(format!(
            "{} has no attribute `{name}`",
            owner.type_name()
        ))),
    }
}

pub(crate) fn get_buffer(module: &dyn Module, path: &str) -> Result<Tensor> {
    let (module_path, name) = split_last(path);
    let owner = get_submodule(module, module_path)?;
    let own = own(owner);
    match own.buffers.into_iter().find(|(n, _, _)| n == name) {
        Some((_, Some(b), _)) => Ok(b.clone()),
        Some((_, None, _)) => Err(NnError::NotFound(format!(
            "`{name}` is registered as None in {}",
            owner.type_name()
        ))),
        None if own.parameters.iter().any(|(n, _)| n == name) => {
            Err(NnError::NotFound(format!("`{name}` is not a buffer")))
        }
        None => Err(NnError::NotFound(format!(
            "{} has no attribute `{name}`",
            owner.type_name()
        ))),
    }
}

pub(crate) fn apply(module: &dyn Module, f: &mut dyn FnMut(&dyn Module)) {
    for (_, child) in named_children(module) {
        apply(child, f);
    }
    f(module);
}
