//! Reference models that tests, benchmarks and examples share.

mod small_cnn;

pub use small_cnn::SmallCnn;
