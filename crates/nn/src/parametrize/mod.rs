//! PyTorch's `torch.nn.utils.parametrize`: a module's parameter or buffer computed from
//! stored tensors by a [`Parametrization`] (orthogonal, weight norm, ...).
//!
//! A module's field stays a handle (`self.weight`) that `forward` reads as before; after
//! [`register_parametrization`] the handle is rebound ([`Tensor::rebind`]) to the value
//! computed from `parametrizations.weight.original` before every `call`, so gradients reach
//! `original`, and `named_parameters`, `state_dict` and the repr show what PyTorch shows.
//!
//! [`Tensor::rebind`]: tessera_tensor::Tensor::rebind

mod cache;
mod dict;
mod list;
mod parametrization;
mod register;

pub use cache::cached;
pub(crate) use dict::{Parametrizations, class_name};
pub use list::ParametrizationList;
pub use parametrization::Parametrization;
pub use register::{
    is_parametrized, parametrization_list, recompute, register_parametrization,
    remove_parametrizations, set_parametrized,
};
