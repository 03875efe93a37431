//! `NamedSequential`: layers called in order and registered under given names, printed under a
//! given class name: torchvision's `Sequential(OrderedDict(...))` (`encoder.layers.encoder_layer_0`,
//! `heads.head`) and its `Sequential` subclasses (`Conv2dNormActivation`, `MLPBlock`).

use crate::{Call, Forward, Layer, Module, ModuleCore, Result, Visitor};
use tessera_tensor::Tensor;

/// A chain of named layers; `forward` calls each in turn (through `call`, so hooks run).
pub struct NamedSequential {
    core: ModuleCore,
    class: &'static str,
    layers: Vec<(String, Box<dyn Layer>)>,
}

impl NamedSequential {
    /// An empty chain printed as `class(...)`.
    pub fn new(class: &'static str) -> Self {
        NamedSequential {
            core: ModuleCore::default(),
            class,
            layers: Vec::new(),
        }
    }

    /// Appends `layer` under `name` (builder style).
    #[allow(clippy::should_implement_trait)] // a builder step, not arithmetic
    pub fn add(mut self, name: impl Into<String>, layer: impl Layer) -> Self {
        self.layers.push((name.into(), Box::new(layer)));
        self
    }

    /// Appends `layers` under the names `0`, `1`, ... (a `Sequential` subclass).
    pub fn indexed(class: &'static str, layers: Vec<Box<dyn Layer>>) -> Self {
        let mut chain = NamedSequential::new(class);
        for (i, layer) in layers.into_iter().enumerate() {
            chain.layers.push((i.to_string(), layer));
        }
        chain
    }

    pub fn len(&self) -> usize {
        self.layers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.layers.is_empty()
    }

    /// The layers with their names, in order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &dyn Layer)> {
        self.layers.iter().map(|(n, l)| (n.as_str(), l.as_ref()))
    }
}

impl Module for NamedSequential {
    crate::module_core_methods!();
    fn visit_fields<'a>(&'a self, visitor: &mut dyn Visitor<'a>) {
        for (name, layer) in &self.layers {
            visitor.child(name, layer.as_module());
        }
    }
    fn type_name(&self) -> String {
        self.class.into()
    }
    fn as_layer(&self) -> Option<&dyn Layer> {
        Some(self)
    }
}

impl Forward for NamedSequential {
    type Output = Tensor;

    fn forward(&self, input: Tensor) -> Result<Tensor> {
        self.layers.iter().try_fold(input, |x, (_, l)| l.call(x))
    }
}
