//! Modules for Tessera: what PyTorch's `torch.nn` and `torch.optim` are for Python.
//!
//! A module is a plain struct with `#[derive(Module)]`: `Parameter` fields are parameters,
//! module fields are children, `#[module(buffer)]` tensor fields are buffers, and one
//! `ModuleCore` field holds the training flag, hooks and run-time registrations. A plain
//! `Tensor` field without `#[module(buffer)]` or `#[module(skip)]` does not compile, so the
//! PyTorch pitfall of an attribute that `parameters()`, `state_dict()` and `to()` silently
//! miss cannot be written.
//!
//! ```
//! use tessera_nn::{Call, Forward, Module, ModuleCore, ModuleExt, Parameter, Result};
//! use tessera_tensor::{DType, Tensor};
//!
//! #[derive(Module)]
//! struct MyLinear {
//!     core: ModuleCore,
//!     weight: Parameter,
//!     bias: Parameter,
//! }
//!
//! impl Forward for MyLinear {
//!     type Output = Tensor;
//!     fn forward(&self, x: Tensor) -> Result<Tensor> {
//!         Ok(x.matmul(&self.weight)?.add(&self.bias)?)
//!     }
//! }
//!
//! let m = MyLinear {
//!     core: ModuleCore::default(),
//!     weight: Parameter::new(Tensor::randn(&[4, 3], DType::F32)?),
//!     bias: Parameter::new(Tensor::zeros(&[3], DType::F32)?),
//! };
//! let y = m.call(Tensor::ones(&[2, 4], DType::F32)?)?;
//! assert_eq!(y.shape(), vec![2, 3]);
//! assert_eq!(m.state_dict()?.keys().collect::<Vec<_>>(), ["weight", "bias"]);
//! assert_eq!(m.repr(), "MyLinear()");
//! # Ok::<(), tessera_nn::NnError>(())
//! ```
//!
//! A bare tensor field is refused at compile time:
//!
//! ```compile_fail
//! use tessera_nn::{Module, ModuleCore};
//! #[derive(Module)]
//! struct Forgetful {
//!     core: ModuleCore,
//!     scale: tessera_tensor::Tensor,
//! }
//! ```
//!
//! Saying what the tensor is compiles:
//!
//! ```
//! use tessera_nn::{Module, ModuleCore};
//! #[derive(Module)]
//! struct Explicit {
//!     core: ModuleCore,
//!     #[module(buffer)]
//!     scale: tessera_tensor::Tensor,
//! }
//! ```

extern crate self as tessera_nn;

mod backward_hooks;
mod call;
mod call_stack;
pub mod checkpoint;
pub mod containers;
mod core;
mod core_methods;
mod error;
mod field;
pub mod hooks;
mod indirect;
pub mod init;
mod layer;
#[doc(hidden)]
pub mod layer_probe;
pub mod layers;
pub mod models;
mod module;
mod module_kind;
pub mod module_trace;
pub mod optim;
mod parameter;
pub mod parametrizations;
pub mod parametrize;
pub mod prune;
pub mod quantized;
mod quantized_tensor;
mod repr;
mod state;
mod state_dict;
mod value;
mod value_state_dict;
mod visitor;
mod walk;
pub use walk::find_child;

pub use call::{Args, Call, Forward, Plain};
pub use call_stack::current_module_path;
pub use checkpoint::{
    CheckpointError, CheckpointLimit, load_checkpoint, load_pt, load_pt_state_dict,
    load_pt_value_state_dict, load_safetensors, save_checkpoint, save_pt, save_pt_state_dict,
    save_pt_value_state_dict, save_safetensors,
};
pub use containers::{ModuleDict, ModuleList, ParameterDict, ParameterList, Sequential};
pub use core::ModuleCore;
pub use error::{NnError, Result};
pub use field::{BufferField, ModuleField};
pub use hooks::{HookCounts, HookHandle, HookId, HookIds};
pub use layer::Layer;
pub use layers::{
    AdaptiveAvgPool2d, AvgPool2d, BCEWithLogitsLoss, BatchNorm1d, BatchNorm2d, Bilinear, Conv1d,
    Conv2d, ConvTranspose2d, CrossEntropyLoss, Dropout, Embedding, Flatten, GELU, GroupNorm,
    Identity, L1Loss, LayerNorm, LeakyReLU, Linear, LogSoftmax, MSELoss, MaxPool2d, NLLLoss, ReLU,
    SiLU, Sigmoid, Softmax, Tanh,
};
pub use module::{Module, ModuleExt};
pub use module_kind::{ModuleKind, ModuleType, OtherKind};
pub use parameter::Parameter;
pub use quantized_tensor::{QuantizedTensor, Quantizer, TorchDtype};
pub use repr::{one_line_repr, repr};
pub use state::IncompatibleKeys;
pub use state_dict::StateDict;
pub use tessera_macros::Module;
pub use value::{Key, Value};
pub use value_state_dict::ValueStateDict;
pub use visitor::Visitor;
