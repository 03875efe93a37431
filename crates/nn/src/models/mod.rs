//! Reference models that tests, benchmarks and examples share: torchvision's ResNets,
//! MobileNetV2, VGG and Vision Transformer, and a GPT-style decoder, each with PyTorch's
//! state-dict keys.

mod gpt;
mod mobilenet_v2;
mod named;
pub mod note;
mod resnet;
mod small_cnn;
mod vgg;
mod vit;

pub use gpt::{Gpt, GptConfig};
pub use mobilenet_v2::{InvertedResidual, MobileNetV2};
pub use named::NamedSequential;
pub use resnet::{BasicBlock, Bottleneck, ResNet, ResNet18, ResidualBlock};
pub use small_cnn::SmallCnn;
pub use vgg::{VGG11, Vgg, VggLayer};
pub use vit::{Encoder, EncoderBlock, VisionTransformer, VitConfig};

/// torchvision's `resnet18(num_classes=num_classes)`.
pub fn resnet18(num_classes: usize) -> crate::Result<ResNet> {
    ResNet::resnet18(num_classes)
}

/// torchvision's `resnet34(num_classes=num_classes)`.
pub fn resnet34(num_classes: usize) -> crate::Result<ResNet> {
    ResNet::resnet34(num_classes)
}

/// torchvision's `resnet50(num_classes=num_classes)`.
pub fn resnet50(num_classes: usize) -> crate::Result<ResNet> {
    ResNet::resnet50(num_classes)
}

/// torchvision's `mobilenet_v2(num_classes=num_classes, width_mult=width_mult)`.
pub fn mobilenet_v2(num_classes: usize, width_mult: f64) -> crate::Result<MobileNetV2> {
    MobileNetV2::new(num_classes, width_mult)
}

/// torchvision's `vgg11_bn(num_classes=num_classes)`.
pub fn vgg11_bn(num_classes: usize) -> crate::Result<Vgg> {
    Vgg::vgg11_bn(num_classes)
}

/// torchvision's `vit_b_16(num_classes=num_classes)`.
pub fn vit_b_16(num_classes: usize) -> crate::Result<VisionTransformer> {
    VisionTransformer::new(VitConfig::vit_b_16(num_classes))
}
