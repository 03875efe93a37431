//! Reference models that tests, benchmarks and examples share.

mod resnet;
mod small_cnn;

pub use resnet::{BasicBlock, ResNet18};
pub use small_cnn::SmallCnn;
