//! Modules for Tessera: what PyTorch's `torch.nn` and `torch.optim` are for Python.
//!
//! A module is a plain struct with `#[derive(Module)]`: `Parameter` fields are parameters,
//! module fields are children, `#[module(buffer)]` tensor fields are buffers, and one
//! `ModuleCore` field holds the training flag, hooks and run-time registrations. A plain
//! `Tensor` field without `#[module(buffer)]` or `#[module(skip)]` does not compile, so the
//! PyTorch pitfall of an attribute that `parameters()`, `state_dict()` and `to()` silently
//! miss cannot be written.

extern crate self as tessera_nn;

mod backward_hooks;
mod call;
pub mod checkpoint;
pub mod containers;
mod core;
mod error;
mod field;
pub mod hooks;
mod indirect;
mod layer;
mod module;
pub mod optim;
mod parameter;
pub mod parametrizations;
pub mod parametrize;
mod repr;
mod state;
mod state_dict;
mod value;
mod visitor;
mod walk;

pub use call::{Args, Call, Forward, Plain};
pub use checkpoint::{
    load_checkpoint, load_pt, load_pt_state_dict, load_safetensors, save_checkpoint, save_pt,
    save_pt_state_dict, save_safetensors,
};
pub use containers::{ModuleDict, ModuleList, ParameterDict, ParameterList, Sequential};
pub use core::ModuleCore;
pub use error::{NnError, Result};
pub use field::{BufferField, ModuleField};
pub use hooks::HookHandle;
pub use layer::Layer;
pub use module::{Module, ModuleExt};
pub use parameter::Parameter;
pub use repr::repr;
pub use state::IncompatibleKeys;
pub use state_dict::StateDict;
pub use tessera_macros::Module;
pub use value::{Key, Value};
pub use visitor::Visitor;
