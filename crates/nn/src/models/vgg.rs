//! VGG as torchvision builds it: `features` (3x3 convolutions, optionally with batch norm,
//! ReLU, 2x2 max pooling), `avgpool` to 7x7 and `classifier` (two 4096-wide hidden layers
//! with dropout), with torchvision's key layout (`features.<i>`, `classifier.<i>`).
//! `vgg11_bn` has 132.9M parameters, 103M of them in `classifier.0`.

use crate::layers::{
    AdaptiveAvgPool2d, BatchNorm2d, Conv2d, Conv2dOptions, Dropout, Linear, MaxPool2d,
    MaxPool2dOptions, ReLU,
};
use crate::{Call, Forward, Module, ModuleCore, Result, Sequential};
use tessera_tensor::Tensor;

/// One entry of a VGG configuration: a 3x3 convolution to this many channels, or max pooling.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VggLayer {
    Conv(usize),
    MaxPool,
}

/// torchvision's configuration "A" (VGG-11).
pub const VGG11: &[VggLayer] = {
    use VggLayer::{Conv, MaxPool};
    &[
        Conv(64),
        MaxPool,
        Conv(128),
        MaxPool,
        Conv(256),
        Conv(256),
        MaxPool,
        Conv(512),
        Conv(512),
        MaxPool,
        Conv(512),
        Conv(512),
        MaxPool,
    ]
};

/// torchvision's `VGG(features, num_classes)` (dropout 0.5).
#[derive(Module)]
#[module(name = "VGG")]
pub struct Vgg {
    core: ModuleCore,
    pub features: Sequential,
    pub avgpool: AdaptiveAvgPool2d,
    pub classifier: Sequential,
}

impl Vgg {
    /// torchvision's `make_layers(config, batch_norm)` followed by the classifier; the last
    /// convolution of `config` sets the classifier's input width (times 7x7).
    pub fn with_config(config: &[VggLayer], batch_norm: bool, num_classes: usize) -> Result<Self> {
        let mut features = Sequential::new();
        let mut cin = 3;
        for layer in config {
            match *layer {
                VggLayer::MaxPool => features.append(MaxPool2d::with_options(
                    2,
                    MaxPool2dOptions::default().stride(2),
                )),
                VggLayer::Conv(cout) => {
                    let options = Conv2dOptions::default().padding(1);
                    features.append(Conv2d::with_options(cin, cout, 3, options)?);
                    if batch_norm {
                        features.append(BatchNorm2d::new(cout)?);
                    }
                    features.append(ReLU::with_inplace(true));
                    cin = cout;
                }
            }
        }
        let classifier = Sequential::new()
            .add(Linear::new(cin * 7 * 7, 4096)?)
            .add(ReLU::with_inplace(true))
            .add(Dropout::new(0.5)?)
            .add(Linear::new(4096, 4096)?)
            .add(ReLU::with_inplace(true))
            .add(Dropout::new(0.5)?)
            .add(Linear::new(4096, num_classes)?);
        Ok(Vgg {
            core: ModuleCore::default(),
            features,
            avgpool: AdaptiveAvgPool2d::new((7, 7)),
            classifier,
        })
    }

    /// torchvision's `vgg11_bn`: configuration "A" with batch norm.
    pub fn vgg11_bn(num_classes: usize) -> Result<Self> {
        Self::with_config(VGG11, true, num_classes)
    }
}

impl Forward for Vgg {
    type Output = Tensor;

    fn forward(&self, x: Tensor) -> Result<Tensor> {
        let x = self.avgpool.call(self.features.call(x)?)?;
        self.classifier.call(x.flatten(1, -1)?)
    }
}
