//! The small CNN of the PyTorch conformance cases (`d_cnn_eval`, `h_module_api`):
//! conv-bn-relu-pool, conv-bn-relu, global average pool, flatten, linear.

use crate::layers::{
    AdaptiveAvgPool2d, BatchNorm2d, Conv2d, Conv2dOptions, Flatten, Linear, MaxPool2d, ReLU,
};
use crate::{Call, Forward, Module, ModuleCore, Result};
use tessera_tensor::Tensor;

/// `Conv2d(3,16,3,pad 1) -> BatchNorm2d -> ReLU -> MaxPool2d(2) -> Conv2d(16,32,3,stride 2,
/// pad 1) -> BatchNorm2d -> ReLU -> AdaptiveAvgPool2d(1) -> Flatten -> Linear(32,10)`, printed
/// and keyed as PyTorch's `SmallCNN`.
#[derive(Module)]
#[module(name = "SmallCNN")]
pub struct SmallCnn {
    core: ModuleCore,
    pub conv1: Conv2d,
    pub bn1: BatchNorm2d,
    pub relu1: ReLU,
    pub pool1: MaxPool2d,
    pub conv2: Conv2d,
    pub bn2: BatchNorm2d,
    pub relu2: ReLU,
    pub gap: AdaptiveAvgPool2d,
    pub flatten: Flatten,
    pub fc: Linear,
}

impl SmallCnn {
    pub fn new() -> Result<Self> {
        Ok(SmallCnn {
            core: ModuleCore::default(),
            conv1: Conv2d::with_options(3, 16, 3, Conv2dOptions::default().padding(1))?,
            bn1: BatchNorm2d::new(16)?,
            relu1: ReLU::new(),
            pool1: MaxPool2d::new(2),
            conv2: Conv2d::with_options(16, 32, 3, Conv2dOptions::default().stride(2).padding(1))?,
            bn2: BatchNorm2d::new(32)?,
            relu2: ReLU::new(),
            gap: AdaptiveAvgPool2d::new(1),
            flatten: Flatten::new(),
            fc: Linear::new(32, 10)?,
        })
    }
}

impl Forward for SmallCnn {
    type Output = Tensor;

    fn forward(&self, x: Tensor) -> Result<Tensor> {
        let x = self
            .pool1
            .call(self.relu1.call(self.bn1.call(self.conv1.call(x)?)?)?)?;
        let x = self.relu2.call(self.bn2.call(self.conv2.call(x)?)?)?;
        self.fc.call(self.flatten.call(self.gap.call(x)?)?)
    }
}
