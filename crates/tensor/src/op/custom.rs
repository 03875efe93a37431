//! User-defined ops (PyTorch's `autograd.Function` and `torch.library` custom ops): a forward
//! and a backward written in Rust, recorded by autograd like any other op. Module hooks are
//! built on them. A custom op that states its facts (kind, effects) and is registered by name
//! is a full member of the op table: it prints, parses, runs in the interpreter, and passes
//! treat it as they treat built-in ops of its kind.

use super::{BackwardCtx, Effects, OpDef, OpKind};
use crate::{Result, Tensor, TensorMeta};
use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, RwLock};

/// The forward and backward of a user-defined op, and what it says about itself.
pub trait CustomFunction: Send + Sync {
    /// The op's name in graphs and errors.
    fn name(&self) -> String;
    /// Output shapes and dtypes for these inputs.
    fn meta(&self, inputs: &[TensorMeta]) -> Result<Vec<TensorMeta>>;
    /// Computes the outputs (called with grad mode off for the inputs' graph).
    fn forward(&self, inputs: &[&Tensor]) -> Result<Vec<Tensor>>;
    /// Gradients of the inputs from the gradients of the outputs (`None` where nothing
    /// flowed); `inputs` and `outputs` are the values the forward saw and made.
    fn backward(
        &self,
        inputs: &[Tensor],
        outputs: &[Tensor],
        grads: &[Option<Tensor>],
    ) -> Result<Vec<Option<Tensor>>>;
    /// The family of computation; `Opaque` unless the op says otherwise.
    fn kind(&self) -> OpKind {
        OpKind::Opaque
    }
    /// What running the op does besides computing its outputs; unknown unless the op says
    /// otherwise, so passes never erase, merge or fold it.
    fn effects(&self) -> Effects {
        Effects::UNKNOWN
    }
    /// The attributes printed after the name, as JSON text (see [`register_custom`]).
    fn attributes(&self) -> Option<String> {
        None
    }
}

/// A [`CustomFunction`] as an [`Op`](super::Op) variant. Two are equal when they share the
/// same function object, or when both are registered ops printing the same name and
/// attributes (so a parsed graph equals the graph it was printed from).
#[derive(Clone)]
pub struct CustomOp(pub Arc<dyn CustomFunction>);

impl CustomOp {
    pub fn new(function: impl CustomFunction + 'static) -> Self {
        CustomOp(Arc::new(function))
    }
}

impl fmt::Debug for CustomOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CustomOp({})", self.0.name())
    }
}

impl PartialEq for CustomOp {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
            || (is_registered(self)
                && self.0.name() == other.0.name()
                && self.0.attributes() == other.0.attributes())
    }
}

/// Builds a registered op from the attributes of its text (`None` when it has none).
type Builder = Arc<dyn Fn(Option<&serde_json::Value>) -> Option<CustomOp> + Send + Sync>;

fn registry() -> &'static RwLock<HashMap<String, Builder>> {
    static REGISTRY: std::sync::OnceLock<RwLock<HashMap<String, Builder>>> =
        std::sync::OnceLock::new();
    REGISTRY.get_or_init(Default::default)
}

/// Registers a custom op by name, so that graph text naming it parses back (PyTorch's
/// `torch.library.custom_op`): `build` makes the op from the attributes printed after its
/// name. Registering a name again replaces the builder.
pub fn register_custom(
    name: &str,
    build: impl Fn(Option<&serde_json::Value>) -> Option<CustomOp> + Send + Sync + 'static,
) {
    let mut map = registry().write().unwrap_or_else(|e| e.into_inner());
    map.insert(name.to_string(), Arc::new(build));
}

/// Whether `op`'s name is registered, so its text reads back.
pub(crate) fn is_registered(op: &CustomOp) -> bool {
    let map = registry().read().unwrap_or_else(|e| e.into_inner());
    map.contains_key(&op.0.name())
}

/// The registered op that prints as `name` and `attrs`.
pub(crate) fn decode(name: &str, attrs: Option<&serde_json::Value>) -> Option<CustomOp> {
    let build = {
        let map = registry().read().unwrap_or_else(|e| e.into_inner());
        map.get(name)?.clone()
    };
    build(attrs).filter(|op| op.0.name() == name)
}

impl OpDef for CustomOp {
    fn name(&self) -> String {
        self.0.name()
    }

    fn attributes(&self) -> Option<String> {
        self.0.attributes()
    }

    fn kind(&self) -> OpKind {
        self.0.kind()
    }

    fn effects(&self) -> Effects {
        self.0.effects()
    }

    fn meta(&self, inputs: &[TensorMeta]) -> Result<Vec<TensorMeta>> {
        self.0.meta(inputs)
    }

    fn cpu(&self, inputs: &[&Tensor]) -> Result<Vec<Tensor>> {
        let _guard = crate::no_grad();
        self.0.forward(inputs)
    }

    fn backward(&self, cx: &BackwardCtx) -> Result<Vec<Option<Tensor>>> {
        self.0.backward(cx.inputs, cx.outputs, cx.grads)
    }

    fn computes_half_in_f32(&self) -> bool {
        false
    }
}
