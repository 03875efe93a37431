//! The shapes CNN that `train_shapes` and `ddp_train` train: two conv blocks, global average
//! pooling and a linear classifier over the generated shapes of `tessera::datasets`.

use tessera::Tensor;
use tessera::datasets::CLASSES;
use tessera::nn::layers::{
    AdaptiveAvgPool2d, BatchNorm2d, Conv2d, Conv2dOptions, Flatten, Linear, MaxPool2d, ReLU,
};
use tessera::nn::{Call, Forward, Module, ModuleCore};

/// Two conv blocks, global average pooling and a linear classifier.
#[derive(Module)]
pub struct ShapesNet {
    core: ModuleCore,
    conv1: Conv2d,
    bn1: BatchNorm2d,
    relu1: ReLU,
    pool1: MaxPool2d,
    conv2: Conv2d,
    bn2: BatchNorm2d,
    relu2: ReLU,
    gap: AdaptiveAvgPool2d,
    flatten: Flatten,
    fc: Linear,
}

impl ShapesNet {
    pub fn new() -> tessera::nn::Result<ShapesNet> {
        let same = || Conv2dOptions::default().padding(1);
        Ok(ShapesNet {
            core: ModuleCore::default(),
            conv1: Conv2d::with_options(1, 8, 3, same())?,
            bn1: BatchNorm2d::new(8)?,
            relu1: ReLU::new(),
            pool1: MaxPool2d::new(2),
            conv2: Conv2d::with_options(8, 16, 3, same())?,
            bn2: BatchNorm2d::new(16)?,
            relu2: ReLU::new(),
            gap: AdaptiveAvgPool2d::new(1),
            flatten: Flatten::new(),
            fc: Linear::new(16, CLASSES.len())?,
        })
    }
}

impl Forward for ShapesNet {
    type Output = Tensor;
    fn forward(&self, x: Tensor) -> tessera::nn::Result<Tensor> {
        let x = self.conv1.call(x)?;
        let x = self.pool1.call(self.relu1.call(self.bn1.call(x)?)?)?;
        let x = self.relu2.call(self.bn2.call(self.conv2.call(x)?)?)?;
        self.fc.call(self.flatten.call(self.gap.call(x)?)?)
    }
}
