//! The parameter groups and per-parameter state that every optimizer keeps, and their
//! PyTorch `state_dict` format; the update rules themselves live in the optimizer files.

use super::{GroupOptions, ParamGroup};
use crate::{Key, NnError, Result, Value};
use indexmap::IndexMap;
use std::collections::HashMap;
use tessera_tensor::{Device, Tensor, TensorId, no_grad};

/// A dict of plain values, as state entries and param groups are stored.
pub(crate) type Dict = IndexMap<Key, Value>;

/// One parameter's optimizer state (momentum buffers, moments, step count).
pub(crate) trait ParamState: Sized {
    /// The entries under PyTorch's names and in its order (live tensors, not copies).
    fn entries(&self) -> Dict;

    /// Reads a saved entry for `param` (deep copies); `None` when it holds no state.
    fn load(entries: &Dict, param: &Tensor, ctx: &str) -> Result<Option<Self>>;
}

/// Groups plus state keyed by parameter identity, as PyTorch keys `optimizer.state`.
#[derive(Debug)]
pub(crate) struct Groups<S> {
    pub name: &'static str,
    pub groups: Vec<ParamGroup>,
    pub state: IndexMap<TensorId, S>,
}

impl<S: ParamState> Groups<S> {
    pub fn new(name: &'static str, params: Vec<Tensor>, options: GroupOptions) -> Result<Self> {
        if params.is_empty() {
            return Err(NnError::Invalid(format!(
                "{name}: optimizer got an empty parameter list"
            )));
        }
        let mut groups = Groups {
            name,
            groups: Vec::new(),
            state: IndexMap::new(),
        };
        groups.add_param_group(params, options)?;
        Ok(groups)
    }

    /// Appends a group after checking its options and that its params are leaves that no
    /// group (this one included) holds yet.
    pub fn add_param_group(&mut self, params: Vec<Tensor>, options: GroupOptions) -> Result<()> {
        let name = self.name;
        options.validate(name)?;
        let mut seen: HashMap<TensorId, String> = HashMap::new();
        for (gi, group) in self.groups.iter().enumerate() {
            for p in &group.params {
                seen.insert(p.id(), format!("param group {gi}"));
            }
        }
        let new_group = self.groups.len();
        for (pi, p) in params.iter().enumerate() {
            if !p.is_leaf() {
                return Err(NnError::Invalid(format!(
                    "{name}: param {pi} of param group {new_group} (shape {:?}) is not a leaf tensor; only leaves can be optimized",
                    p.shape()
                )));
            }
            if let Some(holder) = seen.insert(p.id(), format!("param group {new_group}")) {
                return Err(NnError::Invalid(format!(
                    "{name}: param {pi} of param group {new_group} (shape {:?}) already appears in {holder}",
                    p.shape()
                )));
            }
        }
        self.groups.push(ParamGroup::new(params, options));
        Ok(())
    }

    pub fn zero_grad(&self, set_to_none: bool) {
        let _guard = no_grad();
        for p in self.groups.iter().flat_map(|g| &g.params) {
            if let Some(grad) = p.grad() {
                if set_to_none {
                    p.set_grad(None);
                } else {
                    // Gradients own their storage and grad mode is off, so this cannot fail.
                    let _ = grad.detach().zero_();
                }
            }
        }
    }

    pub fn state_dict(&self) -> Value {
        let mut index_of = HashMap::new();
        let mut param_groups = Vec::new();
        for group in &self.groups {
            let mut d = group.options.entries();
            if let Some(initial_lr) = group.initial_lr {
                d.insert("initial_lr".into(), Value::Float(initial_lr));
            }
            let indices = group
                .params
                .iter()
                .map(|p| {
                    let index = index_of.len() as i64;
                    index_of.insert(p.id(), index);
                    Value::Int(index)
                })
                .collect();
            d.insert("params".into(), Value::List(indices));
            param_groups.push(Value::Dict(d));
        }
        let state = self
            .state
            .iter()
            .filter_map(|(id, s)| Some((Key::Int(*index_of.get(id)?), Value::Dict(s.entries()))))
            .collect();
        let mut d = Dict::new();
        d.insert("state".into(), Value::Dict(state));
        d.insert("param_groups".into(), Value::List(param_groups));
        Value::Dict(d)
    }

    /// Replaces options and state from `value`, validating everything before changing
    /// anything, so that a failed load leaves the optimizer as it was.
    pub fn load_state_dict(&mut self, value: &Value) -> Result<()> {
        let name = self.name;
        let err = |msg: String| NnError::Invalid(format!("{name}.load_state_dict: {msg}"));
        let saved_groups = value
            .get("param_groups")
            .and_then(Value::as_list)
            .ok_or_else(|| err("expected a dict with a \"param_groups\" list".into()))?;
        let saved_state = match value.get("state") {
            Some(Value::Dict(d)) => d,
            _ => return Err(err("expected a dict with a \"state\" dict".into())),
        };
        if saved_groups.len() != self.groups.len() {
            return Err(err(format!(
                "loaded state dict has {} parameter groups, the optimizer has {}",
                saved_groups.len(),
                self.groups.len()
            )));
        }
        let mut new_options = Vec::new();
        let mut new_initial_lrs = Vec::new();
        let mut param_of: HashMap<i64, (usize, usize)> = HashMap::new();
        for (gi, (saved, group)) in saved_groups.iter().zip(&self.groups).enumerate() {
            let ctx = format!("{name}.load_state_dict: param group {gi}");
            let d = saved
                .as_dict()
                .ok_or_else(|| err(format!("param group {gi} is not a dict")))?;
            let indices = d
                .get(&Key::from("params"))
                .and_then(Value::as_list)
                .ok_or_else(|| err(format!("param group {gi} has no \"params\" list")))?;
            if indices.len() != group.params.len() {
                return Err(err(format!(
                    "param group {gi} has {} params in the loaded state dict, {} in the optimizer",
                    indices.len(),
                    group.params.len()
                )));
            }
            for (pi, index) in indices.iter().enumerate() {
                let index = index.as_i64().ok_or_else(|| {
                    err(format!("param group {gi}: params[{pi}] is not an integer"))
                })?;
                if param_of.insert(index, (gi, pi)).is_some() {
                    return Err(err(format!(
                        "param index {index} appears twice in the loaded param groups"
                    )));
                }
            }
            let mut options = group.options.clone();
            options.read(d, &ctx)?;
            options.validate(&ctx)?;
            new_options.push(options);
            new_initial_lrs.push(read_opt_f64(d, "initial_lr", &ctx)?);
        }
        let mut new_state = IndexMap::new();
        for (key, entry) in saved_state {
            let &(gi, pi) = match key {
                Key::Int(i) => param_of.get(i),
                Key::Str(_) => None,
            }
            .ok_or_else(|| err(format!("state for param {key}, which no param group holds")))?;
            let ctx =
                format!("{name}.load_state_dict: state of param {key} (group {gi}, param {pi})");
            let entries = entry
                .as_dict()
                .ok_or_else(|| NnError::Invalid(format!("{ctx}: not a dict")))?;
            let param = &self.groups[gi].params[pi];
            if let Some(s) = S::load(entries, param, &ctx)? {
                new_state.insert(param.id(), s);
            }
        }
        for ((group, options), initial_lr) in
            self.groups.iter_mut().zip(new_options).zip(new_initial_lrs)
        {
            group.options = options;
            group.initial_lr = initial_lr;
        }
        self.state = new_state;
        Ok(())
    }
}

impl GroupOptions {
    /// The hyper-parameters under PyTorch's names and in its `defaults` order.
    pub(crate) fn entries(&self) -> Dict {
        let mut d = Dict::new();
        match self {
            GroupOptions::Sgd(o) => o.write(&mut d),
            GroupOptions::Adam(o) => o.write(&mut d),
            GroupOptions::RmsProp(o) => o.write(&mut d),
        }
        d
    }

    /// Overwrites the hyper-parameters that `d` holds; absent keys keep their values.
    pub(crate) fn read(&mut self, d: &Dict, ctx: &str) -> Result<()> {
        match self {
            GroupOptions::Sgd(o) => o.read(d, ctx),
            GroupOptions::Adam(o) => o.read(d, ctx),
            GroupOptions::RmsProp(o) => o.read(d, ctx),
        }
    }

    /// Range checks, with PyTorch's messages prefixed by `ctx`.
    pub(crate) fn validate(&self, ctx: &str) -> Result<()> {
        match self {
            GroupOptions::Sgd(o) => o.validate(ctx),
            GroupOptions::Adam(o) => o.validate(ctx),
            GroupOptions::RmsProp(o) => o.validate(ctx),
        }
    }
}

/// Sets `target` from the number under `key`, if present.
pub(crate) fn read_f64(d: &Dict, key: &str, target: &mut f64, ctx: &str) -> Result<()> {
    if let Some(v) = read_opt_f64(d, key, ctx)? {
        *target = v;
    }
    Ok(())
}

fn read_opt_f64(d: &Dict, key: &str, ctx: &str) -> Result<Option<f64>> {
    match d.get(&Key::from(key)) {
        None | Some(Value::None) => Ok(None),
        Some(Value::Tensor(t)) if t.numel() == 1 => Ok(Some(t.item::<f64>()?)),
        Some(v) => v.as_f64().map(Some).ok_or_else(|| {
            NnError::Invalid(format!("{ctx}: \"{key}\" must be a number, got {v:?}"))
        }),
    }
}

/// Sets `target` from the bool under `key`, if present.
pub(crate) fn read_bool(d: &Dict, key: &str, target: &mut bool, ctx: &str) -> Result<()> {
    match d.get(&Key::from(key)) {
        None => Ok(()),
        Some(Value::Bool(b)) => {
            *target = *b;
            Ok(())
        }
        Some(v) => Err(NnError::Invalid(format!(
            "{ctx}: \"{key}\" must be a bool, got {v:?}"
        ))),
    }
}

/// Checks `value >= 0`, with PyTorch's "Invalid ..." wording.
pub(crate) fn check_non_negative(ctx: &str, what: &str, value: f64) -> Result<()> {
    if value >= 0.0 {
        Ok(())
    } else {
        Err(NnError::Invalid(format!("{ctx}: invalid {what}: {value}")))
    }
}

/// A deep copy of the state tensor under `key`, checked against the param's shape and
/// converted to its dtype; `None` when absent or `None`.
pub(crate) fn load_tensor(
    entries: &Dict,
    key: &str,
    param: &Tensor,
    ctx: &str,
) -> Result<Option<Tensor>> {
    match entries.get(&Key::from(key)) {
        None | Some(Value::None) => Ok(None),
        Some(Value::Tensor(t)) => {
            if t.shape() != param.shape() {
                return Err(NnError::Invalid(format!(
                    "{ctx}: \"{key}\" has shape {:?} but the param has shape {:?}",
                    t.shape(),
                    param.shape()
                )));
            }
            Ok(Some(t.to_dtype(param.dtype())?.deep_clone()?))
        }
        Some(v) => Err(NnError::Invalid(format!(
            "{ctx}: \"{key}\" must be a tensor, got {v:?}"
        ))),
    }
}

/// Like [`load_tensor`] for entries every state of the kind must have.
pub(crate) fn require_tensor(
    entries: &Dict,
    key: &str,
    param: &Tensor,
    ctx: &str,
) -> Result<Tensor> {
    load_tensor(entries, key, param, ctx)?
        .ok_or_else(|| NnError::Invalid(format!("{ctx}: missing \"{key}\"")))
}

/// The `step` count as a fresh float32 0-dim tensor (PyTorch 2.x), accepting older
/// checkpoints' plain numbers too.
pub(crate) fn load_step(entries: &Dict, ctx: &str) -> Result<Tensor> {
    let step = match entries.get(&Key::from("step")) {
        Some(Value::Tensor(t)) if t.numel() == 1 => t.item::<f64>()?,
        Some(v @ (Value::Int(_) | Value::Float(_))) => v.as_f64().unwrap_or_default(),
        None => return Err(NnError::Invalid(format!("{ctx}: missing \"step\""))),
        Some(v) => {
            return Err(NnError::Invalid(format!(
                "{ctx}: \"step\" must be a one-element tensor or a number, got {v:?}"
            )));
        }
    };
    Ok(Tensor::scalar(step as f32))
}

/// A new float32 0-dim step counter at zero.
pub(crate) fn zero_step() -> Tensor {
    Tensor::scalar(0.0f32)
}

/// Zeros shaped and typed like `param`, on its device (`torch.zeros_like`).
pub(crate) fn zeros_like(param: &Tensor) -> Result<Tensor> {
    let zeros = Tensor::zeros(&param.shape(), param.dtype())?;
    match param.device() {
        Device::Cpu => Ok(zeros),
        device => Ok(zeros.to_device(device)?),
    }
}

/// The buffer in `slot`, created as zeros like `param` when absent (an option such as
/// `amsgrad` switched on after the state was made).
pub(crate) fn buffer_or_zeros(slot: &mut Option<Tensor>, param: &Tensor) -> Result<Tensor> {
    match slot {
        Some(t) => Ok(t.clone()),
        None => {
            let t = zeros_like(param)?;
            *slot = Some(t.clone());
            Ok(t)
        }
    }
}

/// The counter's value after adding one in place, as PyTorch's `step_t += 1`.
pub(crate) fn increment_step(step: &Tensor) -> Result<f64> {
    step.add_scalar_(1.0)?;
    Ok(step.item::<f64>()?)
}

/// A hyper-parameter (the learning rate) as the 0-d f64 tensor the update ops read, on the
/// parameter's device.
pub(crate) fn run_time_scalar(value: f64, param: &Tensor) -> Result<Tensor> {
    Ok(Tensor::scalar(value).to_device(param.device())?)
}

/// The error for a group whose options belong to another optimizer (possible through
/// `param_groups_mut`).
pub(crate) fn wrong_options(name: &str, gi: usize, group: &ParamGroup) -> NnError {
    NnError::Invalid(format!(
        "{name}: param group {gi} holds {} options",
        group.options.kind()
    ))
}
