//! Reference models that tests, benchmarks and examples share.

pub mod note;
mod resnet;
mod small_cnn;

pub use resnet::{BasicBlock, ResNet18};
pub use small_cnn::SmallCnn;
