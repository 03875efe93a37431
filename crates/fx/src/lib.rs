//! Tessera's graph IR, the counterpart of `torch.fx.Graph`: a petgraph dataflow graph of
//! placeholder, get_attr, call_module, call_function (an [`Op`](tessera_tensor::Op)), getitem
//! and output nodes, with a shape and dtype on every value, an editing API for passes, a
//! verifier that reports every problem at once, and a printed form that parses back.
//!
//! - Build: [`Graph::placeholder`], [`Graph::get_attr`], [`Graph::call_module`],
//!   [`Graph::call_function`] (output metas from the op's meta function), [`Graph::getitem`],
//!   [`Graph::output`].
//! - Edit: [`Graph::insert_before`] / [`Graph::insert_after`], [`Graph::replace_all_uses_with`],
//!   [`Graph::set_operand`], [`Graph::erase`] (refuses nodes with users),
//!   [`Graph::copy_subgraph`], [`Graph::append_graph`], [`Graph::precedes`]; each edit is
//!   logarithmic in the graph's size.
//! - Check and show: [`Graph::verify`], `Display` / [`Graph::parse`], [`Graph::tabular`],
//!   [`Graph::to_dot`], serde for the whole graph.
//!
//! Tracing modules into a graph, the interpreter and `GraphModule` build on this crate, and
//! [`autodiff::joint_graph`] derives a graph's joint forward+backward graph.
//!
//! ```
//! use tessera_fx::Graph;
//! use tessera_nn::ModuleKind;
//! use tessera_tensor::{DType, Op, TensorMeta, op::UnaryOp};
//!
//! let mut g = Graph::new();
//! let x = g.placeholder("x", TensorMeta::new([1, 3, 32, 32], DType::F32));
//! let conv = g.call_module(
//!     "conv1",
//!     ModuleKind::Conv2d,
//!     "Conv2d(3, 16, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1))",
//!     &[&x],
//!     vec![TensorMeta::new([1, 16, 32, 32], DType::F32)],
//! )?;
//! let relu = g.call_function(Op::Unary(UnaryOp::Relu), &[&conv])?;
//! g.output(&[&relu])?;
//! g.verify()?;
//!
//! let text = g.to_string();
//! assert_eq!(
//!     text,
//!     "graph(x: f32[1, 3, 32, 32]):
//!     %conv1 : f32[1, 16, 32, 32] = call_module[conv1: Conv2d(3, 16, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1))](%x)
//!     %relu : f32[1, 16, 32, 32] = call_function[relu](%conv1)
//!     return %relu
//! "
//! );
//! assert!(Graph::parse(&text)?.same_structure(&g));
//! # Ok::<(), tessera_fx::FxError>(())
//! ```

pub mod artifact;
mod attr_text;
pub mod autodiff;
mod code;
mod dot;
mod edit;
mod error;
pub mod fx_layout;
mod fx_quantized_layout;
mod graph;
pub mod graph_module;
mod graph_serde;
pub mod interpreter;
mod lexer;
pub mod mutations;
mod names;
mod node;
mod node_id;
mod op_syntax;
mod order;
mod parse;
mod parse_error;
mod print;
pub mod rewrite;
pub mod shape_prop;
mod table;
pub mod trace;
pub mod transformer;
mod verify;

pub use edit::ValueMap;
pub use error::{
    ArtifactError, AutodiffError, FxError, InlineError, PatternError, Result, Role, RunError,
    TraceError,
};
pub use fx_layout::FxLayout;
pub use graph::Graph;
pub use graph_module::GraphModule;
pub use mutations::write_back;
pub use names::sanitize as sanitize_name;
pub use node::{Node, NodeKind};
pub use node_id::NodeId;
pub use op_syntax::{op_to_text, parse_op};
pub use parse::ParseError;
pub use verify::{VerifyError, VerifyErrors};
