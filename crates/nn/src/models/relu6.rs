//! `ReLU6`, `min(max(x, 0), 6)`, as MobileNetV2 uses it: a private stand-in built on `clamp`
//! (one op in a traced graph) until the layers gain their own `ReLU6`, which replaces this file.
//! Its gradient follows `clamp` (1 at exactly 0 and 6, where PyTorch's hardtanh gives 0).

use crate::{Forward, ModuleCore, Result};
use tessera_tensor::Tensor;

/// `min(max(x, 0), 6)`, printed as PyTorch's `ReLU6()` / `ReLU6(inplace=True)`.
#[derive(crate::Module, Default)]
#[module(extra_repr = "repr_args")]
pub struct ReLU6 {
    core: ModuleCore,
    /// Printed as PyTorch's flag; the result is always a new tensor.
    pub inplace: bool,
}

impl ReLU6 {
    pub fn with_inplace(inplace: bool) -> Self {
        ReLU6 {
            inplace,
            ..Self::default()
        }
    }

    fn repr_args(&self) -> String {
        if self.inplace {
            "inplace=True".into()
        } else {
            String::new()
        }
    }
}

impl Forward for ReLU6 {
    type Output = Tensor;
    fn forward(&self, input: Tensor) -> Result<Tensor> {
        Ok(input.clamp(Some(0.0), Some(6.0))?)
    }
}
