//! ResNet as torchvision builds it: `resnet18`/`resnet34` of basic blocks and `resnet50` of
//! bottleneck blocks (v1.5: the stride sits on the 3x3 convolution), with torchvision's module
//! names, so its state dicts load unchanged. Per 224x224 image: resnet18 11.7M parameters and
//! 3.64 GFLOP, resnet34 21.8M and 7.3 GFLOP, resnet50 25.6M and 8.2 GFLOP.

use crate::layers::{
    AdaptiveAvgPool2d, BatchNorm2d, Conv2d, Conv2dOptions, Linear, MaxPool2d, MaxPool2dOptions,
    ReLU,
};
use crate::{Call, Forward, Layer, Module, ModuleCore, Result, Sequential};
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

/// torchvision's shortcut: a strided 1x1 convolution and batch norm when the block changes
/// the shape of its input, none otherwise.
fn downsample(cin: usize, cout: usize, stride: usize) -> Result<Option<Sequential>> {
    if stride == 1 && cin == cout {
        return Ok(None);
    }
    Ok(Some(
        Sequential::new()
            .add(conv(cin, cout, 1, stride, 0)?)
            .add(BatchNorm2d::new(cout)?),
    ))
}

/// `relu(out + shortcut(x))`, the end of every residual block.
/// `bn(conv(x))`, the step every residual block repeats.
fn conv_bn(conv: &Conv2d, bn: &BatchNorm2d, x: Tensor) -> Result<Tensor> {
    bn.call(conv.call(x)?)
}

fn add_shortcut(
    relu: &ReLU,
    out: Tensor,
    x: Tensor,
    shortcut: &Option<Sequential>,
) -> Result<Tensor> {
    let identity = match shortcut {
        Some(d) => d.call(x)?,
        None => x,
    };
    relu.call(out.add(&identity)?)
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
    /// Output channels over `planes`.
    pub const EXPANSION: usize = 1;

    pub fn new(cin: usize, cout: usize, stride: usize) -> Result<Self> {
        Ok(BasicBlock {
            core: ModuleCore::default(),
            conv1: conv(cin, cout, 3, stride, 1)?,
            bn1: BatchNorm2d::new(cout)?,
            relu: ReLU::new(),
            conv2: conv(cout, cout, 3, 1, 1)?,
            bn2: BatchNorm2d::new(cout)?,
            downsample: downsample(cin, cout, stride)?,
        })
    }
}

impl Forward for BasicBlock {
    type Output = Tensor;

    fn forward(&self, x: Tensor) -> Result<Tensor> {
        let out = self
            .relu
            .call(conv_bn(&self.conv1, &self.bn1, x.clone())?)?;
        let out = conv_bn(&self.conv2, &self.bn2, out)?;
        add_shortcut(&self.relu, out, x, &self.downsample)
    }
}

/// 1x1 reduction to `planes`, strided 3x3, 1x1 expansion to `4 * planes`, each with batch
/// norm, plus the shortcut, then ReLU (torchvision's `Bottleneck`, ResNet v1.5).
#[derive(Module)]
pub struct Bottleneck {
    core: ModuleCore,
    pub conv1: Conv2d,
    pub bn1: BatchNorm2d,
    pub conv2: Conv2d,
    pub bn2: BatchNorm2d,
    pub conv3: Conv2d,
    pub bn3: BatchNorm2d,
    pub relu: ReLU,
    pub downsample: Option<Sequential>,
}

impl Bottleneck {
    /// Output channels over `planes`.
    pub const EXPANSION: usize = 4;

    pub fn new(cin: usize, planes: usize, stride: usize) -> Result<Self> {
        let cout = planes * Self::EXPANSION;
        Ok(Bottleneck {
            core: ModuleCore::default(),
            conv1: conv(cin, planes, 1, 1, 0)?,
            bn1: BatchNorm2d::new(planes)?,
            conv2: conv(planes, planes, 3, stride, 1)?,
            bn2: BatchNorm2d::new(planes)?,
            conv3: conv(planes, cout, 1, 1, 0)?,
            bn3: BatchNorm2d::new(cout)?,
            relu: ReLU::new(),
            downsample: downsample(cin, cout, stride)?,
        })
    }
}

impl Forward for Bottleneck {
    type Output = Tensor;

    fn forward(&self, x: Tensor) -> Result<Tensor> {
        let out = self
            .relu
            .call(conv_bn(&self.conv1, &self.bn1, x.clone())?)?;
        let out = self.relu.call(conv_bn(&self.conv2, &self.bn2, out)?)?;
        let out = conv_bn(&self.conv3, &self.bn3, out)?;
        add_shortcut(&self.relu, out, x, &self.downsample)
    }
}

/// Which residual block a [`ResNet`] stacks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResidualBlock {
    Basic,
    Bottleneck,
}

impl ResidualBlock {
    fn expansion(self) -> usize {
        match self {
            ResidualBlock::Basic => BasicBlock::EXPANSION,
            ResidualBlock::Bottleneck => Bottleneck::EXPANSION,
        }
    }

    fn build(self, cin: usize, planes: usize, stride: usize) -> Result<Box<dyn Layer>> {
        Ok(match self {
            ResidualBlock::Basic => Box::new(BasicBlock::new(cin, planes, stride)?),
            ResidualBlock::Bottleneck => Box::new(Bottleneck::new(cin, planes, stride)?),
        })
    }
}

/// torchvision's `ResNet(block, layers, num_classes)`: a 7x7 stem, four stages of residual
/// blocks (64, 128, 256, 512 planes; the last three halve the resolution), global average
/// pooling and a linear classifier.
#[derive(Module)]
pub struct ResNet {
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

/// The name the first ResNet of this crate had; [`ResNet18::new`] builds `resnet18`.
pub type ResNet18 = ResNet;

impl ResNet {
    /// `resnet18(num_classes)`, kept under the name callers of `ResNet18::new` use.
    pub fn new(num_classes: usize) -> Result<Self> {
        Self::resnet18(num_classes)
    }

    /// `layers[i]` blocks of kind `block` in stage `i`.
    pub fn with_layers(
        block: ResidualBlock,
        layers: [usize; 4],
        num_classes: usize,
    ) -> Result<Self> {
        let mut cin = 64;
        let mut stage = |planes: usize, blocks: usize, stride: usize| -> Result<Sequential> {
            let mut seq = Sequential::new();
            for i in 0..blocks {
                seq.push(block.build(cin, planes, if i == 0 { stride } else { 1 })?);
                cin = planes * block.expansion();
            }
            Ok(seq)
        };
        let (layer1, layer2) = (stage(64, layers[0], 1)?, stage(128, layers[1], 2)?);
        let (layer3, layer4) = (stage(256, layers[2], 2)?, stage(512, layers[3], 2)?);
        Ok(ResNet {
            core: ModuleCore::default(),
            conv1: conv(3, 64, 7, 2, 3)?,
            bn1: BatchNorm2d::new(64)?,
            relu: ReLU::new(),
            maxpool: MaxPool2d::with_options(3, MaxPool2dOptions::default().stride(2).padding(1)),
            layer1,
            layer2,
            layer3,
            layer4,
            avgpool: AdaptiveAvgPool2d::new(1),
            fc: Linear::new(512 * block.expansion(), num_classes)?,
        })
    }

    /// torchvision's `resnet18`: basic blocks `[2, 2, 2, 2]`.
    pub fn resnet18(num_classes: usize) -> Result<Self> {
        Self::with_layers(ResidualBlock::Basic, [2, 2, 2, 2], num_classes)
    }

    /// torchvision's `resnet34`: basic blocks `[3, 4, 6, 3]`.
    pub fn resnet34(num_classes: usize) -> Result<Self> {
        Self::with_layers(ResidualBlock::Basic, [3, 4, 6, 3], num_classes)
    }

    /// torchvision's `resnet50`: bottleneck blocks `[3, 4, 6, 3]`.
    pub fn resnet50(num_classes: usize) -> Result<Self> {
        Self::with_layers(ResidualBlock::Bottleneck, [3, 4, 6, 3], num_classes)
    }
}

impl Forward for ResNet {
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
