//! Tracing: a module's ordinary `forward` runs on meta tensors, and every op and every leaf
//! module call it makes is recorded as a graph node (DESIGN.md decision 2).

mod inline;
mod policy;
pub(crate) mod recording;
mod tracer;

pub use inline::inline;
pub use policy::LeafPolicy;
pub use tracer::{TracedGraph, trace, trace_with};
