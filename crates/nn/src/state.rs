//! Module state: gradients, dtype and device moves, `state_dict` and `load_state_dict` with
//! PyTorch's key order, metadata, error texts and missing/unexpected key reports.

use crate::hooks::HookTable;
use crate::walk::{named_modules, own};
use crate::{Module, NnError, Result, StateDict};
use std::collections::HashSet;
use tessera_tensor::{DType, Device, Tensor, no_grad};

/// Keys `load_state_dict` did not match (PyTorch's `_IncompatibleKeys`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IncompatibleKeys {
    pub missing_keys: Vec<String>,
    pub unexpected_keys: Vec<String>,
}

impl IncompatibleKeys {
    pub fn is_empty(&self) -> bool {
        self.missing_keys.is_empty() && self.unexpected_keys.is_empty()
    }
}

impl std::fmt::Display for IncompatibleKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.is_empty() {
            return f.write_str("<All keys matched successfully>");
        }
        let list = |keys: &[String]| {
            keys.iter()
                .map(|k| format!("'{k}'"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        write!(
            f,
            "_IncompatibleKeys(missing_keys=[{}], unexpected_keys=[{}])",
            list(&self.missing_keys),
            list(&self.unexpected_keys)
        )
    }
}

fn all_tensors(module: &dyn Module) -> Vec<Tensor> {
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for (_, m) in named_modules(module, "", true) {
        let own = own(m);
        let params = own
            .parameters
            .into_iter()
            .filter_map(|(_, p)| p.map(|p| p.tensor().clone()));
        let buffers = own.buffers.into_iter().filter_map(|(_, b, _)| b.cloned());
        for t in params.chain(buffers) {
            if seen.insert(t.id()) {
                out.push(t);
            }
        }
    }
    out
}

pub(crate) fn zero_grad(module: &dyn Module, set_to_none: bool) -> Result<()> {
    let _guard = no_grad();
    for (_, p) in crate::walk::named_parameters(module, true) {
        match (p.grad(), set_to_none) {
            (Some(g), false) => {
                g.zero_()?;
            }
            _ => p.set_grad(None),
        }
    }
    Ok(())
}

pub(crate) fn to_dtype(module: &dyn Module, dtype: DType) -> Result<()> {
    if !dtype.is_float() {
        return Err(NnError::Invalid(format!(
            "to_dtype only accepts floating point dtypes, got {dtype}"
        )));
    }
    let _guard = no_grad();
    for t in all_tensors(module)
        .into_iter()
        .filter(|t| t.dtype().is_float())
    {
        t.set_data(&t.to_dtype(dtype)?);
        if let Some(g) = t.grad() {
            t.set_grad(Some(g.to_dtype(dtype)?));
        }
    }
    Ok(())
}

pub(crate) fn to_device(module: &dyn Module, device: Device) -> Result<()> {
    for t in all_tensors(module) {
        t.set_data(&t.to_device(device)?);
        if let Some(g) = t.grad() {
            t.set_grad(Some(g.to_device(device)?));
        }
    }
    Ok(())
}

pub(crate) fn state_dict(module: &dyn Module) -> Result<StateDict> {
    fn go(m: &dyn Module, prefix: &str, out: &mut StateDict) -> Result<()> {
        out.metadata
            .insert(prefix.trim_end_matches('.').to_string(), m.version());
        let own = own(m);
        for (name, p) in &own.parameters {
            if let Some(p) = p {
                out.insert(format!("{prefix}{name}"), p.detach());
            }
        }
        for (name, b, persistent) in &own.buffers {
            if let (Some(b), true) = (b, persistent) {
                out.insert(format!("{prefix}{name}"), b.detach());
            }
        }
        if let Some(extra) = m.get_extra_state() {
            out.extra.insert(format!("{prefix}_extra_state"), extra);
        }
        let hooks: Vec<_> = m
            .core()
            .hooks
            .lock()
            .state_dict
            .iter()
            .map(|(_, h)| h.clone())
            .collect();
        for (name, child) in own.children {
            go(child, &format!("{prefix}{name}."), out)?;
        }
        for hook in hooks {
            hook(m, out, prefix)?;
        }
        Ok(())
    }
    let mut out = StateDict::new();
    go(module, "", &mut out)?;
    Ok(out)
}

fn torch_size(shape: &[usize]) -> String {
    format!(
        "torch.Size([{}])",
        shape
            .iter()
            .map(|d| d.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    )
}

pub(crate) fn load_state_dict(
    module: &dyn Module,
    state_dict: &StateDict,
    strict: bool,
    assign: bool,
) -> Result<crate::IncompatibleKeys> {
    let mut incoming = state_dict.clone();
    let mut expected: HashSet<String> = HashSet::new();
    let mut missing = Vec::new();
    let mut errors = Vec::new();
    let _guard = no_grad();

    fn go(
        m: &dyn Module,
        prefix: &str,
        incoming: &mut StateDict,
        assign: bool,
        expected: &mut HashSet<String>,
        missing: &mut Vec<String>,
        errors: &mut Vec<String>,
    ) -> Result<()> {
        for hook in hooks_of(m, |t| &t.load_pre) {
            hook(incoming, prefix)?;
        }
        let own = own(m);
        let params = own
            .parameters
            .iter()
            .filter_map(|(n, p)| p.map(|p| (n, p.tensor())));
        let buffers = own
            .buffers
            .iter()
            .filter_map(|(n, b, persistent)| b.filter(|_| *persistent).map(|b| (n, b)));
        for (name, target) in params.chain(buffers) {
            let key = format!("{prefix}{name}");
            expected.insert(key.clone());
            let Some(source) = incoming.get(&key) else {
                missing.push(key);
                continue;
            };
            if source.shape() != target.shape() {
                errors.push(format!(
                    "size mismatch for {key}: copying a param with shape {} from checkpoint, the shape in current model is {}.",
                    torch_size(&source.shape()),
                    torch_size(&target.shape())
                ));
                continue;
            }
            if assign {
                target.set_data(&source.to_dtype(target.dtype())?);
            } else {
                target.copy_(source)?;
            }
        }
        let extra_key = format!("{prefix}_extra_state");
        if let Some(extra) = incoming.extra.get(&extra_key).cloned() {
            expected.insert(extra_key);
            m.set_extra_state(&extra)?;
        } else if m.get_extra_state().is_some() {
            missing.push(extra_key);
        }
        for (name, child) in own.children {
            go(
                child,
                &format!("{prefix}{name}."),
                incoming,
                assign,
                expected,
                missing,
                errors,
            )?;
        }
        Ok(())
    }

    go(
        module,
        "",
        &mut incoming,
        assign,
        &mut expected,
        &mut missing,
        &mut errors,
    )?;
    let unexpected: Vec<String> = incoming
        .keys()
        .chain(incoming.extra.keys().map(String::as_str))
        .filter(|k| !expected.contains(*k))
        .map(String::from)
        .collect();
    let keys = crate::IncompatibleKeys {
        missing_keys: missing,
        unexpected_keys: unexpected,
    };
    if strict {
        let quoted = |keys: &[String]| {
            keys.iter()
                .map(|k| format!("\"{k}\""))
                .collect::<Vec<_>>()
                .join(", ")
        };
        if !keys.unexpected_keys.is_empty() {
            errors.insert(
                0,
                format!(
                    "Unexpected key(s) in state_dict: {}. ",
                    quoted(&keys.unexpected_keys)
                ),
            );
        }
        if !keys.missing_keys.is_empty() {
            errors.insert(
                0,
                format!(
                    "Missing key(s) in state_dict: {}. ",
                    quoted(&keys.missing_keys)
                ),
            );
        }
    }
    if !errors.is_empty() {
        return Err(NnError::LoadStateDict {
            module: module.type_name(),
            errors,
        });
    }
    for (_, m) in named_modules(module, "", true) {
        for hook in hooks_of(m, |t| &t.load_post) {
            hook(m, &keys)?;
        }
    }
    Ok(keys)
}

/// A copy of one kind of `m`'s hooks, so that they run without its hook table locked.
fn hooks_of<H: Clone>(m: &dyn Module, kind: impl FnOnce(&HookTable) -> &[(u64, H)]) -> Vec<H> {
    let table = m.core().hooks.lock();
    kind(&table).iter().map(|(_, h)| h.clone()).collect()
}
