//! ResNet-18 as torchvision builds it (basic blocks, downsampling shortcuts), for tracing and
//! benchmarks: 11.7M parameters, 3.64 GFLOP per 224x224 image.

use crate::layers::{
    AdaptiveAvgPool2d, BatchNorm2d, Conv2d, Conv2dOptions, Linear, MaxPool2d, MaxPool2dOptions,
    ReLU,
};
use crate::{Call, Forward, Module, ModuleCore, Result, Sequential};
use tessera_tensor::Tensor;

fn conv(cin: usize, cout: usize, kernel: usize, stride: usize, padding: usize) -> Result<Conv2d> {
    Conv2d::with_options(
        cin,
        cout,
        kernel,
        Conv2dOptions::default()
            .stride(stride)
            .padding(padding)
            .bias(false),
    )
}

/// Two 3x3 convolutions with batch norm, plus the input (through a 1x1 convolution when the
/// shape changes), then ReLU.
#[derive(Module)]
pub struct BasicBlock {
    core: ModuleCore,
    pub conv1: Conv2d,
    pub bn1: BatchNorm2d,
    pub relu: ReLU,
    pub conv2: Conv2d,
    pub bn2: BatchNorm2d,
    pub downsample: Option<Sequential>,
}

impl BasicBlock {
    pub fn new(cin: usize, cout: usize, stride: usize) -> Result<Self> {
        let downsample = if stride != 1 || cin != cout {
            Some(
                Sequential::new()
                    .add(conv(cin, cout, 1, stride, 0)?)
                    .add(BatchNorm2d::new(cout)?),
            )
        } else {
            None
        };
        Ok(BasicBlock {
            core: ModuleCore::default(),
            conv1: conv(cin, cout, 3, stride, 1)?,
            bn1: BatchNorm2d::new(cout)?,
            relu: ReLU::new(),
            conv2: conv(cout, cout, 3, 1, 1)?,
            bn2: BatchNorm2d::new(cout)?,
            downsample,
        })
    }
}

impl Forward for BasicBlock {
    type Output = Tensor;

    fn forward(&self, x: Tensor) -> Result<Tensor> {
        let out = self
            .relu
            .call(self.bn1.call(self.conv1.call(x.clone())?)?)?;
        let out = self.bn2.call(self.conv2.call(out)?)?;
        let identity = match &self.downsample {
            Some(d) => d.call(x)?,
            None => x,
        };
        self.relu.call(out.add(&identity)?)
    }
}

/// torchvision's `resnet18(num_classes)`.
#[derive(Module)]
#[module(name = "ResNet")]
pub struct ResNet18 {
    core: ModuleCore,
    pub conv1: Conv2d,
    pub bn1: BatchNorm2d,
    pub relu: ReLU,
    pub maxpool: MaxPool2d,
    pub layer1: Sequential,
    pub layer2: Sequential,
    pub layer3: Sequential,
    pub layer4: Sequential,
    pub avgpool: AdaptiveAvgPool2d,
    pub fc: Linear,
}

impl ResNet18 {
    pub fn new(num_classes: usize) -> Result<Self> {
        let layer = |cin: usize, cout: usize, stride: usize| -> Result<Sequential> {
            Ok(Sequential::new()
                .add(BasicBlock::new(cin, cout, stride)?)
                .add(BasicBlock::new(cout, cout, 1)?))
        };
        Ok(ResNet18 {
            core: ModuleCore::default(),
            conv1: conv(3, 64, 7, 2, 3)?,
            bn1: BatchNorm2d::new(64)?,
            relu: ReLU::new(),
            maxpool: MaxPool2d::with_options(3, MaxPool2dOptions::default().stride(2).padding(1)),
            layer1: layer(64, 64, 1)?,
            layer2: layer(64, 128, 2)?,
            layer3: layer(128, 256, 2)?,
            layer4: layer(256, 512, 2)?,
            avgpool: AdaptiveAvgPool2d::new(1),
            fc: Linear::new(512, num_classes)?,
        })
    }
}

impl Forward for ResNet18 {
    type Output = Tensor;

    fn forward(&self, x: Tensor) -> Result<Tensor> {
        let x = self
            .maxpool
            .call(self.relu.call(self.bn1.call(self.conv1.call(x)?)?)?)?;
        let x = self
            .layer4
            .call(self.layer3.call(self.layer2.call(self.layer1.call(x)?)?)?)?;
        self.fc.call(self.avgpool.call(x)?.flatten(1, -1)?)
    }
}
