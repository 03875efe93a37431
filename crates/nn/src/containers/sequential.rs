//! `Sequential`: layers called one after another, registered as children `0`, `1`, ...

use crate::{Call, Forward, Layer, Module, ModuleCore, Result, Visitor};
use tessera_tensor::Tensor;

/// A chain of layers; `forward` calls each in turn (through `call`, so their hooks run).
#[derive(Default)]
pub struct Sequential {
    core: ModuleCore,
    layers: Vec<Box<dyn Layer>>,
}

impl Sequential {
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends a layer (builder style, as candle's `seq().add(..)`).
    #[allow(clippy::should_implement_trait)] // a builder step, not arithmetic
    pub fn add(mut self, layer: impl Layer) -> Self {
        self.layers.push(Box::new(layer));
        self
    }

    /// Appends a layer (PyTorch's `append`).
    pub fn append(&mut self, layer: impl Layer) {
        self.layers.push(Box::new(layer));
    }

    /// Appends an already boxed layer.
    pub fn push(&mut self, layer: Box<dyn Layer>) {
        self.layers.push(layer);
    }

    pub fn len(&self) -> usize {
        self.layers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.layers.is_empty()
    }

    /// Layer `index` (negative counts from the end, as in PyTorch).
    pub fn get(&self, index: isize) -> Option<&dyn Layer> {
        let n = self.layers.len() as isize;
        let i = if index < 0 { index + n } else { index };
        (0..n)
            .contains(&i)
            .then(|| self.layers[i as usize].as_ref())
    }

    pub fn iter(&self) -> impl Iterator<Item = &dyn Layer> {
        self.layers.iter().map(|l| l.as_ref())
    }
}

impl std::ops::Index<usize> for Sequential {
    type Output = dyn Layer;

    fn index(&self, index: usize) -> &dyn Layer {
        self.layers[index].as_ref()
    }
}

impl Module for Sequential {
    crate::module_core_methods!();
    super::indexed_children!(layers);
    fn type_name(&self) -> String {
        "Sequential".into()
    }
    fn as_layer(&self) -> Option<&dyn Layer> {
        Some(self)
    }
}

impl Forward for Sequential {
    type Output = Tensor;

    fn forward(&self, input: Tensor) -> Result<Tensor> {
        self.layers.iter().try_fold(input, |x, layer| layer.call(x))
    }
}
